"""benchmarks/speed.py end to end on a tiny demo scene: a real fit and test per resolution, the
figures read back from the files the runs leave, overrides applied to the config that ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from benchmarks.speed import apply_overrides, main, seconds_to


def test_seconds_to_a_psnr_is_the_first_curve_point_reaching_it() -> None:
    curve = [[5.0, 28.0], [10.0, 30.5], [15.0, 29.9], [20.0, 32.1]]
    assert seconds_to(curve, 30.0) == 10.0
    assert seconds_to(curve, 32.0) == 20.0
    assert seconds_to(curve, 34.0) is None


def test_overrides_set_dotted_keys_with_yaml_values() -> None:
    config = {"model": {"learning_rate": 0.01}}
    apply_overrides(config, ["model.learning_rate=2e-2", "model.field.init_args.compiled=true"])
    assert config == {"model": {"learning_rate": 0.02, "field": {"init_args": {"compiled": True}}}}
    with pytest.raises(SystemExit, match="expected KEY=VALUE"):
        apply_overrides(config, ["model.learning_rate"])


def test_overrides_name_list_items_by_position() -> None:
    config = {"trainer": {"callbacks": [{"class_path": "A"}, {"class_path": "B", "init_args": {"n": 1}}]}}
    apply_overrides(config, ["trainer.callbacks.1.init_args.n=16384"])
    assert config["trainer"]["callbacks"][1] == {"class_path": "B", "init_args": {"n": 16384}}
    with pytest.raises(SystemExit, match=r"trainer\.callbacks\.2\.init_args\.n does not name a place"):
        apply_overrides(config, ["trainer.callbacks.2.init_args.n=1"])


@pytest.mark.slow
def test_speed_bench_runs_each_resolution_and_reports_from_the_run_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "speed"
    # The runner in this process (its runs are processes of their own, benchmarks.fit_test): one
    # interpreter start fewer. The smaller field, fewer samples per ray and two test views keep each
    # run's renders short; the figures are read back from the files all the same.
    monkeypatch.setattr(sys, "argv", [
        "benchmarks.speed", "--out", str(out), "--resolutions", "16", "24",
        "--wall-s", "1", "--curve-every-s", "0.5", "--label", "tiny", "--set", "model.learning_rate=0.02",
        "--set", "model.field.init_args.log2_hashmap_size=12", "--set", "model.field.init_args.num_levels=4",
        "--set", "model.field.init_args.max_resolution=64", "--set", "model.field.init_args.hidden_dim=16",
        "--set", "model.sampler.init_args.resolution=16", "--set",
        "model.sampler.init_args.steps_per_diagonal=64", "--set", "trainer.limit_test_batches=2",
        "--set", "eval_report.train_views=0",
        "--results", str(tmp_path / "RESULTS.md")])
    assert main() == 0
    results = json.loads((out / "results.json").read_text())
    assert [(r["label"], r["resolution"]) for r in results["runs"]] == [("tiny", 16), ("tiny", 24)]
    for run in results["runs"]:
        assert run["steps"] > 0 and run["wall_s"] >= 1.0 and run["peak_memory_mb"] > 0
        assert 0.0 < run["psnr"] < 60.0 and set(run["seconds_to"]) == {"30", "32", "34"}
        assert run["curve"] and run["curve"][-1][0] >= 1.0  # the last point at the end of training
        ran = json.loads((out / f"tiny-{run['resolution']}" / "config.json").read_text())
        assert ran["model"]["learning_rate"] == 0.02
        assert ran["data"]["make_demo"] is False
    scene = out / "scenes" / "demo-24" / "train" / "r_0.png"
    from PIL import Image

    assert Image.open(scene).size == (24, 24)
    assert "| tiny | 24 |" in (out / "results.md").read_text()
    recorded = (tmp_path / "RESULTS.md").read_text()  # the final table, dated, under its section
    assert "<!-- bench: speed -->" in recorded and "| tiny | 24 |" in recorded and "\n### 20" in recorded
