"""Several workers on one study in a real PostgreSQL server: they share a grid without training a point twice,
and a worker killed mid-trial (SIGKILL to it and its fit) leaves a trial that the next worker fails after
the missed heartbeats and tries again, going on from the killed fit's last checkpoint.

A worker is ``nerf-lightning sweep`` in a process of its own, or (the second worker of each test) run by its
entry point in this test's process, which has torch and Lightning loaded already: the same command, with
the environment the other workers get, less one interpreter's start-up and imports (seconds of CPU on the
two shared cores). The workers run here share one warm-start server for their trials (:func:`one_server`).
Each worker's trials are processes of their own either way."""

from __future__ import annotations

import json
import os
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
from nerf_lightning.runs.record import read_record
from tests.helpers.postgres import postgres_missing, throwaway_postgres
from tests.helpers.runs import ONE_THREAD, REPO_ON_PATH, kill_at_step
from tests.helpers.sweep_starter import one_warm_server

pytestmark = [pytest.mark.slow, pytest.mark.skipif(postgres_missing() is not None,
                                                   reason=postgres_missing() or "")]

STEPS = 4
TINY_FIT = ["--data.make_demo", "false", "--trainer.max_steps", str(STEPS), "--data.steps_per_epoch", "2",
            "--trainer.limit_val_batches", "1", "--trainer.enable_progress_bar", "false",
            "--checkpoint.every_n_train_steps", "1", "--trainer.accelerator", "cpu",
            "--model.field.num_levels", "4", "--model.field.log2_hashmap_size", "12",
            "--model.field.max_resolution", "64", "--model.field.hidden_dim", "16",
            "--model.sampler.resolution", "16"]
WORKER_ENV = {**ONE_THREAD, **REPO_ON_PATH}  # two workers share two cores; the kill callback imports
ENV = {**os.environ, **WORKER_ENV}


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    with throwaway_postgres() as url:
        yield url


@pytest.fixture(scope="module")
def one_server() -> Iterator[None]:
    """The workers run in this process start their trials through one warm-start server
    (``tests/helpers/sweep_starter.py``), which the first of them starts."""
    with one_warm_server():
        yield


def _sweep_file(folder: Path, scene: Path, storage: str, study: str, rates: list[float],
                fit_args: list[str]) -> Path:
    sweep = {"base": "demo", "data_root": str(scene), "search": "grid", "trials": len(rates),
             "max_time": "00:00:05:00", "objective": "val_psnr", "seed": 0, "study": study,
             "out": str(folder / "out"), "storage": storage, "heartbeat_s": 1,
             "space": {"model.learning_rate": {"type": "categorical", "choices": rates}},
             "fit_args": fit_args}
    path = folder / f"{study}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path


def _worker(sweep_file: Path, log: Path, **popen: object) -> subprocess.Popen[bytes]:
    with open(log, "wb") as handle:
        command = [sys.executable, "-m", "nerf_lightning", "sweep", "--config", str(sweep_file)]
        return subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=ENV,
                                **popen)  # type: ignore[arg-type]


def _worker_here(sweep_file: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """A worker in this process: ``nerf-lightning sweep`` by its entry point, its exit code. Its trials' fit
    and test processes get this process's environment, set here as :func:`_worker`'s workers get theirs."""
    for name, value in WORKER_ENV.items():
        monkeypatch.setenv(name, value)
    return main(["sweep", "--config", str(sweep_file)])


def _finish(process: subprocess.Popen[bytes], log: Path) -> int:
    try:
        return process.wait(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        print(log.read_text()[-3000:])


def test_two_workers_share_one_grid_and_never_train_a_point_twice(
        database: str, one_server: None, tiny_scene: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    rates = [0.02, 0.01, 0.005]
    sweep_file = _sweep_file(tmp_path, tiny_scene, database, "shared", rates, TINY_FIT)
    other = _worker(sweep_file, tmp_path / "worker.log")  # started first: it has its imports to do
    try:
        ours = _worker_here(sweep_file, monkeypatch)
    finally:
        theirs = _finish(other, tmp_path / "worker.log")
    assert [ours, theirs] == [0, 0]
    trials = optuna.load_study(study_name="shared", storage=database).get_trials()
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert sorted(t.params["model.learning_rate"] for t in complete) == sorted(rates)
    # Two workers asking at one moment may be handed one point: the later trial withdrew untrained.
    withdrawn = [t for t in trials if t not in complete]
    for trial in withdrawn:
        assert trial.state.name == "FAIL" and trial.user_attrs["duplicate_of"] < trial.number
        assert "run" not in trial.user_attrs
    trained = sorted(path.name for path in (tmp_path / "out" / "trials").iterdir())
    assert trained == sorted(Path(t.user_attrs["run"]).name for t in complete)  # one folder per point
    for trial in complete:
        record = read_record(Path(trial.user_attrs["run"]) / "run.json")
        assert record["status"] == "completed" and record["global_step"] == STEPS
        assert record["config"]["model"]["learning_rate"] == trial.params["model.learning_rate"]


def test_a_killed_workers_trial_is_failed_and_tried_again_from_its_checkpoint(
        database: str, one_server: None, tiny_scene: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    sweep_file = _sweep_file(tmp_path, tiny_scene, database, "killed", [0.01],
                             [*TINY_FIT, *kill_at_step(2, process_group=True)])
    # The first worker and its fit form one process group, which the fit SIGKILLs at step 2.
    first = _worker(sweep_file, tmp_path / "first.log", start_new_session=True)
    assert _finish(first, tmp_path / "first.log") == -signal.SIGKILL
    study = optuna.load_study(study_name="killed", storage=database)
    assert [t.state.name for t in study.get_trials()] == ["RUNNING"]  # nobody told the study
    run = Path(study.get_trials()[0].user_attrs["run"])
    last = run / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 2

    assert _worker_here(sweep_file, monkeypatch) == 0  # the second worker
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["FAIL", "COMPLETE"]
    assert trials[1].params == trials[0].params and trials[1].user_attrs["run"] == str(run)
    record = read_record(run / "run.json")  # the same run folder, resumed from its step-2 checkpoint
    assert record["status"] == "completed" and record["global_step"] == STEPS
    assert str(last) in record["command"]
    assert json.loads((run / "trial.json").read_text())["retry_of"] == 0
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == STEPS
