"""instant-ngp's ``scale``, ``offset`` and ``aabb_scale`` in ``transforms.json``: read, checked (one line
naming the file and the field), exposed as ``SceneSplit.ngp`` / ``aabb_scale``, cached; poses unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from nerf_lightning.scenes.cache import cached_load_split
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio, scan_nerfstudio
from nerf_lightning.scenes.problems import Problems
from nerf_lightning.scenes.scene import NgpPlacement
from nerf_lightning.scenes.validate import validate_dataset

FOX = Path("/work/shared/datasets/fox")


def write_scene(root: Path, top: dict[str, Any]) -> None:
    (root / "images").mkdir(parents=True, exist_ok=True)
    frames = []
    for i in range(2):
        Image.fromarray(np.full((6, 8, 3), 50 * i, dtype=np.uint8)).save(root / "images" / f"{i}.png")
        pose = np.eye(4)
        pose[:3, 3] = [1.0 + i, 2.0, 3.0]
        frames.append({"file_path": f"images/{i}.png", "transform_matrix": pose.tolist()})
    names = [f["file_path"] for f in frames]
    meta = {"fl_x": 10.0, "w": 8, "h": 6, "train_filenames": names, "val_filenames": names[:1],
            "test_filenames": names[1:], **top, "frames": frames}
    (root / "transforms.json").write_text(json.dumps(meta))


def test_placement_is_read_and_poses_stay(tmp_path: Path) -> None:
    write_scene(tmp_path, {"scale": 0.5, "offset": [0.5, 0.25, 1.0], "aabb_scale": 16})
    split = load_nerfstudio(tmp_path, "train")
    assert split.ngp == NgpPlacement(0.5, (0.5, 0.25, 1.0), 16.0) and split.aabb_scale == 16.0
    torch.testing.assert_close(split.cameras.centers[0], torch.tensor([1.0, 2.0, 3.0]))  # not scaled
    cube = split.ngp.unit_cube()  # x with 0.5 x + offset in [0, 1]
    torch.testing.assert_close(cube.lower, torch.tensor([-1.0, -0.5, -2.0]))
    torch.testing.assert_close(cube.upper, torch.tensor([1.0, 1.5, 0.0]))
    box = split.ngp.box()  # 16 times the unit cube about its centre
    torch.testing.assert_close(box.upper - box.lower, torch.full((3,), 32.0))
    torch.testing.assert_close(0.5 * (box.lower + box.upper), torch.tensor([0.0, 0.5, -1.0]))


def test_defaults_and_absence(tmp_path: Path) -> None:
    write_scene(tmp_path, {"aabb_scale": 4, "offset": 0.5})
    ngp = load_nerfstudio(tmp_path, "train").ngp
    assert ngp == NgpPlacement(NgpPlacement.DEFAULT_SCALE, (0.5, 0.5, 0.5), 4.0)
    torch.testing.assert_close(ngp.unit_cube().upper, torch.full((3,), 0.5 / 0.33))
    write_scene(tmp_path, {})  # a nerfstudio file: nothing to report
    split = load_nerfstudio(tmp_path, "train")
    assert split.ngp is None and split.aabb_scale is None


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [("scale", 0, "a positive"), ("scale", "big", "a positive"), ("aabb_scale", -2, "a positive"),
     ("aabb_scale", [16], "a positive"), ("offset", [0.5, 0.5], "a finite number or a list of 3"),
     ("offset", "middle", "a finite number or a list of 3")],
)
def test_bad_values_are_one_line_naming_file_and_field(tmp_path: Path, field: str, value: Any,
                                                       expected: str) -> None:
    write_scene(tmp_path, {field: value})
    with pytest.raises(DatasetError, match=rf"transforms.json: field '{field}': expected {expected}") as info:
        load_nerfstudio(tmp_path, "train")
    assert "\n" not in str(info.value)
    problems = validate_dataset(tmp_path).problems
    assert [p.field for p in problems] == [field]


def test_placement_survives_the_cache(tmp_path: Path) -> None:
    write_scene(tmp_path / "scene", {"scale": 0.25, "aabb_scale": 8})
    first = cached_load_split(tmp_path / "scene", "train", cache_dir=tmp_path / "cache")
    hit = cached_load_split(tmp_path / "scene", "train", cache_dir=tmp_path / "cache")
    assert first.ngp == hit.ngp == NgpPlacement(0.25, (0.5, 0.5, 0.5), 8.0)


@pytest.mark.skipif(not (FOX / "transforms.json").is_file(), reason="the fox capture is not here")
def test_fox_capture_placement_and_cameras() -> None:
    """The real instant-ngp fox: aabb_scale 4 and instant-ngp's default placement; OpenCV lens."""
    with pytest.warns(UserWarning, match="skipping 17 frame"):
        scan = scan_nerfstudio(FOX, Problems())
    assert scan is not None and scan.ngp == NgpPlacement(0.33, (0.5, 0.5, 0.5), 4.0)
    (_, _, _, _, width, height), (lens, coefficients) = next(iter(scan.cameras.values()))
    assert (width, height, lens) == (1080, 1920, 0)
    assert coefficients[:4] == pytest.approx((0.0578421, -0.0805099, -0.000980296, 0.00015575))
    assert coefficients[4:] == (0.0, 0.0, 0.0, 0.0)
