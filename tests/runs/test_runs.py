"""Reproducibility and run records: determinism, exact resume after SIGKILL, atomic saves, run.json."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nerf_lightning.cli import main, run_lightning_cli
from nerf_lightning.runs.compare import compare_runs
from nerf_lightning.runs.record import load_run_record
from tests.helpers.numerics import owned_numerics
from tests.helpers.runs import REPO, REPO_ON_PATH, RUN, kill_at_step, short_run_args

SUBPROCESS_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CPU = ("--trainer.accelerator", "cpu")  # bitwise reproducibility is promised on the CPU only

# Every test trains, or kills a process that imports the package while it writes checkpoints.
pytestmark = pytest.mark.slow


def _state(checkpoint: Path) -> dict[str, torch.Tensor]:
    return torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]


def _assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs"


def _fit(scene: Path, out: Path, *extra: str, steps: int = 6) -> Path:
    run_lightning_cli(
        [
            "fit",
            *short_run_args(
                scene,
                out,
                "--checkpoint.every_n_train_steps",
                "1",
                "--trainer.limit_val_batches",
                "0",
                *CPU,
                *extra,
                steps=steps,
            ),
        ]
    )
    return out / RUN


STEPS = 10
"""Steps of the runs compared bit for bit: past a resume in the middle of an epoch (``short_run_args``:
3 steps an epoch) and into the next epochs."""


@pytest.fixture(scope="module")
def seed_0_run(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of a ``STEPS``-step fit with seed 0 and a checkpoint every step, trained with what a
    fresh process has (one thread, as ``SUBPROCESS_ENV`` gives, and torch's default kernels), whatever
    earlier tests left in this one: the reference of the tests that compare runs, which only read it."""
    with owned_numerics(threads=1):
        return _fit(tiny_scene, tmp_path_factory.mktemp("seed_0"), steps=STEPS)


def test_same_seed_gives_bitwise_identical_parameters(seed_0_run: Path, tiny_scene: Path,
                                                       tmp_path: Path) -> None:
    with owned_numerics(threads=1):
        b = _fit(tiny_scene, tmp_path / "b", steps=STEPS)
        c = _fit(tiny_scene, tmp_path / "c", "--seed_everything", "1", steps=STEPS)
    a = _state(seed_0_run / "checkpoints" / "last.ckpt")
    _assert_bitwise_equal(a, _state(b / "checkpoints" / "last.ckpt"))
    other_seed = _state(c / "checkpoints" / "last.ckpt")
    assert not torch.equal(a["field.encoding.table"], other_seed["field.encoding.table"])


def _cli_command(scene: Path, out: Path, steps: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nerf_lightning",
        "fit",
        *short_run_args(
            scene,
            out,
            "--checkpoint.every_n_train_steps",
            "1",
            "--trainer.limit_val_batches",
            "0",
            *CPU,
            *extra,
            steps=steps,
        ),
    ]


def test_run_killed_with_sigkill_resumes_to_identical_parameters(seed_0_run: Path, tiny_scene: Path,
                                                                 tmp_path: Path) -> None:
    steps, killed_at = STEPS, 4
    out = tmp_path / "killed"
    # The run SIGKILLs itself at the start of step 4, after writing the step-4 checkpoint: a crash
    # at the same moment every time. The uninterrupted reference is seed_0_run.
    with open(tmp_path / "killed.err", "w") as killed_err:
        killed = subprocess.Popen(_cli_command(tiny_scene, out, steps, *kill_at_step(killed_at)),
                                  env={**SUBPROCESS_ENV, **REPO_ON_PATH}, stdout=subprocess.DEVNULL,
                                  stderr=killed_err)
    try:
        assert killed.wait(timeout=300) == -signal.SIGKILL, (tmp_path / "killed.err").read_text()[-2000:]
    finally:
        if killed.poll() is None:  # a failed run above: leave no process behind
            killed.kill()
            killed.wait()
    last = out / RUN / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == killed_at

    with owned_numerics(threads=1):
        run_lightning_cli(["fit", *short_run_args(tiny_scene, out, "--checkpoint.every_n_train_steps", "1",
                                                  "--trainer.limit_val_batches", "0", *CPU, "--ckpt_path",
                                                  str(last), steps=steps)])
    # The resumed fit goes on in the killed run's folder: its last.ckpt is now the final step's.
    assert [p.name for p in out.iterdir()] == [RUN]
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == steps
    assert len(list((out / RUN).glob("events.out.tfevents.*"))) == 2  # the killed fit's and the resumed one's
    _assert_bitwise_equal(_state(seed_0_run / "checkpoints" / "last.ckpt"), _state(last))


