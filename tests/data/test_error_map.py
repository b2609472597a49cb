"""Error-driven pixel selection: the error map, its floor, and its state across a resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.data.error_map import PixelErrorMap
from tests.helpers.runs import RUN, short_run_args

SHAPES = [(10, 7), (2, 5), (6, 6)]  # odd sizes, and an image smaller than the grid


def _brute_force_tiles(shapes: list[tuple[int, int]], resolution: int) -> torch.Tensor:
    tiles = []
    for image, (height, width) in enumerate(shapes):
        for row in range(height):
            for col in range(width):
                ty = max(t for t in range(resolution) if (t * height) // resolution <= row)
                tx = max(t for t in range(resolution) if (t * width) // resolution <= col)
                tiles.append((image * resolution + ty) * resolution + tx)
    return torch.tensor(tiles)


def _pixel_probabilities(error_map: PixelErrorMap, total_pixels: int) -> torch.Tensor:
    tiles = error_map.tile_of(torch.arange(total_pixels))
    return error_map.probabilities()[tiles] / error_map.tile_pixels[tiles]


def test_tiles_partition_every_image() -> None:
    error_map = PixelErrorMap(SHAPES, resolution=3)
    total = sum(h * w for h, w in SHAPES)
    tiles = error_map.tile_of(torch.arange(total))
    assert torch.equal(tiles, _brute_force_tiles(SHAPES, 3))
    counts = torch.bincount(tiles, minlength=error_map.errors.numel()).float()
    assert torch.equal(counts, error_map.tile_pixels)  # every pixel in exactly one tile


def test_draws_follow_the_error_with_a_floor_for_every_pixel() -> None:
    error_map = PixelErrorMap(SHAPES, resolution=3, uniform_fraction=0.2, smoothing=1.0)
    total = sum(h * w for h, w in SHAPES)
    pixels = torch.arange(total)
    errors = torch.full((total,), 1e-6)
    errors[:10] = 0.5  # the first rows of image 0 are badly wrong
    error_map.update(pixels, errors)
    probability = _pixel_probabilities(error_map, total)
    assert float(probability.sum()) == pytest.approx(1.0)
    assert float(probability.min()) >= 0.2 / total * (1 - 1e-6)  # the floor
    assert float(probability[:7].min()) > 10 * float(probability[-1])  # wrong tiles are favoured
    draws = error_map.sample(200_000, torch.Generator().manual_seed(0))
    frequency = torch.bincount(draws, minlength=total).float() / draws.numel()
    assert torch.allclose(frequency, probability, atol=4e-3)
    assert int(draws.min()) >= 0 and int(draws.max()) < total


def test_only_observed_tiles_move_and_state_round_trips() -> None:
    error_map = PixelErrorMap(SHAPES, resolution=3, smoothing=0.5)
    error_map.update(torch.tensor([0, 1]), torch.tensor([0.2, 0.4]))
    tile = int(error_map.tile_of(torch.tensor([0])))
    assert float(error_map.errors[tile]) == pytest.approx(1.0 + 0.5 * (0.3 - 1.0))
    assert int((error_map.errors != PixelErrorMap.initial_error).sum()) == 1
    restored = PixelErrorMap(SHAPES, resolution=3)
    restored.load_state_dict(error_map.state_dict())
    assert torch.equal(restored.errors, error_map.errors)
    with pytest.raises(ValueError, match="resolution 3"):
        PixelErrorMap(SHAPES, resolution=4).load_state_dict(error_map.state_dict())


def _fit(scene: Path, out: Path, steps: int, *extra: str) -> Path:
    run_lightning_cli(["fit", *short_run_args(scene, out, "--data.pixel_selection", "error",
                                              "--data.error_map_resolution", "4",
                                              "--checkpoint.every_n_train_steps", "1",
                                              "--trainer.limit_val_batches", "0",
                                              "--trainer.accelerator", "cpu",  # bitwise resume: on the CPU
                                              *extra, steps=steps)])
    return out / RUN / "checkpoints" / "last.ckpt"


@pytest.mark.slow
def test_error_selection_trains_and_resumes_exactly(tiny_scene: Path, tmp_path: Path) -> None:
    reference = _fit(tiny_scene, tmp_path / "ref", 6)
    state = torch.load(reference, map_location="cpu", weights_only=True)
    errors = state["NerfDataModule"]["error_map"]["errors"]
    assert errors.shape == (8 * 4 * 4,) and float(errors.max()) <= 1.0
    assert float(errors.min()) < 0.5  # observed tiles moved towards the small errors of this scene

    partial = _fit(tiny_scene, tmp_path / "part", 3)
    assert torch.load(partial, map_location="cpu", weights_only=True)["global_step"] == 3
    resumed = _fit(tiny_scene, tmp_path / "part", 6, "--ckpt_path", str(partial))
    assert resumed == partial  # the run goes on in its folder: its last.ckpt is the resumed run's now
    final = torch.load(resumed, map_location="cpu", weights_only=True)
    assert final["global_step"] == state["global_step"]
    assert torch.equal(final["NerfDataModule"]["error_map"]["errors"], errors)
    for name, value in state["state_dict"].items():
        assert torch.equal(final["state_dict"][name], value), f"{name} differs after resume"
