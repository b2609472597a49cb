"""benchmarks/generalise.py: its table, the scenes it plans, the report with the train-test gap, and one
tiny real run end to end whose figures are read back from the files it left."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.common import RUN, TEST, TRAIN_TEST
from benchmarks.fit_test import train_test_args
from benchmarks.generalise import (
    TABLE,
    TableError,
    load_table,
    main,
    markdown,
    per_config,
    plan,
    suite_scene_root,
    train_scores,
    write,
)


def _run(config: str, psnr: float, train_psnr: float, steps: int = 900,
         cpu_lost: float | None = None) -> dict:
    return {"config": config, "config_file": f"configs/{config}.yaml", "wall_s": 300.0, "steps": steps,
            "cpu_lost": cpu_lost,
            "psnr": psnr, "ssim": 0.8, "train_psnr": train_psnr, "train_ssim": 0.9, "train_views": 100,
            "gap": round(train_psnr - psnr, 3), "samples_per_ray": 20.0,
            "worst_view": {"index": 13, "name": "test/r_13.png", "psnr": psnr - 3.0},
            "previews": {"worst": f"x/{config}/preview_worst.png", "view": None}, "curve": []}


RESULTS = {"machine": {"platform": "x", "torch": "y", "threads": 2},
           "settings": {"wall_s": 300.0, "resolution": 100, "seed": 0, "train_views": "all"},
           "scenes": {"demo": {"kind": "object", "source": "suite",
                               "runs": [_run("blender", 30.0, 33.7, cpu_lost=0.234)]},
                      "thin": {"kind": "object", "source": "suite", "runs": [_run("blender", 24.0, 29.0)]},
                      "fox": {"kind": "360", "source": "capture", "runs": [_run("real", 20.0, 19.5)]}}}


def test_report_has_a_row_per_scene_and_config_with_the_gap_and_a_row_per_config(tmp_path: Path) -> None:
    text = markdown(RESULTS)
    assert ("| scene | kind | config | test PSNR | SSIM | train PSNR | gap | steps | train s | CPU lost "
            "| worst test view |") in text
    worst = ("view 13 `test/r_13.png`, 27.00 dB"
             "<br>![demo blender worst test view](x/blender/preview_worst.png)")
    assert f"| demo | object | blender | 30.00 | 0.800 | 33.70 | +3.70 | 900 | 300 | 23 % | {worst} |" in text
    assert "| thin | object | blender | 24.00 | 0.800 | 29.00 | +5.00 | 900 | 300 | - |" in text  # unknown
    assert "| fox | 360 | real | 20.00 | 0.800 | 19.50 | -0.50 |" in text  # a negative gap keeps its sign
    assert "| blender | object | 2 | 27.00 | 31.35 | +4.35 | +5.00 (thin) |" in text
    assert "| real | 360 | 1 | 20.00 | 19.50 | -0.50 | -0.50 (fox) |" in text
    assert "every training view" in text
    recorded = markdown(RESULTS, with_previews=False)  # what RESULTS.md gets: no images
    assert "![" not in recorded and "| view 13 `test/r_13.png`, 27.00 dB |" in recorded
    assert [row["config"] for row in per_config(RESULTS)] == ["blender", "real"]
    write(RESULTS, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text()) == RESULTS
    assert (tmp_path / "results.md").read_text() == text


def _table(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "extra.yaml"
    path.write_text(text)
    return path


def test_the_shipped_table_gives_each_kind_its_recipe_and_the_captures_their_downscale() -> None:
    table = load_table([TABLE])
    recipes = {kind: [(r.name, r.config_file.name) for r in entries] for kind, entries in table.kinds.items()}
    assert recipes == {"object": [("blender", "blender.yaml")], "360": [("real", "real.yaml")],
                       "forward": [("real-forward", "real-forward.yaml")]}
    assert all(r.config_file.exists() for recipes in table.kinds.values() for r in recipes)
    assert (table.resolution, table.seed, table.suite_scenes, table.train_views) == (100, 0, None, "all")
    assert table.suite_overrides == {"data": {"downscale": 1}}  # rendered at the size they train at
    captures = {name: (c.kind, c.overrides["data"]["downscale"], c.root.name)
                for name, c in table.captures.items()}
    assert captures == {"fox": ("360", 4, "fox"), "fern": ("forward", 8, "fern")}


def test_later_tables_replace_a_kind_captures_and_suite_settings_and_an_unquoted_360_is_a_kind(
        tmp_path: Path) -> None:
    extra = _table(tmp_path, "kinds:\n  360: [configs/real.yaml, {config: configs/nerfstudio.yaml, "
                             "name: today, overrides: {data: {downscale: 2}}}]\n"
                             "suite: {resolution: 24, scenes: [demo]}\n"
                             "captures: {fox: {root: /nowhere, kind: object}}\ntrain_views: 4\n")
    table = load_table([TABLE, extra])
    assert [(r.name, r.overrides) for r in table.kinds["360"]] == [("real", {}),
                                                                  ("today", {"data": {"downscale": 2}})]
    assert [r.name for r in table.kinds["object"]] == ["blender"]  # kinds the extra file leaves alone stay
    assert (table.resolution, table.seed, table.suite_scenes, table.train_views) == (24, 0, ["demo"], 4)
    assert table.suite_overrides == {"data": {"downscale": 1}}
    assert table.captures["fox"].root == Path("/nowhere") and table.captures["fox"].kind == "object"
    assert "fern" in table.captures


@pytest.mark.parametrize(("text", "message"), [
    ("kinds: {indoor: [configs/real.yaml]}\n", r"kinds: unknown kind 'indoor'; expected one of object, 360"),
    ("kinds: {object: configs/blender.yaml}\n", r"kinds\.object: expected a list of config files"),
    ("captures: {x: {root: /a, kind: outdoor}}\n", r"captures\.x\.kind: unknown kind 'outdoor'"),
    ("captures: {x: {kind: object}}\n", r"captures\.x: expected \{root: DIR"),
    ("train_views: 0\n", r"train_views: expected a positive integer, got 0"),
    ("suite: {scenes: demo}\n", r"suite\.scenes: expected 'all' or a list of scene names"),
    ("scene: {}\n", r"unknown field\(s\) \['scene'\]"),
])
def test_a_bad_table_is_refused_naming_its_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = _table(tmp_path, text)
    with pytest.raises(TableError, match=message) as refused:
        load_table([TABLE, path])
    assert str(refused.value).startswith(f"{path}: ")


SUITE = {name: SimpleNamespace(name=name, kind=kind)
         for name, kind in (("demo", "object"), ("thin", "object"), ("360", "360"), ("forward", "forward"))}
"""A stand-in for ``scene_suite.SUITE``: what ``plan`` reads of its scenes."""


def test_the_plan_runs_suite_scenes_then_captures_filtered_by_name_and_kind(tmp_path: Path) -> None:
    extra = _table(tmp_path, "suite: {scene_overrides: {thin: {model: {learning_rate: 0.02}}}}\n")
    table = load_table([TABLE, extra])
    scenes = plan(table, SUITE)
    assert [(s.name, s.kind, s.source) for s in scenes] == [
        ("demo", "object", "suite"), ("thin", "object", "suite"), ("360", "360", "suite"),
        ("forward", "forward", "suite"), ("fox", "360", "capture"), ("fern", "forward", "capture")]
    thin = scenes[1]
    assert thin.root is None
    assert thin.overrides == {"data": {"downscale": 1}, "model": {"learning_rate": 0.02}}
    assert scenes[4].root == table.captures["fox"].root
    assert [s.name for s in plan(table, SUITE, kinds=["360"])] == ["360", "fox"]
    assert [s.name for s in plan(table, SUITE, names=["fern", "demo"])] == ["demo", "fern"]
    assert [s.name for s in plan(table, None)] == ["fox", "fern"]  # no scene suite: the captures only
    with pytest.raises(TableError, match=r"--scenes: not a suite scene nor a capture: \['lego'\]"):
        plan(table, SUITE, names=["lego"])
    only_objects = load_table([TABLE, _table(tmp_path, "kinds: {360: [], forward: []}\n")])
    assert {s.kind for s in plan(only_objects, SUITE)} == {"object"}  # a kind without configs: not run
    with pytest.raises(TableError, match=r"suite\.scenes: not in the scene suite: \['lego'\]"):
        plan(load_table([TABLE, _table(tmp_path, "suite: {scenes: [demo, lego]}\n")]), SUITE)


class _Maker:
    """A stand-in suite scene that counts how often it is made."""

    def __init__(self) -> None:
        self.name, self.kind, self.made = "thin", "object", []

    def make(self, out_dir: Path, *, resolution: int, seed: int) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "transforms_train.json").write_text(json.dumps({"seed": seed}))
        self.made.append((resolution, seed))
        return out_dir


def test_a_suite_scene_is_made_once_per_resolution_and_seed_and_then_reused(tmp_path: Path) -> None:
    maker = _Maker()
    root = suite_scene_root(maker, tmp_path, 24, 0)
    assert root == tmp_path / "thin-24" and maker.made == [(24, 0)]
    assert suite_scene_root(maker, tmp_path, 24, 0) == root and maker.made == [(24, 0)]  # reused
    assert json.loads((tmp_path / "thin-24.json").read_text())["seed"] == 0
    suite_scene_root(maker, tmp_path, 24, 1)  # another seed: made again
    suite_scene_root(maker, tmp_path, 32, 1)  # another resolution: a folder of its own
    assert maker.made == [(24, 0), (24, 1), (32, 1)] and (tmp_path / "thin-32").is_dir()


def test_train_scores_come_from_the_training_views_test_run(tmp_path: Path) -> None:
    metrics = {"test/psnr": 31.25, "test/ssim": 0.93}  # the test stage's names, scored on training views
    (tmp_path / "run.json").write_text(json.dumps({"metrics": {"test": metrics}}))
    (tmp_path / "eval.json").write_text(json.dumps({"views": [{"index": i, "psnr": 31.0} for i in range(4)]}))
    assert train_scores(tmp_path, 28.0) == {"train_psnr": 31.25, "train_ssim": 0.93, "train_views": 4,
                                            "gap": 3.25}


@pytest.mark.parametrize("steps", ["0", "-2"])
def test_a_step_limit_that_is_not_a_positive_count_or_minus_one_is_refused(
        tmp_path: Path, steps: str, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    def no_run(*args: object, **kwargs: object) -> None:
        raise AssertionError("a refused step limit must not train")

    monkeypatch.setattr("benchmarks.generalise.run_one", no_run)
    with pytest.raises(SystemExit) as refused:
        main(["--out", str(tmp_path / "out"), "--max-steps", steps, "--scenes", "demo", "--kinds", "object",
              "--resolution", "16", "--results", ""])
    assert refused.value.code == 2
    assert f"--max-steps: expected a positive number of steps or -1 (no limit), got {steps}" in (
        capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_the_training_views_test_scores_the_train_split_without_panels() -> None:
    every = train_test_args("all")
    assert every[:2] == ["--data.test_split", "train"] and "--trainer.limit_test_batches" not in every
    assert train_test_args("4")[-2:] == ["--trainer.limit_test_batches", "4"]
    with pytest.raises(SystemExit, match=r"--train-views: expected 'all' or a positive count of views"):
        train_test_args("0")


@pytest.mark.slow
def test_a_tiny_run_trains_tests_both_splits_and_reports_from_the_run_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "generalise"
    # A small field and few samples per ray keep the renders of the 20 test views short; the test's own
    # pass over training views (eval_report.train_views), which the benchmark does not read, is off.
    extra = _table(tmp_path, "suite: {scenes: [demo], overrides: {data: {downscale: 1}, model: {field: "
                             "{init_args: {num_levels: 4, log2_hashmap_size: 12, max_resolution: 64, "
                             "hidden_dim: 16}}, sampler: {init_args: {resolution: 16, "
                             "steps_per_diagonal: 64}}}, eval_report: {train_views: 0}}}\n"
                             "train_views: 4\n"
                             "captures: {gone: {root: /nonexistent/capture, kind: object}}\n")
    # Seven steps, well before the clock's minute: the step limit stops the fit (the clock alone:
    # tests/benchmarks/test_bench_speed.py).
    args = ["--out", str(out), "--wall-s", "60", "--max-steps", "7", "--resolution", "16",
            "--scenes", "demo", "gone", "--kinds", "object", "--table", str(TABLE), str(extra),
            "--results", str(tmp_path / "RESULTS.md")]
    # The runner in this process (its run is a process of its own, benchmarks.fit_test): one interpreter
    # start fewer.
    assert main(args) == 0
    assert "skipping gone: /nonexistent/capture not found" in capsys.readouterr().out
    results = json.loads((out / "results.json").read_text())
    assert list(results["scenes"]) == ["demo"] and results["settings"]["train_views"] == 4
    assert results["settings"]["max_steps"] == 7
    entry = results["scenes"]["demo"]
    assert (entry["kind"], entry["source"]) == ("object", "suite")
    (run,) = entry["runs"]
    assert run["config"] == "blender" and run["steps"] == 7
    assert 0.0 <= run["cpu_lost"] <= 1.0  # recorded from the machine's counters around the fit and tests
    run_dir = out / "demo" / "blender"
    # The step limit, not the clock, ended the fit: its curve still gets the point at the end.
    points = [json.loads(line) for line in (run_dir / RUN / "bench_curve.jsonl").read_text().splitlines()]
    assert [p["step"] for p in points if "val_psnr" in p] == [7]
    trained = json.loads((run_dir / "config.json").read_text())
    assert trained["data"]["downscale"] == 1 and trained["data"]["dataset_format"] == "blender"
    # One run folder: the fit's, with both tests in it (the test views' first, the training views' next).
    assert sorted(path.name for path in run_dir.iterdir() if path.is_dir()) == [RUN]
    assert sorted(path.name for path in (run_dir / RUN).glob("test*")) == [TEST, TRAIN_TEST]
    test = json.loads((run_dir / RUN / TEST / "eval.json").read_text())
    train = json.loads((run_dir / RUN / TRAIN_TEST / "eval.json").read_text())
    assert test["split"] == "test" and train["split"] == "train"
    assert len(test["views"]) == 20 and len(train["views"]) == run["train_views"] == 4  # the first 4
    assert run["psnr"] == pytest.approx(test["mean"]["psnr"], abs=1e-3)
    assert run["train_psnr"] == pytest.approx(train["mean"]["psnr"], abs=1e-3)
    assert run["gap"] == pytest.approx(run["train_psnr"] - run["psnr"], abs=1e-3)
    assert (out / run["previews"]["worst"]).is_file()
    assert json.loads((out / "scenes" / "demo-16.json").read_text())["resolution"] == 16
    report = (out / "results.md").read_text()
    assert "| demo | object | blender |" in report and "60 training seconds or 7 steps" in report
    recorded = (tmp_path / "RESULTS.md").read_text()
    assert "<!-- bench: generalise -->" in recorded and "| demo | object | blender |" in recorded
    assert "![" not in recorded
