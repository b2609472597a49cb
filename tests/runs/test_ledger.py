"""The ledger (``nerf-lightning runs ROOT...``) over real runs: two trained on one scene, one on another
scene, and a copy of the first tested on another split; each fit and test made by a real Trainer."""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from nerf_lightning.cli import main, run_lightning_cli
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.runs.curves import BENCH_EXTRA, read_curve
from nerf_lightning.runs.ledger import COLUMNS, MISSING, read_ledger
from tests.helpers.runs import printed_and_exited, short_run_args

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@dataclass(frozen=True)
class Runs:
    """The runs under ``root``: ``a`` and ``b`` on the tiny scene (b with another sampler and learning
    rate), ``c`` on another scene, ``a-val`` a copy of ``a`` whose newest test scored the val split."""

    root: Path

    def folder(self, name: str) -> Path:
        return self.root / name

    def test_record(self, name: str) -> dict:
        """The newest test's record, read here from its file (``RUN/test-2`` after ``RUN/test``)."""
        newest = next(path for path in (self.folder(name) / "test-2" / "run.json",
                                        self.folder(name) / "test" / "run.json") if path.is_file())
        return json.loads(newest.read_text())

    def psnr(self, name: str) -> float:
        return self.test_record(name)["metrics"]["test"]["test/psnr"]

    def fingerprint(self, name: str) -> str:
        return json.loads((self.folder(name) / "run.json").read_text())["data"]["fingerprint"]


