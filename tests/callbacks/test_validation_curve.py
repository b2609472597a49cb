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
