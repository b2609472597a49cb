"""Dated benchmark figures in ``benchmarks/RESULTS.md``, the one place measured figures are kept.

RESULTS.md has one section per benchmark: a ``## `` heading, then a marker line
``<!-- bench: NAME -->`` that finds it again, then the entries, newest first. An entry is a ``### ``
heading naming the day, the commit and the machine, followed by the benchmark's own markdown
(tables; its headings are moved two levels down so they stay inside the entry)::

    ### 2026-12-02, commit 1a2b3c4, AMD EPYC 7B13 (2 cores), torch 2.13.0, cpu

:func:`record` puts a new entry at the top of its benchmark's section (the section is added at the end
of the file when missing, the file created when missing). An entry whose heading is the same (the same
day, commit and machine: a rerun, or a benchmark re-rendering its results after adding runs) is
replaced where it stands, so rerunning a subset does not pile up copies.

The benchmark runners take ``--results PATH`` (default ``benchmarks/RESULTS.md``; ``--results ''``
writes nothing) through :func:`add_option` and call :func:`record_to`.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = REPO / "benchmarks" / "RESULTS.md"

SECTIONS: dict[str, str] = {
    "speed": "Speed and scaling of the demo config (`benchmarks.speed`)",
    "samplers": "Samplers side by side at equal training time (`benchmarks.samplers`)",
    "recipes": "Today's configs against the real-capture recipes (`benchmarks.recipes`)",
    "generalise": "Recipes on every scene of their kind, and their train-test gap (`benchmarks.generalise`)",
    "image-cache": "Image cache: first load against a cache hit (`benchmarks.image_cache`)",
    "sweep": "A sweep with several workers on one study (`benchmarks.sweep`)",
    "data-scale": "Data at scale: first load, warm start and cache by dataset size (`benchmarks.data_scale`)",
}
"""Section headings by benchmark name, for a section :func:`record` has to create."""

TITLE = "# Benchmark results\n"


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (else what :mod:`platform` knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return " ".join(value.split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def core_count() -> str:
    """``"2 cores"``, or ``"2 of 64 cores"`` when this process may run on fewer than the machine has."""
    total = os.cpu_count() or 0
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = total
    return f"{usable} of {total} cores" if 0 < usable < total else f"{total} cores"


def device_name() -> str:
    """``cuda (NAME)`` when torch sees a GPU (the benchmarks train on it then), else ``cpu``."""
    import torch

    if torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(0)})"
    return "cpu"


def commit(results: Path | None = None) -> str:
    """``commit <short hash>`` of the checkout, with a note when tracked files differ from it (the
    results file itself aside, which every recorded entry changes)."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    try:
        short = git("rev-parse", "--short", "HEAD")
        exclude = []
        if results is not None and results.resolve().is_relative_to(REPO):
            exclude = [f":(exclude){results.resolve().relative_to(REPO).as_posix()}"]
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", *exclude)
    except (OSError, subprocess.CalledProcessError):
        return "commit unknown (not a git checkout)"
    return f"commit {short}" + (" with uncommitted changes" if dirty else "")


def entry_heading(device: str | None = None, day: datetime.date | None = None,
                  results: Path | None = None) -> str:
    """The ``### `` line of an entry: day, commit and machine (CPU model, cores, torch, device)."""
    import torch

    day = day or datetime.date.today()
    machine = f"{cpu_model()} ({core_count()}), torch {torch.__version__}, {device or device_name()}"
    return f"### {day.isoformat()}, {commit(results)}, {machine}"


def _demoted(body: str) -> list[str]:
    """``body``'s lines with its markdown headings two levels deeper (outside code fences)."""
    lines, fenced = [], False
    for line in body.strip("\n").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            line = "#" * min(level + 2, 6) + line[level:]
        lines.append(line)
    return lines


def record(path: Path, name: str, body: str, *, heading: str | None = None,
           title: str | None = None) -> Path:
    """Put ``body`` (markdown) into ``path`` as the newest entry of benchmark ``name``'s section.

    ``heading`` is the entry's ``### `` line (default :func:`entry_heading`); ``title`` the section's
    heading should it have to be made (default :data:`SECTIONS`'s, else ``name``). Returns ``path``.
    """
    heading = heading or entry_heading(results=path)
    entry = [heading, "", *_demoted(body), ""]
    text = path.read_text() if path.exists() else TITLE
    lines = text.rstrip("\n").splitlines()
    marker = f"<!-- bench: {name} -->"
    if marker not in lines:
        lines += ["", f"## {title or SECTIONS.get(name, name)}", marker, ""]
    start = lines.index(marker) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    entries = [i for i in range(start, end) if lines[i].startswith("### ")]
    same = next((i for i in entries if lines[i] == heading), None)
    if same is not None:  # a rerun: replace that entry where it stands
        after = next((i for i in entries if i > same), end)
        lines[same:after] = entry
    else:  # newest first: before the section's first entry, or at its end
        at = entries[0] if entries else end
        if at == end and lines[at - 1].strip():
            entry = ["", *entry]
        lines[at:at] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text("\n".join(lines).rstrip("\n") + "\n")
    os.replace(temporary, path)
    return path


def add_option(parser: argparse.ArgumentParser) -> None:
    """``--results PATH``: the RESULTS.md a runner adds its dated table to (``''``: none)."""
    parser.add_argument("--results", default=str(DEFAULT_RESULTS), metavar="PATH",
                        help="add the final table, dated, to this file (default: benchmarks/RESULTS.md; "
                             "'' adds nothing)")


def record_to(option: str, name: str, body: str, device: str | None = None) -> Path | None:
    """:func:`record` into the ``--results`` file ``option`` unless it is ``''``; says where."""
    if not option:
        return None
    path = Path(option)
    record(path, name, body, heading=entry_heading(device=device, results=path))
    print(f"results recorded in {path} ({name})", flush=True)
    return path
