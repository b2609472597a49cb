"""Image sizes against a split's intrinsics: a Blender image of another aspect ratio than its split's is
refused (``data validate``, the loader, ``fit``); another size of the same aspect ratio is a warning; a
nerfstudio image must have exactly the ``w x h`` declared for it (or the first image's size)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from nerf_lightning import cli
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.blender import load_blender
from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio
from nerf_lightning.scenes.split_sizes import same_aspect
from nerf_lightning.scenes.validate import validate_dataset

# --------------------------------------------------------------------------------------------- helpers


def write_png(path: Path, width: int, height: int, channels: int = 4) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(width * height).integers(0, 256, (height, width, channels), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Blender scene, 100x100 images: 6 train, 2 val, 2 test."""
    return make_demo_scene(tmp_path_factory.mktemp("sizes") / "demo", num_train=6, num_val=2, num_test=2)


def scene_with(tmp_path: Path, demo: Path, sizes: dict[str, tuple[int, int]]) -> Path:
    """A copy of ``demo`` (links to its images) with the images ``sizes`` (name -> size) replaced."""
    root = tmp_path / "scene"
    for path in demo.rglob("*"):
        if path.is_file():
            (root / path.relative_to(demo)).parent.mkdir(parents=True, exist_ok=True)
            (root / path.relative_to(demo)).hardlink_to(path)
    for name, (width, height) in sizes.items():
        (root / name).unlink()
        write_png(root / name, width, height)
    return root


def loader_error(root: Path, split: str) -> str:
    with warnings.catch_warnings(), pytest.raises(DatasetError) as info:
        warnings.simplefilter("ignore")
        load_blender(root, split)
    return str(info.value)


# ------------------------------------------------------------------------------------------------ Blender


def test_other_aspect_ratio_is_refused(tmp_path: Path, demo: Path) -> None:
    root = scene_with(tmp_path, demo, {"train/r_3.png": (107, 100)})
    report = validate_dataset(root)
    assert not report.ok and report.warnings == []
    assert [(Path(p.file).name, p.frame, p.field) for p in report.problems] == [
        ("transforms_train.json", 3, "file_path")
    ]
    line = str(report.problems[0])
    assert line == (
        f"{root / 'transforms_train.json'}: frame 3: field 'file_path': image 'train/r_3.png' is 107x100 "
        "pixels but the split's images are 100x100 (5 of 6, e.g. 'train/r_0.png'); expected the aspect "
        "ratio of 100x100 (that size or a resize of it): one camera_angle_x gives every image of the split "
        "the same field of view"
    )
    assert report.frames == {"train": 5, "val": 2, "test": 2}
    assert loader_error(root, "train") == line  # the loader stops at the same line


def test_the_majority_sets_the_size(tmp_path: Path, demo: Path) -> None:
    """The odd image is named even when it comes first; the others are not."""
    root = scene_with(tmp_path, demo, {"train/r_0.png": (107, 100), "val/r_1.png": (50, 60)})
    report = validate_dataset(root)
    assert [(Path(p.file).name, p.frame) for p in report.problems] == [
        ("transforms_train.json", 0), ("transforms_val.json", 1)
    ]
    assert "'train/r_0.png' is 107x100 pixels but the split's images are 100x100 (5 of 6, e.g. " \
        "'train/r_1.png')" in str(report.problems[0])
    # two images, one each: the first sets the size
    assert "'val/r_1.png' is 50x60 pixels but the split's images are 100x100 (1 of 2, e.g. 'val/r_0.png')" \
        in str(report.problems[1])


