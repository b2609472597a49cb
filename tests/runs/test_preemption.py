"""A fit stopped by a real signal keeps its last step: SIGTERM, a scheduler's early signal and Ctrl-C end it
after the step with last.ckpt at that step, the run record saying why, and the documented exit code; the
same command line with ``--ckpt_path last`` resumes it bitwise, with no warning that it would not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nerf_lightning.callbacks.preemption import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE, Preemption
from nerf_lightning.cli import main, run_lightning_cli
from nerf_lightning.runs.record import load_run_record
from tests.helpers.numerics import owned_numerics
from tests.helpers.runs import ONE_THREAD, REPO_ON_PATH, RUN, short_run_args

CPU = ("--trainer.accelerator", "cpu")  # bitwise resume is promised on the CPU only
NOT_RESUMABLE = "not resumable"  # Lightning's warning for a loader that restarts its epoch on resume


def _signal_at(step: int, name: str, *more: str) -> tuple[str, ...]:
    return ("--trainer.callbacks+=tests.helpers.signals.SignalAtStep", "--trainer.callbacks.step", str(step),
            "--trainer.callbacks.signal", name, *more)


def _args(scene: Path, out: Path, *extra: str, steps: int, every: int) -> list[str]:
    return short_run_args(scene, out, "--checkpoint.every_n_train_steps", str(every),
                          "--trainer.limit_val_batches", "0", *CPU, *extra, steps=steps)


def _checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def _run(out: Path) -> Path:
    """The run folder ``short_run_args`` names under ``out``: a resumed fit goes on in it."""
    return out / RUN


@pytest.mark.slow
def test_sigterm_stops_at_the_step_and_the_same_command_line_resumes_bitwise(tiny_scene: Path,
                                                                             tmp_path: Path) -> None:
    steps, every, signalled_at = 10, 3, 4
    out = tmp_path / "preempted"
    command = ["fit", *_args(tiny_scene, out, *_signal_at(signalled_at, "SIGTERM"), steps=steps, every=every)]
    # The run sends itself a real SIGTERM at the start of step 4 (global_step 4: periodic last.ckpt at
    # 3); meanwhile the uninterrupted reference trains in this process, with what a fresh process has.
    preempted = subprocess.Popen([sys.executable, "-m", "nerf_lightning", *command],
                                 env={**os.environ, **ONE_THREAD, **REPO_ON_PATH}, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
    try:
        with owned_numerics(threads=1):
            run_lightning_cli(["fit", *_args(tiny_scene, tmp_path / "ref", steps=steps, every=every)])
        _, err = preempted.communicate(timeout=300)
    finally:
        if preempted.poll() is None:  # a failed run above: leave no process behind
            preempted.kill()
            preempted.wait()
    assert preempted.returncode == PREEMPTED_EXIT_CODE, err[-2000:]
    last = _run(out) / "checkpoints" / "last.ckpt"
    stopped_at = signalled_at + 1  # the step in progress ran to its end
    assert _checkpoint(last)["global_step"] == stopped_at > every
    lines = [line for line in err.splitlines() if line.startswith("nerf-lightning: SIGTERM")]
    assert lines == [f"nerf-lightning: SIGTERM: stopped after step {stopped_at} with {last} written at that "
                     f"step; exit code {PREEMPTED_EXIT_CODE} (resume with the same command and --ckpt_path "
                     "last)"]
    record = load_run_record(_run(out))
    assert record["status"] == "preempted" and record["global_step"] == stopped_at
    stop = record["preemption"]
    assert stop["signal"] == "SIGTERM" and stop["checkpoint"] == str(last)
    assert stop["checkpoint_step"] == stopped_at and stop["checkpoint_at_stop"]
    assert stop["within_grace_period"]

    with owned_numerics(threads=1), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_lightning_cli([*command, "--ckpt_path", "last"])
    assert not [w for w in caught if NOT_RESUMABLE in str(w.message)]
    # The same run folder goes on (no second one): its last.ckpt is now the final step's.
    assert [p.name for p in out.iterdir()] == [RUN]
    reference = _checkpoint(_run(tmp_path / "ref") / "checkpoints" / "last.ckpt")
    resumed = _checkpoint(last)
    assert resumed["global_step"] == steps
    assert reference["state_dict"].keys() == resumed["state_dict"].keys()
    for name, value in reference["state_dict"].items():
        assert torch.equal(value, resumed["state_dict"][name]), f"{name} differs"
    record = load_run_record(_run(out))
    assert record["status"] == "completed" and record["global_step"] == steps
    assert record["resumed"]["checkpoint"] == str(last) and record["resumed"]["step"] == stopped_at
    assert record["resumed"]["signal"] == "SIGTERM" and record["resumed"]["preempted_for_s"] > 0
    assert len(list(_run(out).glob("events.out.tfevents.*"))) == 2  # the stopped fit's and the resumed one's
    events = EventAccumulator(str(_run(out)), size_guidance={"scalars": 0}).Reload()
    [interval] = events.Scalars("preemption/interval_s")
    assert interval.step == stopped_at
    assert interval.value == pytest.approx(record["resumed"]["preempted_for_s"])


@pytest.mark.slow
@pytest.mark.parametrize("times", [1, 2], ids=["ctrl-c", "ctrl-c twice"])
def test_ctrl_c_stops_after_the_step_and_a_second_one_at_once(tiny_scene: Path, tmp_path: Path, times: int,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    # --ckpt_path last on an empty root: the same command line starts fresh and says so.
    signals = _signal_at(3, "SIGINT", "--trainer.callbacks.times", str(times))
    before = signal.getsignal(signal.SIGINT)  # Python's, or SIG_IGN in a pytest-xdist worker
    code = main(["fit", *_args(tiny_scene, out, *signals, steps=8, every=2), "--ckpt_path", "last"])
    err = capsys.readouterr().err
    assert code == INTERRUPTED_EXIT_CODE, err[-2000:]
    fresh = (f"nerf-lightning: --ckpt_path last: no checkpoint {out}/RUN/checkpoints/last.ckpt yet; "
             "training starts fresh")
    assert fresh in err.splitlines()
    assert signal.getsignal(signal.SIGINT) is before  # the process's own handler again after the fit
    last = _run(out) / "checkpoints" / "last.ckpt"
    record = load_run_record(_run(out))
    assert record["status"] == "interrupted" and "error" not in record
    stop = record["preemption"]
    if times == 1:  # the step in progress (global_step 3) ran to its end, and was saved
        assert _checkpoint(last)["global_step"] == 4 == stop["checkpoint_step"] and stop["checkpoint_at_stop"]
    else:  # stopped at once, in step 3: the periodic checkpoint of step 2 stands
        assert _checkpoint(last)["global_step"] == 2 == stop["checkpoint_step"]
        assert not stop["checkpoint_at_stop"]
        assert f"nerf-lightning: SIGINT: a second Ctrl-C: stopped at once; {last} from step 2 stands" in err


@pytest.mark.slow
def test_the_early_signal_past_the_grace_period_keeps_the_periodic_checkpoint_and_says_so(
    tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # SIGUSR1 (SLURM's --signal) at step 3, then a step that would outlast the 0.3 s grace period by far.
    out = tmp_path / "run"
    code = main(["fit", *_args(tiny_scene, out, *_signal_at(3, "SIGUSR1", "--trainer.callbacks.stall", "30"),
                               "--preemption.grace_period", "0.3", "--preemption.exit_code", "99",
                               steps=8, every=2)])
    err = capsys.readouterr().err
    assert code == 99, err[-2000:]
    last = _run(out) / "checkpoints" / "last.ckpt"
    assert _checkpoint(last)["global_step"] == 2
    record = load_run_record(_run(out))
    stop = record["preemption"]
    assert record["status"] == "preempted" and stop["signal"] == "SIGUSR1"
    assert stop["checkpoint_step"] == 2 and not stop["within_grace_period"] and stop["seconds_to_stop"] < 10
    assert (f"nerf-lightning: SIGUSR1: the fit was still busy when the 0.3 s grace period ran out; {last} "
            "from step 2 stands; exit code 99") in err


def test_preemption_refuses_what_would_not_work() -> None:
    assert [s.name for s in Preemption(early_signal="SIGUSR2").signals] == ["SIGTERM", "SIGINT", "SIGUSR2"]
    assert [s.name for s in Preemption(early_signal=None).signals] == ["SIGTERM", "SIGINT"]
    with pytest.raises(ValueError, match="early_signal must name a signal"):
        Preemption(early_signal="SIGINT")
    with pytest.raises(ValueError, match="early_signal must name a signal"):
        Preemption(early_signal="SIGUSR9")
    with pytest.raises(ValueError, match=r"exit_code must be 1-255 \(0 would tell"):
        Preemption(exit_code=0)
    with pytest.raises(ValueError, match="grace_period must be a positive"):
        Preemption(grace_period=0)