@pytest.fixture(scope="module")
def runs(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Three 3-step fits and four tests: a, b (tiny scene), c (a smaller scene: other data), then a
    copy of a tested on the val split (a user testing a run again another way)."""
    other = make_demo_scene(tmp_path_factory.mktemp("other") / "demo", num_train=6, num_val=2, num_test=2,
                            resolution=16)
    root = tmp_path_factory.mktemp("ledger")
    uniform = ("--model.sampler", "Uniform", "--model.sampler.num_samples", "16",
               "--model.learning_rate", "0.02")
    for name, scene, extra in (("a", tiny_scene, ()), ("b", tiny_scene, uniform), ("c", other, ())):
        sampler_args = ("--model.sampler.resolution", "16") if not extra else ()  # the config's OccupancyGrid
        run_lightning_cli(["fit", *short_run_args(scene, root, "--run_name", name, *extra, steps=3,
                                                  sampler_args=sampler_args)])
        run_lightning_cli(["test", "--ckpt_path", str(root / name)])
    shutil.copytree(root / "a", root / "a-val")
    run_lightning_cli(["test", "--ckpt_path", str(root / "a-val"), "--data.test_split", "val"])
    return Runs(root)


def _table(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


HEADERS = ["rank", *(column.header for column in COLUMNS if not column.optional)]  # none of these is a trial


def _groups(table: str) -> dict[str, list[dict[str, str]]]:
    """The printed table as ``{group line: [{header: cell}]}``, cells cut where the header's names start
    (the columns are aligned; a cell may hold spaces)."""
    groups: dict[str, list[dict[str, str]]] = {}
    current, starts = None, []
    for line in table.splitlines():
        if line.startswith("group "):
            current = line
            groups[current] = []
        elif line.split()[:2] == ["rank", "run"]:
            starts = []
            for header in HEADERS:
                starts.append(line.index(f"  {header}", starts[-1] if starts else 0) + 2)
        elif current is not None and line.strip():
            ends = [*starts[1:], None]
            groups[current].append({header: line[start:end].strip()
                                    for header, start, end in zip(HEADERS, starts, ends, strict=True)})
    return groups


@pytest.mark.slow
def test_table_groups_by_data_and_evaluation_and_ranks_within_a_group(
        runs: Runs, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _table(["runs", str(runs.root)], capsys)
    assert code == 0 and err == ""
    groups = _groups(out)
    members = {line: sorted(row["run"] for row in rows) for line, rows in groups.items()}
    assert sorted(members.values()) == [["a", "b"], ["a-val"], ["c"]]
    # a and b: same data, same test; ranked by their tests' PSNR as the test records hold it
    (line, rows), = [(line, rows) for line, rows in groups.items() if len(rows) == 2]
    assert f"data {runs.fingerprint('a')[:8]}" in line
    assert "test split test" in line and "test views all" in line
    best, second = sorted("ab", key=runs.psnr, reverse=True)
    assert [(row["rank"], row["run"]) for row in rows] == [("1", best), ("2", second)]
    assert [row["test PSNR"] for row in rows] == [f"{runs.psnr(best):.2f}", f"{runs.psnr(second):.2f}"]
    assert {row["run"]: row["lr"] for row in rows} == {"a": "0.01", "b": "0.02"}
    assert {row["run"]: row["sampler"] for row in rows} == {"a": "OccupancyGrid", "b": "Uniform"}
    assert all(row["field"] == "HashGridField" and row["steps"] == "3" for row in rows)
    assert all(row["data"] == runs.fingerprint("a")[:8] for row in rows)
    # c trained (and was tested) on other data: its own group, ranked first there
    (c_line, c_rows), = [(line, rows) for line, rows in groups.items() if rows[0]["run"] == "c"]
    assert runs.fingerprint("c") != runs.fingerprint("a") and f"data {runs.fingerprint('c')[:8]}" in c_line
    assert c_rows[0]["rank"] == "1"
    (val_line, _), = [(line, rows) for line, rows in groups.items() if rows[0]["run"] == "a-val"]
    assert "test split val" in val_line
    # Not recorded: the fits ran without max_time (null in their config), shown as "-"
    assert all(row["max_time"] == MISSING for rows in groups.values() for row in rows)


@pytest.mark.slow
def test_csv_holds_the_table_with_whole_values(runs: Runs, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _table(["runs", str(runs.root), "--csv", str(tmp_path / "out" / "ledger.csv")], capsys)
    assert code == 0 and "table written to" in out
    with open(tmp_path / "out" / "ledger.csv", newline="") as handle:
        rows = {row["run"]: row for row in csv.DictReader(handle)}
    assert sorted(rows) == ["a", "a-val", "b", "c"]
    for name in rows:
        assert float(rows[name]["test_psnr"]) == pytest.approx(runs.psnr(name))
        ssim = runs.test_record(name)["metrics"]["test"]["test/ssim"]
        assert float(rows[name]["test_ssim"]) == pytest.approx(ssim)
        assert rows[name]["data_fingerprint"] == runs.fingerprint(name)  # whole, not abbreviated
        assert rows[name]["steps"] == "3" and float(rows[name]["train_seconds"]) > 0
        assert rows[name]["max_time"] == ""  # not recorded: an empty cell
        assert Path(rows[name]["folder"]).resolve() == runs.folder(name).resolve()
    assert rows["a"]["group"] == rows["b"]["group"] != rows["c"]["group"] != rows["a-val"]["group"]
    assert rows["a-val"]["group_test_split"] == "val" and rows["a"]["group_test_split"] == "test"
    assert rows["a"]["group_data"] == runs.fingerprint("a") != rows["c"]["group_data"]
    assert sorted([rows["a"]["rank"], rows["b"]["rank"]]) == ["1", "2"]
    assert rows["a"]["learning_rate"] == "0.01" and rows["b"]["learning_rate"] == "0.02"


@pytest.mark.slow
def test_why_says_what_makes_two_runs_comparable_or_not(runs: Runs,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _table(["runs", str(runs.root), "--why", "a", "b"], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(f"comparable: same data {runs.fingerprint('a')[:8]}")
    assert "test split test" in lines[0]
    # Another sampler is one difference, not one per argument of either sampler; run_name is no setting.
    assert lines[1] == (f"settings differ (what the runs compare): config.model.learning_rate, "
                        f"config.model.sampler.class_path (nerf-lightning compare {runs.folder('a')} "
                        f"{runs.folder('b')})")
    assert not any(line.startswith("not comparable") for line in lines)

    code, out, _ = _table(["runs", str(runs.root), "--why", "a", str(runs.folder("c"))], capsys)
    assert code == 0
    reasons = [line for line in out.splitlines() if line.startswith("not comparable")]
    assert reasons[0] == (f"not comparable: data differs: {runs.fingerprint('a')[:8]} (a) vs "
                          f"{runs.fingerprint('c')[:8]} (c)")
    assert any(line.startswith("not comparable: tested on differs") for line in reasons)

    code, out, _ = _table(["runs", str(runs.root), "--why", "a", "a-val"], capsys)
    assert [line for line in out.splitlines() if line.startswith("not comparable")] == [
        "not comparable: test split differs: test (a) vs val (a-val)"]

    code, _, err = _table(["runs", str(runs.root), "--why", "a", "nonesuch"], capsys)
    assert code == 2 and err.strip().startswith("nerf-lightning runs: --why nonesuch: no such run")


@pytest.mark.slow
def test_training_time_and_validation_psnr_come_from_the_event_files(runs: Runs) -> None:
    record = json.loads((runs.folder("a") / "run.json").read_text())
    curve = read_curve(runs.folder("a"))
    assert curve is not None and curve.train_seconds is not None
    # Within the fit's recorded span (whole seconds), and positive: the writer starts before training.
    from datetime import datetime

    span = (datetime.fromisoformat(record["end_time"]) - datetime.fromisoformat(record["start_time"]))
    assert 0 < curve.train_seconds <= span.total_seconds() + 1
    # Every validation, the last one after the final step (Lightning logs it at the step's index, from
    # 0), with the value the run recorded at its end.
    assert curve.val_psnr and curve.val_psnr[-1][1] in (record["global_step"] - 1, record["global_step"])
    seconds = [point[0] for point in curve.val_psnr]
    assert seconds == sorted(seconds) and seconds[-1] <= curve.train_seconds
    assert curve.val_psnr[-1][2] == pytest.approx(record["metrics"]["fit"]["val/psnr"])


@pytest.mark.slow
def test_a_resumed_run_counts_its_sessions_without_the_time_between(runs: Runs, tmp_path: Path) -> None:
    """A copy of run a, resumed to 6 steps well after a's fit ended (the other runs trained in between):
    two event files, whose training times add up; the wall-clock time between them is left out."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    shutil.copytree(runs.folder("a"), tmp_path / "resumed")
    run_lightning_cli(["fit", "--ckpt_path", str(tmp_path / "resumed"), "--trainer.max_steps", "6"])
    files = sorted((tmp_path / "resumed").glob("events.out.tfevents.*"))
    assert len(files) == 2
    starts, ends = [], []  # per session: the writer's first event, the last scalar
    for path in files:
        events = EventAccumulator(str(path), size_guidance={"scalars": 0})
        events.Reload()
        starts.append(events.FirstEventTimestamp())
        ends.append(max(event.wall_time for tag in events.Tags()["scalars"] for event in events.Scalars(tag)))
    gap = starts[1] - ends[0]
    assert gap > 1.0  # the fixture's other fits and tests ran between a's fit and this resume
    first, resumed = read_curve(runs.folder("a")), read_curve(tmp_path / "resumed")
    assert first is not None and resumed is not None
    assert first.train_seconds == pytest.approx(ends[0] - starts[0])
    assert resumed.train_seconds == pytest.approx((ends[0] - starts[0]) + (ends[1] - starts[1]))
    assert resumed.train_seconds < (ends[1] - starts[0]) - 1.0  # the wall-clock span less the gap
    # Validations of both sessions, on one clock: the second session's after the first's.
    assert resumed.val_psnr[: len(first.val_psnr)] == first.val_psnr
    later = resumed.val_psnr[len(first.val_psnr):]
    assert later
    assert all(point[0] > first.train_seconds and point[1] > first.val_psnr[-1][1] for point in later)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_MATPLOTLIB, reason=f"matplotlib is not installed ({BENCH_EXTRA})")