def test_same_aspect_ratio_is_a_warning(
    tmp_path: Path, demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = scene_with(tmp_path, demo, {"train/r_3.png": (200, 200), "test/r_0.png": (51, 51)})
    report = validate_dataset(root)
    assert report.ok and report.frames == {"train": 6, "val": 2, "test": 2}
    assert [(Path(w.file).name, w.frame) for w in report.warnings] == [
        ("transforms_train.json", 3), ("transforms_test.json", 1)  # a tie: the first image sets the size
    ]
    assert "image 'train/r_3.png' is 200x200 pixels but the split's images are 100x100 (5 of 6, e.g. " \
        "'train/r_0.png'; 6 with its aspect ratio); same aspect ratio" in str(report.warnings[0])
    assert "image 'test/r_1.png' is 100x100 pixels but the split's images are 51x51 (1 of 2, e.g. " \
        "'test/r_0.png'; 2 with its aspect ratio)" in str(report.warnings[1])
    assert cli.main(["data", "validate", str(root)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"warning: {report.warnings[0]}"
    with pytest.warns(UserWarning, match=r"1 image\(s\) of another size than the split's 100x100"):
        split = load_blender(root, "train")
    assert split.cameras.width.tolist() == [100, 100, 100, 200, 100, 100]
    assert split.cameras.fx[3].item() == pytest.approx(2 * split.cameras.fx[0].item())


def test_fit_refuses_with_the_same_lines(
    tmp_path: Path, demo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = scene_with(tmp_path, demo, {"train/r_3.png": (107, 100)})
    expected = [str(p) for p in validate_dataset(root).problems]
    assert len(expected) == 1 and "107x100" in expected[0]

    def fit(_: object) -> None:  # what LightningCLI's fit does first with the data module
        NerfDataModule(root=str(root), cache_dir=str(tmp_path / "cache")).setup("fit")

    monkeypatch.setattr(cli, "run_lightning_cli", fit)
    assert cli.main(["fit", "--data.root", str(root)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"nerf-lightning: dataset error: {expected[0]}", (
        f"nerf-lightning: {root}: 1 problem; list them again with 'nerf-lightning data validate {root}'"
    )]


@pytest.mark.parametrize(
    ("size", "reference", "same"),
    [
        ((100, 100), (100, 100), True),
        ((200, 200), (100, 100), True),
        ((267, 200), (800, 600), True),  # 800x600 / 3, rounded
        ((101, 100), (100, 100), True),  # within rounding: indistinguishable from a resize
        ((102, 100), (100, 100), False),
        ((107, 100), (100, 100), False),
        ((100, 107), (100, 100), False),
        ((4000, 3000), (3990, 3000), False),  # 10 pixels on a large image: no ratio tolerance
        ((334, 333), (143, 143), True),  # 1001x1000 / 3 and / 7, rounded
    ],
)
def test_same_aspect(size: tuple[int, int], reference: tuple[int, int], same: bool) -> None:
    assert same_aspect(size, reference) is same
    assert same_aspect(reference, size) is same


# --------------------------------------------------------------------------------------------- nerfstudio


def nerfstudio(root: Path, sizes: list[tuple[int, int]], declared: dict[str, int] | None = None) -> Path:
    frames = []
    for i, (width, height) in enumerate(sizes):
        write_png(root / "images" / f"{i}.png", width, height, channels=3)
        frames.append({"file_path": f"images/{i}.png",
                       "transform_matrix": [[1, 0, 0, 0.1 * i], [0, 1, 0, 0], [0, 0, 1, 4], [0, 0, 0, 1]]})
    meta = {"camera_angle_x": 0.7, **(declared or {}), "frames": frames}
    (root / "transforms.json").write_text(json.dumps(meta))
    return root


@pytest.mark.parametrize("odd", [(107, 100), (200, 200)], ids=["other-aspect", "same-aspect"])
def test_nerfstudio_without_w_h_the_first_image_sets_the_size(tmp_path: Path, odd: tuple[int, int]) -> None:
    sizes = [(100, 100)] * 9
    sizes[3] = odd
    root = nerfstudio(tmp_path, sizes)
    report = validate_dataset(root)
    assert [(p.frame, p.field) for p in report.problems] == [(3, "w")]
    line = str(report.problems[0])
    assert line.endswith(
        f"image 'images/3.png' is {odd[0]}x{odd[1]} pixels; expected w x h = 100x100 (w or h not given: "
        "the size of the first image, 'images/0.png')"
    )
    with pytest.raises(DatasetError) as info:
        load_nerfstudio(root, "train")
    assert str(info.value) == line


@pytest.mark.parametrize("where", ["top", "frame"])
def test_nerfstudio_declared_w_h_must_match(tmp_path: Path, where: str) -> None:
    sizes = [(100, 100)] * 9
    sizes[3] = (107, 100)
    root = nerfstudio(tmp_path, sizes, {"w": 100, "h": 100} if where == "top" else None)
    meta = json.loads((root / "transforms.json").read_text())
    if where == "frame":
        for frame in meta["frames"]:
            frame.update(w=100, h=100)
    (root / "transforms.json").write_text(json.dumps(meta))
    report = validate_dataset(root)
    assert [str(p) for p in report.problems] == [
        f"{root / 'transforms.json'}: frame 3: field 'w': image 'images/3.png' is 107x100 pixels; "
        "expected w x h = 100x100"
    ]
    assert sum(report.frames.values()) == 8
