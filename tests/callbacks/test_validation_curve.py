"""ValidationCurve: each validation of a fit as one flushed JSON line, its training time counted across a
resume and without the time spent validating."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nerf_lightning.callbacks.validation_curve import CURVE_FILE
from nerf_lightning.cli import main
from tests.helpers.runs import RUN, short_run_args

CURVE = ("--trainer.callbacks+=nerf_lightning.callbacks.ValidationCurve",)


@pytest.mark.slow  # two real fits
def test_each_validation_is_a_line_and_a_resumed_fit_goes_on_counting(tiny_scene: Path,
                                                                      tmp_path: Path) -> None:
    # Three steps per epoch: a validation at the end of each (the demo config validates every epoch).
    assert main(["fit", *short_run_args(tiny_scene, tmp_path, *CURVE, steps=6)]) == 0
    path = tmp_path / RUN / CURVE_FILE
    first = [json.loads(line) for line in path.read_text().splitlines()]
    assert [point["global_step"] for point in first] == [3, 6]
    last = tmp_path / RUN / "checkpoints" / "last.ckpt"
    resumed = short_run_args(tiny_scene, tmp_path, *CURVE, "--ckpt_path", str(last), steps=9)
    assert main(["fit", *resumed]) == 0
    points = [json.loads(line) for line in path.read_text().splitlines()]
    assert points[:2] == first and [point["global_step"] for point in points] == [3, 6, 9]
    seconds = [point["train_s"] for point in points]
    assert 0 < seconds[0] < seconds[1] < seconds[2]  # the resumed clock starts where the checkpoint left it
    assert all(set(point["metrics"]) >= {"val/psnr", "val/ssim"} for point in points)


@pytest.mark.slow  # a real fit that stops at its set-up
def test_a_path_that_cannot_be_written_is_one_line(tiny_scene: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "a-folder"
    folder.mkdir()
    args = short_run_args(tiny_scene, tmp_path, *CURVE, "--trainer.callbacks.path", str(folder), steps=3)
    assert main(["fit", *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("nerf-lightning")]
    assert lines == [f"nerf-lightning: [Errno 21] Is a directory: '{folder}'"], err