def test_plot_draws_validation_psnr_against_training_time(runs: Runs, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    plot = tmp_path / "curves.png"
    code, out, err = _table(["runs", str(runs.root), "--plot", str(plot)], capsys)
    assert code == 0 and f"plot written to {plot}" in out and err == ""
    with Image.open(plot) as image:
        image.load()  # decodes the whole image
        assert image.format == "PNG" and image.size == (800, 500)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colours is None or len(colours) > 10  # lines, labels and a legend drawn, not a blank page


@pytest.mark.skipif(HAS_MATPLOTLIB, reason="matplotlib is installed: --plot draws")
def test_plot_without_matplotlib_says_how_to_install_it(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _table(["runs", str(tmp_path), "--plot", str(tmp_path / "curves.png")], capsys)
    assert code == 2 and out == ""
    assert err.splitlines() == [f"nerf-lightning runs: --plot needs matplotlib, which the default install "
                                f"leaves out: {BENCH_EXTRA}"]
    assert not (tmp_path / "curves.png").exists()


def test_partial_records_show_dashes_and_unreadable_ones_one_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A record with nothing but a status (a run that failed at once) is listed with "-" for the rest; a
    run.json that is not JSON, or not an object, is one warning line naming it, and left out."""
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "run.json").write_text(json.dumps({"status": "failed"}))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.json").write_text('{"status": "completed", "config": {')
    (tmp_path / "deep" / "listed").mkdir(parents=True)
    (tmp_path / "deep" / "listed" / "run.json").write_text("[1, 2]")

    code, out, err = _table(["runs", str(tmp_path)], capsys)
    assert code == 0
    assert err.splitlines() == [
        f"nerf-lightning runs: warning: {tmp_path / 'broken' / 'run.json'}: not valid JSON (Expecting "
        f"property name enclosed in double quotes at line 1); expected a run record; skipped",
        f"nerf-lightning runs: warning: {tmp_path / 'deep' / 'listed' / 'run.json'}: a JSON list; expected a "
        f"run record (a JSON object); skipped",
    ]
    (rows,) = _groups(out).values()
    assert rows == [{**dict.fromkeys(HEADERS, MISSING), "run": "bare", "status": "failed"}]
    assert len(read_ledger([tmp_path]).runs) == 1

    code, _, err = _table(["runs", str(tmp_path / "nonesuch")], capsys)
    assert code == 2 and err.strip() == (f"nerf-lightning: {tmp_path / 'nonesuch'}: no such folder; "
                                         f"expected a folder holding runs (folders with run.json)")


def test_runs_from_its_printed_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--print_config`` prints the options (the roots a list, ``--why`` a pair) as a file that runs
    unchanged with ``--config``, and gives the same output."""
    for name in ("a", "b"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "run.json").write_text(json.dumps({"status": "completed"}))
    args = ["runs", str(tmp_path / "runs"), "--why", "a", "b"]
    printed = printed_and_exited([*args, "--print_config"], capsys)
    assert yaml.safe_load(printed) == {"roots": [str(tmp_path / "runs")], "why": ["a", "b"], "csv": None,
                                       "plot": None}
    (tmp_path / "runs.yaml").write_text(printed)
    code, direct, _ = _table(args, capsys)
    assert code == 0 and direct.startswith("comparable: same data -")
    assert _table(["runs", "--config", str(tmp_path / "runs.yaml")], capsys) == (0, direct, "")
