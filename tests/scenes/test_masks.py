"""nerfstudio ``mask_path``: masked pixels are never training targets and do not count in the metrics;
masks go through downscaling, the image cache and its fingerprint, and validation names bad masks."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.data.masked_pixels import KeptPixels
from nerf_lightning.evaluation.masked import update_image_metrics
from nerf_lightning.scenes.cache import cached_load_split
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio
from nerf_lightning.scenes.loading import load_split
from nerf_lightning.scenes.validate import validate_dataset
from nerf_lightning.system.module import NerfModule, image_metrics

WIDTH, HEIGHT = 16, 12
MASKED_FROM = 9
"""Columns ``>= 9`` are masked (odd, so that a 2x downscale masks column pair 8-9 too)."""
GARBAGE = (255, 0, 255)
"""The colour of every masked pixel: it must never be a training target."""


def write_masked_scene(root: Path, frames: int = 8, mask_size: tuple[int, int] = (WIDTH, HEIGHT)) -> None:
    """Frames with a smooth left part and garbage under the mask; the 8-frame rule gives 6 train, 1 val,
    1 test frame. Frame 3 has no mask (all its pixels count)."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(exist_ok=True)
    entries = []
    for i in range(frames):
        image = np.zeros((HEIGHT, WIDTH, 3), dtype=np.uint8)
        image[:, :, 0] = 20 + 10 * i
        image[:, :, 1] = np.arange(WIDTH)[None, :] * 8
        image[:, :, 2] = 60
        entry = {"file_path": f"images/{i:02d}.png", "transform_matrix": _pose(i)}
        if i != 3:
            image[:, MASKED_FROM:] = GARBAGE
            mask = np.full((mask_size[1], mask_size[0]), 255, dtype=np.uint8)
            mask[:, MASKED_FROM:] = 0
            Image.fromarray(mask, mode="L").save(root / "masks" / f"{i:02d}.png")
            entry["mask_path"] = f"masks/{i:02d}.png"
        Image.fromarray(image).save(root / "images" / f"{i:02d}.png")
        entries.append(entry)
    meta = {"fl_x": 14.0, "w": WIDTH, "h": HEIGHT, "frames": entries}
    (root / "transforms.json").write_text(json.dumps(meta))


def _pose(i: int) -> list[list[float]]:
    angle = 2 * np.pi * i / 8
    pose = np.eye(4)
    pose[:3, :3] = [[np.cos(angle), 0, np.sin(angle)], [0, 1, 0], [-np.sin(angle), 0, np.cos(angle)]]
    pose[:3, 3] = [4 * np.sin(angle), 0.0, 4 * np.cos(angle)]
    return pose.tolist()


def is_garbage(rgb: torch.Tensor) -> torch.Tensor:
    return (rgb - torch.tensor(GARBAGE) / 255.0).abs().amax(dim=-1) < 1e-6