def test_kill_during_checkpoint_writing_leaves_a_loadable_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    # One process imports torch once and forks, for each trial, a child that saves to PATH over and over
    # (tests/helpers/process_saver.py); each child is SIGKILLed at another moment of its writing.
    saver = subprocess.Popen([sys.executable, "-m", "tests.helpers.process_saver", str(path)], cwd=REPO,
                             env={**SUBPROCESS_ENV, **REPO_ON_PATH}, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert saver.stdin is not None and saver.stdout is not None
    child = None
    try:
        for trial in range(4):
            saver.stdin.write("fork\n")
            saver.stdin.flush()
            header = saver.stdout.readline().split()
            assert header[0] == "child", header
            child = int(header[1])
            assert saver.stdout.readline().strip().isdigit()  # one complete save
            time.sleep(0.013 * (trial + 1))  # then kill at varying moments, most likely mid-write
            os.kill(child, signal.SIGKILL)
            saver.stdin.write("reap\n")
            saver.stdin.flush()
            while not (line := saver.stdout.readline()).startswith("ended"):
                assert line.strip().isdigit(), line  # saves it finished before the signal came
            assert line.split() == ["ended", str(-signal.SIGKILL)]
            child = None
            value = torch.load(path, weights_only=True)["value"]
            assert value.shape == (4_000_000,) and torch.all(value == value[0])
    finally:
        if child is not None:  # a failed check above: leave no process behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        saver.kill()
        saver.wait()


def test_nonfinite_loss_stops_with_one_line_and_keeps_the_checkpoint(
    tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "fit",
            *short_run_args(
                tiny_scene,
                tmp_path,
                "--model.learning_rate",
                "1e30",
                "--checkpoint.every_n_train_steps",
                "1",
                "--trainer.limit_val_batches",
                "0",
                steps=6,
            ),
        ]
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("nerf-lightning:")]
    assert code == 3 and len(err) == 1 and "training loss is" in err[0] and "nan" in err[0].lower()
    last = tmp_path / RUN / "checkpoints" / "last.ckpt"
    state = _state(last)
    assert all(torch.isfinite(t).all() for t in state.values() if t.is_floating_point())
    record = load_run_record(last.parents[1])
    assert record["status"] == "failed" and "NonFiniteLossError" in record["error"]


def test_nonfinite_loss_can_be_skipped_and_counted(tiny_scene: Path, tmp_path: Path) -> None:
    cli = run_lightning_cli(
        [
            "fit",
            *short_run_args(
                tiny_scene,
                tmp_path,
                "--model.learning_rate",
                "1e30",
                "--model.on_nonfinite_loss",
                "skip",
                "--trainer.limit_val_batches",
                "0",
                steps=6,
            ),
        ]
    )
    assert cli.model.skipped_steps >= 1


def test_run_record_holds_config_versions_plugins_data_and_metrics(seed_0_run: Path,
                                                                   tiny_scene: Path) -> None:
    record = json.loads((seed_0_run / "run.json").read_text())
    assert record["status"] == "completed" and record["seed"] == 0 and record["global_step"] == STEPS
    assert record["config"]["model"]["sampler"]["class_path"].endswith("OccupancyGrid")
    assert record["versions"]["torch"] == torch.__version__.split("+")[0] or record["versions"]["torch"]
    assert {"lightning", "kornia", "jsonargparse", "python"} <= set(record["versions"])
    plugins = {p["name"]: p for p in record["sampler_plugins"]}
    assert plugins["Uniform"]["distribution"] == "nerf-lightning"
    assert record["data"]["root"] == str(tiny_scene)
    assert "train/loss" in record["metrics"]["fit"]
    assert record["git"]["commit"] is None or len(record["git"]["commit"]) == 40
    assert record["start_time"] <= record["end_time"]


SAVED_EVERY, STOPS_AT = 5, 7
"""``other_run`` saves a checkpoint every ``SAVED_EVERY`` steps and stops after ``STOPS_AT``, between two."""


@pytest.fixture(scope="module")
def other_run(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run folder of a ``STOPS_AT``-step fit with learning rate 0.02 and a checkpoint every
    ``SAVED_EVERY`` steps: the run compared with ``seed_0_run``, and one whose training stops between two
    periodic saves. The tests only read it."""
    out = tmp_path_factory.mktemp("other")
    run_lightning_cli(["fit", *short_run_args(tiny_scene, out, "--model.learning_rate", "0.02",
                                              "--checkpoint.every_n_train_steps", str(SAVED_EVERY),
                                              "--trainer.limit_val_batches", "0", steps=STOPS_AT)])
    return out / RUN


def test_compare_prints_config_and_metric_differences(
    seed_0_run: Path, other_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = seed_0_run, other_run  # learning rate 0.01 (the demo config's) and 0.02
    rows = compare_runs(load_run_record(a), load_run_record(b))
    keys = {key for _, key, _, _ in rows}
    assert "config.model.learning_rate" in keys and "metrics.fit.train/loss" in keys
    assert not any(key.startswith("versions.") for key in keys)
    assert main(["compare", str(a), str(b)]) == 0
    printed = capsys.readouterr().out
    assert "config.model.learning_rate" in printed and "0.01" in printed and "0.02" in printed
    assert "[environment] identical" in printed
    assert main(["compare", str(a), str(tmp_path / "missing")]) == 2


def test_last_checkpoint_holds_the_final_step_when_training_stops_between_saves(other_run: Path) -> None:
    last = other_run / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == STOPS_AT
