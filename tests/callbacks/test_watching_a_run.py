"""A run shows itself from the first minute: validation by time (``TimedValidation``), one bar for the
whole run (``RunProgressBar``), and a closing summary with the checkpoint and the next commands
(``RunSummary``). One real time-limited fit on the tiny scene serves the slow tests."""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nerf_lightning.callbacks import TimedValidation
from nerf_lightning.callbacks.run_progress_bar import RunProgress
from nerf_lightning.callbacks.run_summary import next_commands
from nerf_lightning.callbacks.timed_validation import ValidationClock, time_validation_due
from tests.helpers.runs import RUN, run_cli, short_run_args

MAX_TIME_S = 3
OVERLAY = """\
trainer:
  enable_progress_bar: true
  callbacks:
    - class_path: nerf_lightning.callbacks.TimedValidation
      init_args:
        first_after_s: 1
        every_s: 1
        max_share: 0.5
    - class_path: nerf_lightning.callbacks.RunSummary
"""
"""The demo config's callbacks with a schedule scaled down to seconds; the bar is the command's default."""


@pytest.fixture(scope="module")
def timed_fit(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The run folder and stdout of a fit limited by time only, on epochs too long to end: every
    validation before the last is one by time."""
    out = tmp_path_factory.mktemp("timed_fit")
    overlay = out / "overlay.yaml"
    overlay.write_text(OVERLAY)
    done = run_cli("fit", *short_run_args(tiny_scene, out, "--trainer.max_time", f"00:00:00:{MAX_TIME_S:02d}",
                                          "--trainer.max_steps", "-1", "--data.steps_per_epoch", "100000",
                                          "--trainer.accelerator", "cpu", "--config", str(overlay)))
    assert done.returncode == 0, done.stderr
    assert [path.name for path in out.iterdir() if path.is_dir()] == [RUN]  # one run folder, named
    return out / RUN, done.stdout


def _events(run: Path) -> EventAccumulator:
    return EventAccumulator(str(run), size_guidance={"scalars": 0, "images": 0}).Reload()


def _checkpoint(run: Path) -> dict:
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def _final_step(run: Path) -> int:
    return int(_checkpoint(run)["global_step"])


@pytest.mark.slow
def test_validation_comes_by_time_before_the_end_and_once_at_the_end(timed_fit: tuple[Path, str]) -> None:
    run, _ = timed_fit
    events = _events(run)
    step = _final_step(run)
    validated = [event.step for event in events.Images("val/preview/000")]  # at trainer.global_step
    assert len(validated) >= 2 and validated[0] < step, validated  # by time, long before an epoch ends
    assert validated[-1] == step and len(set(validated)) == len(validated)  # the end, once
    # Lightning logs scalars at the count of steps before the current one: one less.
    assert [event.step + 1 for event in events.Scalars("val/psnr")] == validated
    # The best checkpoint is written at a validation, with the weights that validation scored.
    scores = {event.step + 1: event.value for event in events.Scalars("val/psnr")}
    best_step = max(scores, key=lambda at: scores[at])
    (best,) = (run / "checkpoints").glob("best-*.ckpt")
    assert best.name == f"best-step{best_step}-psnr{scores[best_step]:.2f}.ckpt"
    assert torch.load(best, map_location="cpu", weights_only=True)["global_step"] == best_step
    state = _checkpoint(run)["callbacks"]["TimedValidation"]
    assert state["validations"] == len(validated)
    assert 0 < state["spent"] < state["elapsed"] and state["elapsed"] >= 0.9 * MAX_TIME_S
    assert state["last_end"] is not None and state["last_duration"] > 0


@pytest.mark.slow
def test_the_summary_names_the_checkpoint_and_commands_the_cli_accepts(timed_fit: tuple[Path, str]) -> None:
    run, stdout = timed_fit
    lines = stdout.splitlines()
    start = next(line for line in lines if line.startswith("nerf-lightning: training in "))
    assert f"tensorboard --logdir {run})" in start and "first validation after 1.0 s of training" in start
    done = next(index for index, line in enumerate(lines) if line.startswith("nerf-lightning: fit done: "))
    summary = lines[done:]
    step = _final_step(run)
    assert summary[0].startswith(f"nerf-lightning: fit done: step {step}, ")
    assert summary[0].endswith(f"; trainer.max_time 00:00:00:{MAX_TIME_S:02d} reached")
    psnr = _events(run).Scalars("val/psnr")
    assert summary[1].startswith(f"  last val/psnr: {psnr[-1].value:.2f} dB at step {step} ({len(psnr)} "
                                 "validations, ")
    assert summary[1].endswith(" s of validating)")
    checkpoint = re.fullmatch(r"  checkpoint: +(\S+)", summary[2])
    assert checkpoint is not None and Path(checkpoint[1]) == run / "checkpoints" / "last.ckpt"
    assert Path(checkpoint[1]).is_file()
    commands = [line.strip() for line in summary[summary.index("  next:") + 1:]]
    assert commands == next_commands(run / "checkpoints" / "last.ckpt", run, run / "config.yaml")
    # The run folder stands for its last.ckpt, and test reads the folder's config.yaml.
    assert shlex.split(commands[0]) == ["nerf-lightning", "test", "--ckpt_path", str(run)]
    assert all(shlex.split(command)[2:4] == ["--ckpt_path", str(run)] for command in commands)
    assert [command.split()[1] for command in commands] == ["test", "view", "render", "export"]
    for command in commands:  # each parses as printed (--print_config: parse, print, exit 0)
        with pytest.raises(SystemExit) as exited:
            run_cli(*shlex.split(command)[1:], "--print_config")
        assert exited.value.code in (0, None), command


@pytest.mark.slow
def test_the_bar_counts_the_run_towards_max_time_not_an_epoch(timed_fit: tuple[Path, str]) -> None:
    run, stdout = timed_fit
    frames = re.split(r"[\r\n]", stdout)
    training = [frame.strip() for frame in frames if frame.startswith("Training ")]
    assert training and not any("Epoch" in frame for frame in frames)
    assert training[-1].startswith("Training 100%|")
    # The time counted against max_time, the final validation after it included: at or just past it.
    assert re.search(rf"step {_final_step(run)} · 0:00:0\d/0:00:0{MAX_TIME_S} · ETA 0:00:00 · ", training[-1])
    assert "val/psnr=" in training[-1] and "v_num" not in training[-1]


def test_time_schedule_first_then_every_then_within_its_share() -> None:
    fresh = ValidationClock()
    assert not time_validation_due(29.9, fresh, first_after_s=30, every_s=60, max_share=0.1)
    assert time_validation_due(30.0, fresh, first_after_s=30, every_s=60, max_share=0.1)
    # A 10 s validation ended at 100 s: 60 s later it is due by time, but 20 s of validating in
    # 170 s is over 10 %; at 190 s it is 20 s of 200 s.
    slow = ValidationClock(elapsed=100.0, validations=1, spent=10.0, last_end=100.0, last_duration=10.0)
    assert not time_validation_due(159.0, slow, first_after_s=30, every_s=60, max_share=0.1)
    assert not time_validation_due(160.0, slow, first_after_s=30, every_s=60, max_share=0.1)
    assert time_validation_due(190.0, slow, first_after_s=30, every_s=60, max_share=0.1)
    fast = ValidationClock(elapsed=100.0, validations=1, spent=1.0, last_end=100.0, last_duration=1.0)
    assert time_validation_due(160.0, fast, first_after_s=30, every_s=60, max_share=0.1)


def test_the_schedule_state_survives_a_checkpoint(tmp_path: Path) -> None:
    """A resumed run starts its clock where the checkpoint's ended and keeps its validations' record;
    the state is plain values, as weights-only loading requires."""
    trained = TimedValidation()
    trained.clock = ValidationClock(elapsed=42.5, validations=3, spent=4.0, last_end=40.0, last_duration=1.5)
    torch.save({"callbacks": {"TimedValidation": trained.state_dict()}}, tmp_path / "state.ckpt")
    resumed = TimedValidation()
    saved = torch.load(tmp_path / "state.ckpt", weights_only=True)
    resumed.load_state_dict(saved["callbacks"]["TimedValidation"])
    assert asdict(resumed.clock) == asdict(trained.clock)
    assert resumed.now() == 42.5
    assert TimedValidation().state_dict() == asdict(ValidationClock())


@pytest.mark.parametrize(("args", "message"), [
    ({"first_after_s": -1}, "first_after_s must be >= 0 seconds, got -1"),
    ({"every_s": 0}, "every_s must be > 0 seconds, got 0"),
    ({"max_share": 0}, r"max_share must be in \(0, 1\], got 0"),
])
def test_a_schedule_that_cannot_run_is_refused(args: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{message}$"):
        TimedValidation(**args)


def test_progress_is_that_of_the_nearest_limit() -> None:
    both = RunProgress(step=500, first_step=0, max_steps=1000, elapsed=30.0, max_time=40.0, run_seconds=30.0)
    assert both.fraction == 0.75 and both.remaining == 10.0  # time runs out first
    assert both.describe() == "step 500/1000 · 0:00:30/0:00:40 · ETA 0:00:10 · 16.7 steps/s"
    resumed = RunProgress(step=600, first_step=400, max_steps=1000, elapsed=50.0, max_time=None,
                          run_seconds=20.0)
    assert resumed.fraction == 0.6 and resumed.remaining == 40.0  # 400 steps at this run's 10 steps/s
    unlimited = RunProgress(step=7, first_step=0, max_steps=None, elapsed=2.0, max_time=None, run_seconds=2.0)
    assert unlimited.fraction is None and unlimited.remaining is None
    assert unlimited.describe() == "step 7 · 0:00:02 · 3.5 steps/s"


def test_next_commands_quote_paths_for_the_shell(tmp_path: Path) -> None:
    run = tmp_path / "my runs" / "run"
    last = run / "checkpoints" / "last.ckpt"
    commands = next_commands(last, run, None)  # no saved config: test asks for the one the run started with
    assert shlex.split(commands[0]) == ["nerf-lightning", "test", "--config", "CONFIG", "--ckpt_path",
                                        str(last)]
    assert shlex.split(commands[2])[-2:] == ["--out", str(run / "render.mp4")]
    whole = next_commands(last, run, run / "config.yaml")  # the run folder's last.ckpt and config.yaml
    assert shlex.split(whole[0]) == ["nerf-lightning", "test", "--ckpt_path", str(run)]
    assert shlex.split(whole[1]) == ["nerf-lightning", "view", "--ckpt_path", str(run)]
    assert shlex.split(whole[2])[-2:] == ["--out", str(run / "render.mp4")]
    best = run / "checkpoints" / "best-step6-psnr20.00.ckpt"  # another checkpoint: named, with the config
    assert shlex.split(next_commands(best, run, run / "config.yaml")[0]) == [
        "nerf-lightning", "test", "--config", str(run / "config.yaml"), "--ckpt_path", str(best)]


def _three_second_fit(scene: Path, out: Path, first_after_s: float, every_s: float,
                      max_share: float, validation_batch_s: float = 0.0) -> tuple[Path, list[int]]:
    """A fit limited to 3 s of training with the given schedule by time: its run folder and the steps it
    validated at. ``validation_batch_s``: each validation batch takes at least this long."""
    overlay = out / "overlay.yaml"
    text = OVERLAY.replace("first_after_s: 1", f"first_after_s: {first_after_s}").replace(
        "every_s: 1", f"every_s: {every_s}").replace("max_share: 0.5", f"max_share: {max_share}")
    if validation_batch_s > 0:
        text += ("    - class_path: tests.helpers.slow_validation.SlowValidation\n"
                 f"      init_args:\n        seconds: {validation_batch_s}\n")
    overlay.write_text(text)
    done = run_cli("fit", *short_run_args(scene, out, "--trainer.max_time", "00:00:00:03",
                                          "--trainer.max_steps", "-1", "--data.steps_per_epoch", "100000",
                                          "--trainer.accelerator", "cpu", "--trainer.enable_progress_bar",
                                          "false", "--config", str(overlay)))
    assert done.returncode == 0, done.stderr
    run = out / RUN
    return run, [event.step for event in _events(run).Images("val/preview/000")]


@pytest.mark.slow
def test_a_validation_due_as_the_time_budget_ends_is_left_to_the_one_at_the_end(tiny_scene: Path,
                                                                                tmp_path: Path) -> None:
    # The first validation by time falls due 0.5 s before max_time ends training, within the 1 s that a
    # validation by time may take (every_s * max_share): one validation, the end's, not two.
    run, validated = _three_second_fit(tiny_scene, tmp_path, first_after_s=2.5, every_s=10, max_share=0.1)
    assert validated == [_final_step(run)], validated
    assert _checkpoint(run)["callbacks"]["TimedValidation"]["validations"] == 1


@pytest.mark.slow
def test_a_validation_that_outlasts_the_time_budget_ends_training(tiny_scene: Path, tmp_path: Path) -> None:
    # A validation by time falls due 0.3 s before max_time ends (more than the 0.05 s it may take:
    # every_s * max_share) and, its two batches held to 0.2 s each, outlasts it: training ends with that
    # validation, not one step and one validation later.
    run, validated = _three_second_fit(tiny_scene, tmp_path, first_after_s=2.7, every_s=0.1, max_share=0.5,
                                       validation_batch_s=0.2)
    assert validated == [_final_step(run)], validated