def test_loader_masks_and_downscale(tmp_path: Path) -> None:
    write_masked_scene(tmp_path)
    split = load_split(tmp_path, "train")
    assert split.masks is not None and split.masks.shape == (6 * WIDTH * HEIGHT,)
    names = split.names
    for i, name in enumerate(names):
        mask = split.mask(i)
        image = split.images[i]
        assert mask.shape == (HEIGHT, WIDTH)
        if name == "images/03.png":
            assert mask.all()
        else:
            assert mask[:, :MASKED_FROM].all() and not mask[:, MASKED_FROM:].any()
            assert is_garbage(image[~mask]).all()  # the garbage is exactly what the mask hides
    half = load_nerfstudio(tmp_path, "train", downscale=2)
    mask = half.mask(names.index("images/01.png"))
    assert mask.shape == (HEIGHT // 2, WIDTH // 2)
    # pixel column 4 covers source columns 8 and 9; 9 is masked, so the averaged pixel is too
    assert mask[:, :4].all() and not mask[:, 4:].any()
    assert load_split(tmp_path, "val").masks is not None  # val frame 04 has a mask


def test_masks_go_through_the_cache_and_its_fingerprint(tmp_path: Path) -> None:
    root, cache = tmp_path / "scene", tmp_path / "cache"
    write_masked_scene(root)
    fresh = load_split(root, "train")
    built = cached_load_split(root, "train", cache_dir=cache)
    hit = cached_load_split(root, "train", cache_dir=cache)
    assert torch.equal(built.masks, fresh.masks) and torch.equal(hit.masks, fresh.masks)
    # a mask that changes (same image) must not be served from the old entry
    mask = np.full((HEIGHT, WIDTH), 255, dtype=np.uint8)
    Image.fromarray(mask, mode="L").save(root / "masks" / "01.png")
    changed = cached_load_split(root, "train", cache_dir=cache)
    assert changed.masks.sum() == fresh.masks.sum() + HEIGHT * (WIDTH - MASKED_FROM)


def test_missing_or_wrong_size_mask_is_one_line_naming_the_frame_and_mask_path(tmp_path: Path) -> None:
    write_masked_scene(tmp_path)
    (tmp_path / "masks" / "02.png").unlink()
    Image.fromarray(np.zeros((HEIGHT, WIDTH + 1), dtype=np.uint8)).save(tmp_path / "masks" / "05.png")
    report = validate_dataset(tmp_path)
    lines = [str(p) for p in report.problems]
    assert len(lines) == 2, lines
    source = str(tmp_path / "transforms.json")
    assert lines[0].startswith(f"{source}: frame 2: field 'mask_path': mask 'masks/02.png' does not exist")
    assert lines[1].startswith(f"{source}: frame 5: field 'mask_path': mask 'masks/05.png' is 17x12")
    assert all("\n" not in line for line in lines)
    with pytest.raises(DatasetError, match=r"frame 2: field 'mask_path'"):
        load_split(tmp_path, "train")


@pytest.mark.parametrize("selection", ["uniform", "error"])
def test_masked_pixels_are_never_drawn_as_training_rays(tmp_path: Path, selection: str) -> None:
    write_masked_scene(tmp_path)
    data = NerfDataModule(root=str(tmp_path), cache=False, rays_per_batch=512, pixel_selection=selection,
                          error_map_resolution=4)
    data.setup("fit")
    train = data.splits["train"]
    drawn = []
    for position in range(20):
        batch = data.train_batch(position, torch.device("cpu"))
        assert train.masks[batch.pixel_indices].all()
        assert not is_garbage(batch.rgb).any()
        drawn.append(batch.pixel_indices)
    if selection == "error":  # masked-out tiles are never picked: they weigh nothing
        assert data.error_map is not None and (data.error_map.tile_pixels == 0).any()
    # every kept pixel is in play: the unmasked frame's masked-elsewhere columns are drawn too
    unmasked = train.names.index("images/03.png")
    start = int(train.images.offsets[unmasked])
    columns = (torch.cat(drawn) - start) % WIDTH
    in_frame = (torch.cat(drawn) >= start) & (torch.cat(drawn) < start + WIDTH * HEIGHT)
    assert (columns[in_frame] >= MASKED_FROM).any()


def test_evaluation_batches_carry_the_mask(tmp_path: Path) -> None:
    write_masked_scene(tmp_path)
    data = NerfDataModule(root=str(tmp_path), cache=False)
    data.setup("fit")
    batch = data.image_batch("val", 0, torch.device("cpu"))
    assert batch.mask is not None and batch.mask.shape == (WIDTH * HEIGHT,)
    assert torch.equal(batch.mask, data.splits["val"].mask(0).reshape(-1))
    assert data.train_batch(0, torch.device("cpu")).mask is None
    module = NerfModule()
    module.set_scene_box(data.scene_box)
    image = module.render_image(batch)
    assert torch.equal(image.mask, batch.mask.reshape(HEIGHT, WIDTH))
    assert torch.equal(image.to("cpu").mask, image.mask)


def test_metrics_ignore_masked_pixels() -> None:
    generator = torch.Generator().manual_seed(0)
    target = torch.rand(24, 32, 3, generator=generator)
    mask = torch.ones(24, 32, dtype=torch.bool)
    mask[:, 20:] = False
    scores = []
    for garbage in (0.0, 1.0):
        rgb = torch.where(mask[..., None], target - 0.1, torch.full_like(target, garbage))
        metrics = image_metrics("val/")
        update_image_metrics(metrics, rgb, target, mask)
        scores.append({k: float(v) for k, v in metrics.compute().items()})
    assert scores[0] == scores[1]  # what is under the mask does not matter
    assert scores[0]["val/psnr"] == pytest.approx(20.0, abs=1e-3)  # -10 log10(0.1^2) over kept pixels
    full = image_metrics("val/")
    update_image_metrics(full, torch.where(mask[..., None], target - 0.1, target), target, None)
    assert scores[0]["val/ssim"] == pytest.approx(float(full.compute()["val/ssim"]))


@pytest.mark.parametrize("masked", [False, True])
def test_metrics_score_in_float32_under_bf16_mixed_precision(masked: bool) -> None:
    """Test and validation steps run under autocast with --trainer.precision bf16-mixed; the scores of
    a near-perfect render must not change with it (SSIM's filters in bf16 gave scores above 1)."""
    generator = torch.Generator().manual_seed(0)
    target = torch.rand(48, 48, 3, generator=generator)
    rgb = (target + 0.004 * torch.randn(48, 48, 3, generator=generator)).clamp(0.0, 1.0)
    mask = torch.rand(48, 48, generator=generator) > 0.2 if masked else None
    scores = []
    for autocast in (False, True):
        metrics = image_metrics("test/")
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            update_image_metrics(metrics, rgb, target, mask)
        scores.append({k: float(v) for k, v in metrics.compute().items()})
    assert scores[1] == scores[0]
    assert scores[0]["test/ssim"] > 0.99


def test_kept_pixels_sampler_draws_uniformly_among_kept() -> None:
    masks = torch.tensor([0, 1, 1, 0, 0, 1, 0, 1, 1, 1], dtype=torch.bool)
    kept = KeptPixels(masks)
    draws = kept.sample(6000, torch.Generator().manual_seed(1))
    counts = torch.bincount(draws, minlength=10)
    assert counts[~masks].sum() == 0
    assert (counts[masks].float() / 1000 - 1).abs().max() < 0.15
    replaced = kept.replace_masked(torch.arange(10), torch.Generator().manual_seed(2))
    assert masks[replaced].all() and torch.equal(replaced[masks], torch.arange(10)[masks])
    with pytest.raises(ValueError, match="no pixel"):
        KeptPixels(torch.zeros(5, dtype=torch.bool))
