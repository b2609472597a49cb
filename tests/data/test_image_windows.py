"""Rays from a rotating window of images (``images_per_window``): which images a window holds, how its
pixels are drawn, how the data module moves through windows, and a fit that resumes bitwise with them."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.data.image_windows import ImageWindows
from tests.helpers.runs import RUN, short_run_args

OFFSETS = torch.tensor([0, 100, 250, 300, 500, 560, 600])
"""Six images of unequal sizes (100, 150, 50, 200, 60, 40 pixels)."""


def _image_of(pixels: torch.Tensor) -> torch.Tensor:
    return torch.searchsorted(OFFSETS, pixels, right=True) - 1


def test_a_cycle_of_windows_holds_every_image_once() -> None:
    windows = ImageWindows(OFFSETS, images_per_window=2, seed=0)
    assert windows.windows_per_cycle == 3
    for cycle in range(4):
        images = torch.cat([windows.images(cycle * 3 + slot) for slot in range(3)])
        assert sorted(images.tolist()) == list(range(6))
    # Cycles are shuffled afresh; the same seed gives the same windows, another seed others.
    assert windows.images(0).tolist() != windows.images(3).tolist() or \
        windows.images(1).tolist() != windows.images(4).tolist()
    again, other = ImageWindows(OFFSETS, 2, seed=0), ImageWindows(OFFSETS, 2, seed=1)
    assert all(torch.equal(windows.images(w), again.images(w)) for w in range(9))
    assert any(not torch.equal(windows.images(w), other.images(w)) for w in range(9))


def test_a_window_that_does_not_divide_the_images_is_filled_from_the_cycle_start() -> None:
    windows = ImageWindows(OFFSETS, images_per_window=4, seed=0)
    first, second = windows.images(0), windows.images(1)
    assert len(set(first.tolist())) == 4 and len(set(second.tolist())) == 4
    assert set(first.tolist()) | set(second.tolist()) == set(range(6))
    every = ImageWindows(OFFSETS, images_per_window=99, seed=0)  # at most all images
    assert every.images(5).sort().values.tolist() == list(range(6))


def test_draws_stay_in_the_window_and_are_uniform_over_its_pixels() -> None:
    windows = ImageWindows(OFFSETS, images_per_window=2, seed=3)
    generator = torch.Generator().manual_seed(0)
    for window in range(6):
        chosen = windows.images(window).tolist()
        pixels = windows.sample(20_000, window, generator)
        images = _image_of(pixels)
        assert set(images.unique().tolist()) == set(chosen)
        # Each image's share of the rays is its share of the window's pixels.
        sizes = {i: int(OFFSETS[i + 1] - OFFSETS[i]) for i in chosen}
        for image in chosen:
            share = float((images == image).double().mean())
            assert share == pytest.approx(sizes[image] / sum(sizes.values()), abs=0.02)
        # Every pixel of the window can be drawn, none outside it.
        drawn = torch.zeros(600, dtype=torch.bool)
        drawn[pixels] = True
        inside = torch.zeros(600, dtype=torch.bool)
        for image in chosen:
            inside[OFFSETS[image]:OFFSETS[image + 1]] = True
        assert torch.equal(drawn, inside)


def test_the_data_module_keeps_a_window_for_window_steps_and_ranks_apart(tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), images_per_window=2, window_steps=3, cache=False,
                                rays_per_batch=256, prefetch=False)
    datamodule.setup("fit")
    cpu = torch.device("cpu")
    seen = [frozenset(datamodule.train_batch(step, cpu).camera_indices.tolist()) for step in range(12)]
    windows = [seen[i:i + 3] for i in range(0, 12, 3)]
    assert all(len(set(w)) == 1 and len(w[0]) == 2 for w in windows)  # one window of 2 images per 3 steps
    assert len({w[0] for w in windows}) == 4  # the 8 training images, 2 by 2
    # Under data parallelism, rank r of W takes window (s // window_steps) * W + r: the ranks of a step
    # draw from different images.
    store = ImageWindows(datamodule.splits["train"].images.offsets, 2, datamodule.run_seed)
    for step in (0, 3, 7):
        ranks = [set(store.images((step // 3) * 2 + rank).tolist()) for rank in range(2)]
        assert not ranks[0] & ranks[1]


def test_windows_with_error_driven_selection_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"images_per_window draws rays uniformly.*pixel_selection uniform"):
        NerfDataModule(images_per_window=4, pixel_selection="error")
    with pytest.raises(ValueError, match="window_steps must be a positive number of steps, got 0"):
        NerfDataModule(images_per_window=4, window_steps=0)


@pytest.mark.slow
def test_a_fit_with_windows_resumes_to_the_same_parameters(tiny_scene: Path, tmp_path: Path) -> None:
    windowed = ("--data.images_per_window", "3", "--data.window_steps", "2",
                "--trainer.limit_val_batches", "0", "--checkpoint.every_n_train_steps", "1",
                "--trainer.accelerator", "cpu")
    run_lightning_cli(["fit", *short_run_args(tiny_scene, tmp_path / "straight", *windowed, steps=5)])
    run_lightning_cli(["fit", *short_run_args(tiny_scene, tmp_path / "resumed", *windowed, steps=3)])
    resumed = tmp_path / "resumed" / RUN / "checkpoints" / "last.ckpt"
    run_lightning_cli(["fit", *short_run_args(tiny_scene, tmp_path / "resumed", *windowed, "--ckpt_path",
                                              str(resumed), steps=5)])
    straight = torch.load(tmp_path / "straight" / RUN / "checkpoints" / "last.ckpt", weights_only=False)
    after = torch.load(resumed, weights_only=False)
    assert straight["global_step"] == after["global_step"] == 5
    for name, value in straight["state_dict"].items():
        assert torch.equal(value, after["state_dict"][name]), name
