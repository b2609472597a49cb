"""Resuming a run whose ``trainer.max_time`` is spent: one warning line, no training, no harm done."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

from nerf_lightning.callbacks.time_budget import resume_time_notice
from nerf_lightning.cli import main
from tests.helpers.runs import REPO, RUN, short_run_args

MAX_TIME = "00:00:00:02"


def _fit(capfd: pytest.CaptureFixture[str], scene: Path, out: Path, *extra: str) -> tuple[int, str]:
    """Exit code and stderr of ``nerf-lightning fit`` on the tiny scene with a time limit (no step limit)."""
    capfd.readouterr()
    args = short_run_args(scene, out, "--trainer.max_time", MAX_TIME, "--trainer.max_steps", "-1",
                          "--trainer.limit_val_batches", "0", "--trainer.accelerator", "cpu", *extra)
    code = main(["fit", *args])
    return code, capfd.readouterr().err


def _notices(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("nerf-lightning: warning:")]


def _runs(out: Path) -> list[str]:
    """The run folders under ``out``."""
    return sorted(path.name for path in out.iterdir() if path.is_dir())


def _step(run: Path) -> int:
    return int(json.loads((run / "run.json").read_text())["global_step"])


@pytest.mark.slow
def test_resuming_a_spent_time_budget_says_so_and_a_larger_one_trains_on(
    tiny_scene: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / RUN
    code, err = _fit(capfd, tiny_scene, tmp_path)
    assert code == 0 and not _notices(err)  # a fresh run that reaches max_time ends quietly
    last = run / "checkpoints" / "last.ckpt"
    step = _step(run)
    assert step > 0
    digest = hashlib.sha256(last.read_bytes()).hexdigest()

    # The same command, resumed: the budget is spent, so one line says so and nothing trains. It goes
    # on in the same run folder (its record says the same step) and leaves no other folder.
    code, err = _fit(capfd, tiny_scene, tmp_path, "--ckpt_path", str(last))
    assert code == 0
    notices = _notices(err)
    assert len(notices) == 1, err
    notice = notices[0]
    assert f"(step {step})" in notice and f"--trainer.max_time {MAX_TIME}" in notice
    assert "training stops at once" in notice and "--trainer.max_steps N" in notice
    assert _runs(tmp_path) == [RUN]
    assert _step(run) == step
    assert hashlib.sha256(last.read_bytes()).hexdigest() == digest  # the checkpoint is left as it was
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == step

    # A larger budget trains on from the checkpoint (about 2 s more), without the warning, in the same
    # run folder (--ckpt_path the folder itself): its last.ckpt is the resumed run's now.
    code, err = _fit(capfd, tiny_scene, tmp_path, "--ckpt_path", str(run),
                     "--trainer.max_time", "00:00:00:04")
    assert code == 0 and not _notices(err)
    assert _runs(tmp_path) == [RUN]
    assert _step(run) > step
    resumed = torch.load(last, map_location="cpu", weights_only=True)
    assert resumed["global_step"] == _step(run)


def test_notice_for_nearly_spent_and_not_for_a_budget_left() -> None:
    assert resume_time_notice(elapsed=60.0, max_time=180.0, step=500) is None
    assert resume_time_notice(elapsed=170.0, max_time=180.0, step=500) is None  # 10 s left: over 5 %
    nearly = resume_time_notice(elapsed=175.0, max_time=180.0, step=500)
    assert nearly is not None and "stops after about 5.0 s" in nearly
    assert "2 min 55 s of --trainer.max_time 00:00:03:00" in nearly
    spent = resume_time_notice(elapsed=180.4, max_time=180.0, step=500)
    assert spent is not None and "stops at once" in spent
    assert "--trainer.max_time (00:00:06:00: about 3 min 00 s more)" in spent and "(N > 500)" in spent
    assert resume_time_notice(180.0, 180.0, 2400) in (REPO / "README.md").read_text()  # the line it quotes
