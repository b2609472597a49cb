"""benchmarks/results.py: dated entries in RESULTS.md, newest first per benchmark, reruns replaced."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import pytest

from benchmarks import results
from benchmarks.results import DEFAULT_RESULTS, add_option, entry_heading, record, record_to

TABLE = "Machine: x.\n\n## demo\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"


def test_an_entry_is_added_newest_first_under_its_section_and_a_rerun_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "RESULTS.md"
    path.write_text("# Benchmark results\n\nIntro.\n\n## Speed\n<!-- bench: speed -->\n\nAbout speed.\n\n"
                    "### 2026-01-01, commit aaaaaaa, old machine\n\nold figures\n\n"
                    "## Viewer\n<!-- bench: viewer -->\n\n### 2025-12-31, v\n\nviewer figures\n")
    heading = "### 2026-02-01, commit bbbbbbb, new machine"
    record(path, "speed", TABLE, heading=heading)
    text = path.read_text()
    order = [text.index(s) for s in ("About speed.", "2026-02-01", "2026-01-01", "## Viewer")]
    assert order == sorted(order)
    assert "#### demo" in text and "\n## demo" not in text  # the table's headings stay inside the entry
    assert "viewer figures" in text and text.startswith("# Benchmark results\n\nIntro.")
    record(path, "speed", TABLE.replace("| 1 | 2 |", "| 3 | 4 |"), heading=heading)
    again = path.read_text()
    assert again.count("2026-02-01") == 1 and "| 3 | 4 |" in again and "| 1 | 2 |" not in again
    assert again.count("2026-01-01") == 1 and again.index("2026-02-01") < again.index("2026-01-01")


def test_a_missing_section_or_file_is_made(tmp_path: Path) -> None:
    path = tmp_path / "new" / "RESULTS.md"
    record(path, "samplers", TABLE, heading="### day, commit c, m")
    record(path, "image-cache", "| x |\n|---|\n| 1 |\n", heading="### day, commit c, m")
    text = path.read_text()
    assert text.startswith("# Benchmark results\n")
    assert "## Samplers side by side" in text and "<!-- bench: samplers -->" in text
    assert text.index("<!-- bench: samplers -->") < text.index("<!-- bench: image-cache -->")
    assert text.endswith("| 1 |\n")


def test_the_heading_names_day_commit_and_machine_and_the_option_can_turn_it_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(results, "commit", lambda results=None: "commit 1a2b3c4")  # git: the slow test below
    heading = entry_heading(device="cpu", day=datetime.date(2026, 12, 2))
    assert heading.startswith("### 2026-12-02, commit 1a2b3c4, ") and " cores), torch " in heading
    assert heading.endswith(", cpu")
    parser = argparse.ArgumentParser()
    add_option(parser)
    assert parser.parse_args([]).results == str(DEFAULT_RESULTS)
    assert record_to(parser.parse_args(["--results", ""]).results, "speed", TABLE) is None
    target = tmp_path / "R.md"
    assert record_to(str(target), "speed", TABLE, device="cpu") == target
    assert "| 1 | 2 |" in target.read_text()


@pytest.mark.slow
def test_the_commit_is_the_checkouts_short_hash(tmp_path: Path) -> None:
    line = results.commit(tmp_path / "R.md")  # a results file outside the checkout: nothing excluded
    assert line.startswith("commit ") and len(line.split()[1]) >= 7
