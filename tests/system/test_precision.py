"""Mixed precision: a few real training steps give finite losses and keep float32 parameters."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from nerf_lightning.cli import run_lightning_cli
from tests.helpers.runs import short_run_args

_CUDA = torch.cuda.is_available()
CASES = [
    pytest.param("bf16-mixed", "cpu", "OccupancyGrid", id="bf16-cpu-occupancy"),
    pytest.param("bf16-mixed", "cpu", "Proposal", id="bf16-cpu-proposal"),
    pytest.param("bf16-mixed", "gpu", "OccupancyGrid", id="bf16-cuda-occupancy",
                 marks=pytest.mark.skipif(not _CUDA, reason="no CUDA device")),
    pytest.param("16-mixed", "gpu", "OccupancyGrid", id="fp16-cuda-occupancy",
                 marks=pytest.mark.skipif(not _CUDA, reason="no CUDA device")),
    pytest.param("16-mixed", "gpu", "Proposal", id="fp16-cuda-proposal",
                 marks=pytest.mark.skipif(not _CUDA, reason="no CUDA device")),
]


@pytest.mark.parametrize(("precision", "accelerator", "sampler"), CASES)
@pytest.mark.slow
def test_mixed_precision_trains_with_finite_loss_and_float32_parameters(
    precision: str, accelerator: str, sampler: str, tiny_scene: Path, tmp_path: Path
) -> None:
    sampler_args = ("--model.sampler.resolution", "16") if sampler == "OccupancyGrid" else (
        "--model.sampler=Proposal", "--model.sampler.proposal_max_resolution=[32, 64]")
    cli = run_lightning_cli(["fit", *short_run_args(
        tiny_scene, tmp_path, "--trainer.precision", precision, "--trainer.accelerator", accelerator,
        "--trainer.limit_val_batches", "1", steps=5, sampler_args=sampler_args)])
    metrics = cli.trainer.callback_metrics
    assert cli.trainer.global_step == 5 and cli.model.skipped_steps == 0
    assert math.isfinite(float(metrics["train/loss"])) and math.isfinite(float(metrics["val/psnr"]))
    assert all(p.dtype == torch.float32 for p in cli.model.parameters())
    assert all(torch.isfinite(p).all() for p in cli.model.parameters())


def test_occupancy_grid_of_an_untrained_field_is_not_empty_under_bf16_autocast() -> None:
    """bf16 cannot tell a young field's densities apart: the grid update must not run in it."""
    from nerf_lightning.core.types import SceneBox
    from nerf_lightning.fields import HashGridField
    from nerf_lightning.samplers import OccupancyGrid

    torch.manual_seed(0)
    field, grid = HashGridField(), OccupancyGrid(resolution=64)
    field.set_scene_box(SceneBox.cube(1.0))
    grid.set_scene_box(SceneBox.cube(1.0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        grid.update(0, field.density, generator=torch.Generator().manual_seed(0))
    assert 0.1 < grid.occupied_fraction < 0.9
