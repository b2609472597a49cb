"""``data.target_pixels``: the downscale chosen per capture from the training images' size, read without
decoding them, for each format (LLFF: among the ``images_<f>/`` folders that exist)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PIL import Image

from nerf_lightning.datasets.scene_suite import make_suite_scene
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.pixel_budget import (
    downscale_for_capture,
    llff_downscale_folders,
    training_image_size,
)


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``demo`` (Blender, 24x24), ``360`` (nerfstudio, 24x16) and ``forward`` (LLFF, 24x18) at 24 px."""
    root = tmp_path_factory.mktemp("suite")
    for name in ("demo", "360", "forward"):
        make_suite_scene(name, root / name, resolution=24)
    return root


def add_llff_folder(capture: Path, factor: int) -> None:
    """``images_<factor>/``: the capture's images downscaled as LLFF's ``minify`` writes them."""
    folder = capture / f"images_{factor}"
    folder.mkdir()
    for image in sorted((capture / "images").iterdir()):
        with Image.open(image) as opened:
            opened.resize((opened.width // factor, opened.height // factor), Image.Resampling.BOX).save(
                folder / image.name)


def test_the_training_image_size_comes_from_each_formats_files(suite: Path) -> None:
    assert training_image_size(suite / "demo", "blender") == (24, 24)
    assert training_image_size(suite / "360", "nerfstudio") == (24, 16)
    assert training_image_size(suite / "forward", "llff") == (24, 18)


@pytest.mark.parametrize(("scene", "target", "expected"), [
    ("demo", 144, 2),       # 12x12
    ("demo", 10_000, 1),    # never upsampled
    ("360", 96, 2),         # 12x8
    ("360", 40, 3),         # 8x5 = 40
    ("forward", 432, 1),    # 24x18 itself
])
def test_the_factor_gives_the_image_nearest_the_budget(suite: Path, scene: str, target: int,
                                                       expected: int) -> None:
    assert downscale_for_capture(suite / scene, "auto", target) == expected


def test_an_llff_capture_picks_among_its_downscaled_folders(suite: Path, tmp_path: Path) -> None:
    capture = shutil.copytree(suite / "forward", tmp_path / "forward")
    assert llff_downscale_folders(capture) == [1]
    assert downscale_for_capture(capture, "llff", 432 // 9) == 3  # only images/: any factor (8x6 = 48)
    add_llff_folder(capture, 4)
    assert llff_downscale_folders(capture) == [1, 4]
    assert downscale_for_capture(capture, "llff", 432 // 9) == 4  # 3 has no folder; 6x4 = 24 beats 24x18
    add_llff_folder(capture, 2)
    assert downscale_for_capture(capture, "llff", 432 // 4) == 2
    shutil.rmtree(capture / "images")
    assert llff_downscale_folders(capture) == [2, 4]
    assert downscale_for_capture(capture, "llff", 432) == 2  # the largest images there are


def test_a_bad_budget_or_dataset_is_refused(suite: Path, tmp_path: Path) -> None:
    refusal = r"^target_pixels must be a positive number of pixels per image, got 0$"
    with pytest.raises(ValueError, match=refusal):
        downscale_for_capture(suite / "demo", "blender", 0)
    with pytest.raises(DatasetError):
        downscale_for_capture(tmp_path, "auto", 100)
