"""A real sweep: two trials, each a ``fit`` and a ``test`` in their own processes on the tiny demo scene, an
SQLite study, the results read back from the files; started again, it goes on where it stopped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nerf_lightning.cli import main
from nerf_lightning.runs.record import newest_evaluation, read_record
from nerf_lightning.sweeps.runner import SweepError, run_sweep
from nerf_lightning.sweeps.space import trial_seed
from nerf_lightning.sweeps.spec import check

REPO = Path(__file__).resolve().parents[2]
# A small field and two steps: what is checked is the sweep's bookkeeping, not the training.
TINY_FIT = ["--data.make_demo", "false", "--trainer.max_steps", "2", "--data.steps_per_epoch", "2",
            "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false",
            "--model.field.num_levels", "4", "--model.field.log2_hashmap_size", "12",
            "--model.field.max_resolution", "64", "--model.field.hidden_dim", "16",
            "--model.sampler.resolution", "16"]


def _sweep_file(tmp_path: Path, scene: Path, **changes: object) -> Path:
    sweep = {"base": "demo", "data_root": str(scene), "search": "grid", "trials": 5,
             "max_time": "00:00:05:00", "objective": "test_psnr", "seed": 3, "out": str(tmp_path / "out"),
             "space": {"model.learning_rate": {"type": "categorical", "choices": [0.02, 0.005]}},
             "fit_args": TINY_FIT, "test_args": ["--trainer.enable_progress_bar", "false"], **changes}
    path = tmp_path / "lr.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


@pytest.fixture(scope="module")
def swept(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep folder after ``nerf-lightning sweep --config lr.yaml`` (a grid of two learning rates)."""
    tmp_path = tmp_path_factory.mktemp("sweep")
    assert main(["sweep", "--config", str(_sweep_file(tmp_path, tiny_scene))]) == 0
    return tmp_path


@pytest.mark.slow
def test_each_trial_is_a_recorded_run_with_its_values_seed_and_test_score(swept: Path) -> None:
    results = json.loads((swept / "out" / "results.json").read_text())
    assert results["study"] == "lr" and results["objective"] == "test_psnr"
    trials = results["trials"]
    assert [t["state"] for t in trials] == ["complete", "complete"]  # a grid of two: no more than its size
    assert sorted(t["params"]["model.learning_rate"] for t in trials) == [0.005, 0.02]
    assert trials[0]["value"] >= trials[1]["value"]  # best first
    for trial in trials:
        run = Path(trial["run"])
        assert run.parent == (swept / "out" / "trials").resolve()
        assert run.name == f"trial-{trial['trial']:04d}"
        record = read_record(run / "run.json")
        assert record["status"] == "completed"
        # The trial's value reached the run: its recorded config, seed and the test it was scored by.
        assert record["config"]["model"]["learning_rate"] == trial["params"]["model.learning_rate"]
        assert record["seed"] == trial["seed"] == trial_seed(3, "lr", trial["trial"])
        evaluation = newest_evaluation(run, "test")
        assert evaluation is not None
        assert evaluation[1]["metrics"]["test"]["test/psnr"] == pytest.approx(trial["value"])
        assert json.loads((run / "trial.json").read_text())["params"] == trial["params"]


@pytest.mark.slow
def test_started_again_it_goes_on_where_it_stopped_and_refuses_another_sweep_in_its_study(
        swept: Path, tiny_scene: Path) -> None:
    lines: list[str] = []
    assert run_sweep(check(yaml.safe_load(_sweep_file(swept, tiny_scene).read_text()), swept / "lr.yaml"),
                     say=lines.append) == 0
    assert not any("trial-0002" in line for line in lines)  # both trials had finished: nothing ran
    assert len(json.loads((swept / "out" / "results.json").read_text())["trials"]) == 2
    other = _sweep_file(swept, tiny_scene, space={"model.learning_rate": {"type": "categorical",
                                                                          "choices": [0.1]}})
    with pytest.raises(SweepError, match="study 'lr' in sqlite:.* was made by another sweep "
                                         r"\(it differs in space\)"):
        run_sweep(check(yaml.safe_load(other.read_text()), other))
