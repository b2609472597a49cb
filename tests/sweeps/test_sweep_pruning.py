"""Pruning: a fit's validations read while it runs, reported to Optuna at slots of training time, and a
trial the median pruner judges behind the finished ones stopped and recorded as pruned (SQLite, one
worker)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import torch
import yaml

from nerf_lightning.cli import main
from nerf_lightning.runs.record import read_record
from nerf_lightning.sweeps.pruning import CURVE_FILE, CurveReader, TrialReporter


def _line(train_s: float, psnr: float) -> str:
    return json.dumps({"train_s": train_s, "global_step": 1, "metrics": {"val/psnr": psnr}}) + "\n"


def test_the_reader_returns_whole_lines_once(tmp_path: Path) -> None:
    path = tmp_path / CURVE_FILE
    reader = CurveReader(path)
    assert reader.read() == []  # no file yet: the fit has not validated
    path.write_text(_line(0.5, 10.0) + _line(1.2, 11.0)[:20])  # the second line half written
    assert [p["train_s"] for p in reader.read()] == [0.5]
    with open(path, "a") as handle:
        handle.write(_line(1.2, 11.0)[20:])
    assert [p["train_s"] for p in reader.read()] == [1.2]
    assert reader.read() == []


def test_each_slot_of_training_time_is_reported_once_by_its_first_validation(tmp_path: Path) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trial = optuna.create_study(direction="maximize").ask()
    path = tmp_path / CURVE_FILE
    path.write_text(_line(0.4, 10.0) + _line(2.1, 12.0) + _line(2.9, 13.0) + _line(6.0, 14.0))
    reporter = TrialReporter(trial, CurveReader(path), prune_every_s=2.0)
    assert reporter.report_new() is False  # the no-op pruner of a default study never prunes
    assert reporter.reported == {0: 10.0, 1: 12.0, 3: 14.0}  # 2.9 s: slot 1 already had its value


@pytest.mark.slow  # three trials' fits
def test_a_trial_behind_the_finished_ones_is_pruned_and_stopped_keeping_its_last_step(
        tiny_scene: Path, tmp_path: Path) -> None:
    # Grid order for seed 3: 0.01, 0.02, then the rate that learns nothing, judged against the other two.
    # Both learning rates finish before the pruner judges any trial (two startup trials): which of them is
    # ahead at a slot of training time depends on how fast the machine ran each, not on the pruner.
    rates = [0.02, 0.01, 1e-6]
    sweep = {"base": "demo", "data_root": str(tiny_scene), "search": "grid", "trials": 3, "seed": 3,
             "max_time": "00:00:00:04", "objective": "val_psnr", "out": str(tmp_path / "out"),
             "pruner": "median", "prune_every_s": 0.5, "prune_startup_trials": 2,
             "space": {"model.learning_rate": {"type": "categorical", "choices": rates}},
             "fit_args": ["--data.make_demo", "false", "--trainer.enable_progress_bar", "false",
                          "--trainer.limit_val_batches", "1", "--trainer.accelerator", "cpu",
                          "--model.field.num_levels", "4", "--model.field.log2_hashmap_size", "12",
                          "--model.field.max_resolution", "64", "--model.field.hidden_dim", "16",
                          "--model.sampler.resolution", "16", "--trainer.callbacks.max_share", "0.5"]}
    path = tmp_path / "prune.yaml"
    path.write_text(yaml.safe_dump(sweep))
    assert main(["sweep", "--config", str(path)]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    states = {row["params"]["model.learning_rate"]: row["state"] for row in results["trials"]}
    assert states == {0.02: "complete", 0.01: "complete", 1e-6: "pruned"}, results
    [pruned] = [row for row in results["trials"] if row["state"] == "pruned"]
    run = Path(pruned["run"])
    curve = [json.loads(line) for line in (run / CURVE_FILE).read_text().splitlines()]
    assert curve and all(point["metrics"]["val/psnr"] > 0 for point in curve)
    assert [point["train_s"] for point in curve] == sorted(point["train_s"] for point in curve)
    # Stopped as a preempted fit: its last step kept, its record saying it did not run to its budget.
    last = torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    record = read_record(run / "run.json")
    assert record["status"] != "completed" and last["global_step"] == record["global_step"] > 0
    study = optuna.load_study(study_name="prune", storage=f"sqlite:///{tmp_path / 'out' / 'study.db'}")
    [judged] = [t for t in study.trials if t.state.name == "PRUNED"]
    assert max(judged.intermediate_values) >= 1  # judged after the first slot, never in it
