"""A real sweep: two trials, each a ``fit`` and a ``test`` in their own processes on the tiny demo scene, an
SQLite study, the results read back from the files; started again, it goes on where it stopped.

The module's sweeps start their trials through one warm-start server (:func:`one_server`) instead of one
each: the second sweep is spared the server's imports (torch, Lightning: seconds of CPU). Each trial's fit
and test are still processes of their own, forked from it as every sweep's are."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import torch
import yaml

from nerf_lightning.cli import main
from nerf_lightning.runs.record import newest_evaluation, read_record
from nerf_lightning.sweeps.runner import SweepError, run_sweep
from nerf_lightning.sweeps.space import trial_seed
from nerf_lightning.sweeps.spec import check
from tests.helpers.runs import ONE_THREAD, REPO_ON_PATH, kill_at_step, sigint_inherited_as
from tests.helpers.sweep_starter import one_warm_server

REPO = Path(__file__).resolve().parents[2]
# A small field and two steps: what is checked is the sweep's bookkeeping, not the training.
TINY_FIT = ["--data.make_demo", "false", "--trainer.max_steps", "2", "--data.steps_per_epoch", "2",
            "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false",
            "--model.field.num_levels", "4", "--model.field.log2_hashmap_size", "12",
            "--model.field.max_resolution", "64", "--model.field.hidden_dim", "16",
            "--model.sampler.resolution", "16", "--trainer.accelerator", "cpu"]  # bitwise on the CPU


def _sweep_file(tmp_path: Path, scene: Path, **changes: object) -> Path:
    sweep = {"base": "demo", "data_root": str(scene), "search": "grid", "trials": 5,
             "max_time": "00:00:05:00", "objective": "test_psnr", "seed": 3, "out": str(tmp_path / "out"),
             "space": {"model.learning_rate": {"type": "categorical", "choices": [0.02, 0.005]}},
             "fit_args": TINY_FIT, "test_args": ["--trainer.enable_progress_bar", "false"], **changes}
    path = tmp_path / "lr.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


@pytest.fixture(scope="module")
def one_server() -> Iterator[None]:
    """The module's sweeps start their trials through one warm-start server
    (``tests/helpers/sweep_starter.py``)."""
    with one_warm_server():
        yield


@pytest.fixture(scope="module")
def swept(one_server: None, tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
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
def test_repeated_from_its_file_it_gives_the_same_trials_and_the_same_test_psnr(swept: Path,
                                                                               tiny_scene: Path) -> None:
    """A second folder, a new study database: the grid comes in the same order with the same seeds, and on
    the CPU each trial's test PSNR is the same number."""
    again = swept / "again"
    again.mkdir()
    assert main(["sweep", "--config", str(_sweep_file(again, tiny_scene))]) == 0

    def trials(folder: Path) -> list[tuple]:
        found = json.loads((folder / "out" / "results.json").read_text())["trials"]
        return sorted((t["trial"], t["params"]["model.learning_rate"], t["seed"], t["value"]) for t in found)

    assert trials(again) == trials(swept)


