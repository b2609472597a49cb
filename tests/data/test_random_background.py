"""Random training backgrounds for RGBA scenes: alpha kept by the loaders and the image cache, each
training ray's target recomposited over a colour of its own, and real fits that use them."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.scenes.cache import cached_load_split
from nerf_lightning.scenes.formats.blender import load_blender
from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio
from nerf_lightning.scenes.images import load_image, quantize_to_uint8
from nerf_lightning.scenes.loading import load_split
from tests.helpers.datasets import names_of, rgba_pixels, write_blender, write_image, write_nerfstudio

CPU = torch.device("cpu")


def test_blender_loader_keeps_the_alpha_of_rgba_images(tmp_path: Path) -> None:
    pixels = write_blender(tmp_path)
    split = load_blender(tmp_path, "train")
    assert split.alphas is not None and split.alphas.dtype == torch.uint8
    assert torch.equal(split.alphas, torch.cat([torch.from_numpy(p[..., 3]).reshape(-1) for p in pixels]))
    half = load_blender(tmp_path, "train", downscale=2)
    # Downscaled alpha is the covered share of each 2x2 block, quantised as the images are.
    covered = [torch.from_numpy(p[..., 3]).float().div(255).reshape(3, 2, 4, 2).mean(dim=(1, 3))
               for p in pixels]
    assert half.alphas is not None
    assert torch.equal(half.alphas, torch.cat([quantize_to_uint8(c).reshape(-1) for c in covered]))


def test_rgb_frames_have_no_alpha_and_count_as_opaque_beside_rgba_ones(tmp_path: Path) -> None:
    names = names_of(16)
    write_nerfstudio(tmp_path, names, size=(10, 8))
    assert load_nerfstudio(tmp_path, "train").alphas is None
    rgba = rgba_pixels(10, 8, seed=3)
    write_image(tmp_path / names[1], rgba)  # a train frame (every 8th frame is held out)
    split = load_nerfstudio(tmp_path, "train")
    assert split.alphas is not None and split.alphas.shape == (len(split) * 80,)
    per_frame = split.alphas.view(len(split), 80)
    position = split.names.index(names[1])
    assert torch.equal(per_frame[position], torch.from_numpy(rgba[..., 3]).reshape(-1))
    others = [i for i in range(len(split)) if i != position]
    assert bool((per_frame[others] == 255).all())


def test_the_image_cache_keeps_alpha(tiny_scene: Path, tmp_path: Path) -> None:
    uncached = load_split(tiny_scene, "train")
    assert uncached.alphas is not None
    assert bool((uncached.alphas == 0).any()) and bool((uncached.alphas == 255).any())  # background, objects
    for _ in range(2):  # built, then read back from the entry
        cached = cached_load_split(tiny_scene, "train", cache_dir=tmp_path / "cache")
        assert cached.alphas is not None and torch.equal(cached.alphas, uncached.alphas)


def _data(scene: Path, random_background: bool, rays: int = 4096) -> NerfDataModule:
    data = NerfDataModule(root=str(scene), random_background=random_background, rays_per_batch=rays,
                          cache=False, seed=0)
    data.setup("fit")
    return data


def test_training_targets_are_the_rgba_pixels_over_each_rays_colour(tiny_scene: Path) -> None:
    data = _data(tiny_scene, random_background=True)
    batch = data.train_batch(5, CPU)
    assert batch.background.shape == (4096, 3)
    # The expectation from the PNG files themselves: straight alpha over the ray's colour.
    split = data.splits["train"]
    raw = torch.stack([load_image(tiny_scene / name, file_for_errors="test", frame=i)
                       for i, name in enumerate(split.names)]).reshape(-1, 4)
    assert batch.pixel_indices is not None
    pixel = raw[batch.pixel_indices]
    alpha = pixel[:, 3:]
    expected = pixel[:, :3] * alpha + batch.background * (1.0 - alpha)
    # The stored composite and the stored alpha are each rounded to 1/255.
    assert (batch.rgb - expected).abs().max() <= 1.01 / 255
    transparent = alpha[:, 0] == 0
    assert int(transparent.sum()) > 100 and torch.equal(batch.rgb[transparent], batch.background[transparent])
    colours = batch.background[transparent]
    assert float(colours.std(dim=0).min()) > 0.2  # spread over [0, 1], not one colour

    again = data.train_batch(5, CPU)  # a batch position gives the same rays and colours every time
    assert torch.equal(again.rgb, batch.rgb) and torch.equal(again.background, batch.background)
    assert not torch.equal(data.train_batch(6, CPU).background, batch.background)

    fixed = _data(tiny_scene, random_background=False).train_batch(5, CPU)
    assert fixed.background.shape == (3,) and torch.equal(fixed.pixel_indices, batch.pixel_indices)
    opaque = alpha[:, 0] == 1
    assert torch.equal(fixed.rgb[opaque], batch.rgb[opaque])


def test_random_background_without_alpha_warns_and_trains_over_the_fixed_one(tmp_path: Path) -> None:
    write_nerfstudio(tmp_path, names_of(9))
    with pytest.warns(UserWarning, match=r"data\.random_background: the training images of .* have no alpha"):
        data = _data(tmp_path, random_background=True, rays=64)
    batch = data.train_batch(0, CPU)
    assert batch.background.shape == (3,)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _data(tmp_path, random_background=False, rays=64)


def test_an_empty_field_renders_each_training_ray_over_its_own_colour(tiny_scene: Path) -> None:
    from nerf_lightning.system.module import NerfModule

    data = _data(tiny_scene, random_background=True, rays=512)
    model = NerfModule()
    model.set_scene_box(data.scene_box)
    with torch.no_grad():  # no density anywhere: every ray shows its background
        model.field.density_mlp[-1].bias.fill_(-100.0)
    batch = data.train_batch(0, CPU)
    out, _ = model.render_rays(batch.rays, batch.background, max_samples=10**9)
    torch.testing.assert_close(out.rgb, batch.background)
    assert batch.pixel_indices is not None
    transparent = data.splits["train"].alphas[batch.pixel_indices] == 0
    assert torch.equal(out.rgb[transparent], batch.rgb[transparent])  # a transparent pixel costs nothing
    model.step_sample_limit = 8  # a step cut to its leading rays keeps their colours
    out, samples = model.render_rays(batch.rays, batch.background, max_samples=model.step_sample_limit)
    torch.testing.assert_close(out.rgb, batch.background[: samples.num_rays])


@pytest.mark.slow
def test_a_fit_with_random_backgrounds_runs_and_records_the_option(tiny_scene: Path, tmp_path: Path) -> None:
    import yaml

    from nerf_lightning.cli import run_lightning_cli
    from tests.helpers.runs import RUN, short_run_args

    run_lightning_cli(["fit", *short_run_args(tiny_scene, tmp_path, "--data.random_background", "true")])
    run = tmp_path / RUN
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert yaml.safe_load((run / "config.yaml").read_text())["data"]["random_background"] is True