@pytest.mark.slow
def test_the_ledger_lists_the_trials_as_runs_of_one_group_with_their_study_and_number(
        swept: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = json.loads((swept / "out" / "results.json").read_text())["trials"]
    assert main(["runs", str(swept / "out" / "trials"), "--csv", str(swept / "ledger.csv")]) == 0
    printed = capsys.readouterr().out
    assert printed.count("group ") == 1 and " trial " in printed.splitlines()[1]
    with open(swept / "ledger.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["trial"]: float(row["test_psnr"]) for row in rows} == {
        f"lr#{t['trial']}": pytest.approx(t["value"]) for t in results}
    assert sorted(row["rank"] for row in rows) == ["1", "2"]


@pytest.mark.slow
def test_tensorboard_hparams_hold_every_trial_with_its_value(swept: Path) -> None:
    """Read back from the event files as TensorBoard's HParams plugin reads them."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.plugins.hparams import plugin_data_pb2

    results = json.loads((swept / "out" / "results.json").read_text())["trials"]
    sessions, scalars = {}, {}
    for events in (swept / "out" / "hparams").glob("trial-*/events.out.tfevents.*"):
        for event in EventFileLoader(str(events)).Load():
            for value in event.summary.value:
                if value.tag == "_hparams_/session_start_info":
                    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
                    sessions[events.parent.name] = {k: v.number_value
                                                    for k, v in data.session_start_info.hparams.items()}
                elif value.tag == "test_psnr":
                    scalars[events.parent.name] = value.tensor.float_val[0]
    assert sessions == {f"trial-{t['trial']:04d}": {"model.learning_rate": pytest.approx(t["params"][
        "model.learning_rate"])} for t in results}
    assert scalars == {f"trial-{t['trial']:04d}": pytest.approx(t["value"], abs=1e-5) for t in results}


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


@pytest.mark.slow
def test_a_value_fit_would_refuse_is_one_line_before_any_trial(tiny_scene: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown sampler among the choices: the sweep stops before opening its study, with fit's own
    line (the installed samplers) after the key and the value."""
    space = {"model.sampler": {"type": "categorical", "choices": ["Uniform", "Nonexistent"]}}
    sweep_file = _sweep_file(tmp_path, tiny_scene, space=space, fit_args=[])
    assert main(["sweep", "--config", str(sweep_file)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"nerf-lightning sweep: {sweep_file}: space.model.sampler: 'Nonexistent': ")
    assert "is not an installed sampler; installed: Disparity, Hierarchical, OccupancyGrid" in line
    assert not (tmp_path / "out").exists()  # no study, no folder


@pytest.mark.slow
def test_a_storage_that_cannot_be_reached_is_one_line_without_its_password(
        tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = "postgresql://someone:secret-word@127.0.0.1:9/nowhere"  # port 9 (discard): nothing listens
    # One value: the space is checked (a fit parse per value) before the storage is opened.
    space = {"model.learning_rate": {"type": "categorical", "choices": [0.02]}}
    sweep_file = _sweep_file(tmp_path, tiny_scene, storage=url, space=space)
    assert main(["sweep", "--config", str(sweep_file)]) == 2
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert line.startswith("nerf-lightning sweep: --storage postgresql://someone:***@127.0.0.1:9/nowhere: ")
    assert "secret-word" not in err


@pytest.mark.slow  # a worker in a process of its own, and the same sweep again here
def test_ctrl_c_queues_the_running_trial_which_the_sweep_started_again_resumes_from_its_step(
        one_server: None, tiny_scene: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the worker's terminal (SIGINT to its process group, sent by the trial's fit at step 2):
    the fit keeps its step, the worker queues the trial again, writes its results and ends with 130 and
    one line; started again, the sweep resumes the trial in its run folder from that checkpoint."""
    fit_args = [*TINY_FIT, "--trainer.max_steps", "4", "--checkpoint.every_n_train_steps", "1",
                *kill_at_step(2, process_group=True, sig="SIGINT")]
    sweep_file = _sweep_file(tmp_path, tiny_scene, trials=1, objective="val_psnr", fit_args=fit_args,
                             space={"model.learning_rate": {"type": "categorical", "choices": [0.01]}})
    for name, value in {**ONE_THREAD, **REPO_ON_PATH}.items():  # the trials import the Ctrl-C callback
        monkeypatch.setenv(name, value)
    command = [sys.executable, "-m", "nerf_lightning", "sweep", "--config", str(sweep_file)]
    with sigint_inherited_as(signal.default_int_handler):  # a worker in a terminal's foreground
        worker = subprocess.run(command, capture_output=True, text=True, timeout=300, start_new_session=True)
    assert worker.returncode == 130, worker.stderr[-3000:]
    assert "Traceback" not in worker.stderr
    line = worker.stderr.strip().splitlines()[-1]
    assert line.startswith("nerf-lightning sweep: interrupted; trial-0000 stopped at its last step and "
                           "queued to resume"), worker.stderr[-3000:]
    out = tmp_path / "out"
    study = optuna.load_study(study_name="lr", storage=f"sqlite:///{out / 'study.db'}")
    first, queued = study.get_trials()
    assert (first.state.name, queued.state.name) == ("FAIL", "WAITING")
    assert queued.params == first.params and queued.user_attrs["run"] == first.user_attrs["run"]
    run = Path(first.user_attrs["run"])
    last = run / "checkpoints" / "last.ckpt"
    stopped_at = torch.load(last, map_location="cpu", weights_only=True)["global_step"]
    assert 2 <= stopped_at < 4  # the fit's own Ctrl-C: the step it was in, kept
    assert read_record(run / "run.json")["status"] == "interrupted"
    assert [row["state"] for row in json.loads((out / "results.json").read_text())["trials"]] == [
        "fail", "waiting"]

    assert main(["sweep", "--config", str(sweep_file)]) == 0  # started again
    assert [t.state.name for t in study.get_trials()] == ["FAIL", "COMPLETE"]
    record = read_record(run / "run.json")
    assert record["status"] == "completed" and record["global_step"] == 4 and str(last) in record["command"]
    assert json.loads((run / "trial.json").read_text())["retry_of"] == 0
