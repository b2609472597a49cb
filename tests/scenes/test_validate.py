"""``nerf-lightning data validate``: every problem of broken Blender / nerfstudio / LLFF datasets at once,
with the loaders' messages, and training refusing such data before it starts."""

from __future__ import annotations

import json
import math
import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from nerf_lightning import cli
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.scenes.errors import DatasetError, DatasetValidationError
from nerf_lightning.scenes.formats.blender import load_blender
from nerf_lightning.scenes.formats.llff import load_llff
from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio
from nerf_lightning.scenes.validate import ValidationReport, require_valid_dataset, validate_dataset

SHARED = Path(__file__).resolve().parents[3] / "shared" / "datasets"
FOX, FERN = SHARED / "fox", SHARED / "fern"

# --------------------------------------------------------------------------------------------- helpers


def pose(angle: float = 0.0) -> list[list[float]]:
    c, s = math.cos(angle), math.sin(angle)
    return [[c, 0.0, s, 0.0], [0.0, 1.0, 0.0, 0.0], [-s, 0.0, c, 4.0], [0.0, 0.0, 0.0, 1.0]]


NAN_POSE = [[float("nan"), 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]


def write_png(path: Path, width: int, height: int, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)).save(path)


def write_truncated_png(path: Path) -> None:
    write_png(path, 64, 64, seed=7)  # noise does not compress: 2000 bytes is a fraction of the file
    path.write_bytes(path.read_bytes()[:2000])


def write_json(path: Path, meta: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta))


def keys(problems: list[DatasetError]) -> list[tuple[str, int | str | None, str | None]]:
    """(file name, frame, field) of each problem."""
    return [(Path(p.file).name, p.frame, p.field) for p in problems]


def assert_one_line_each(report: ValidationReport) -> None:
    assert all("\n" not in line for line in report.lines())
    messages = [str(p) for p in report.problems] + [str(w) for w in report.warnings]
    assert len(messages) == len(set(messages)), "a problem was reported twice"


def first_error(load: Any, *args: Any, **kwargs: Any) -> str:
    with warnings.catch_warnings(), pytest.raises(DatasetError) as info:
        warnings.simplefilter("ignore")
        load(*args, **kwargs)
    return str(info.value)


# ------------------------------------------------------------------------------------ broken datasets


def broken_blender(root: Path) -> Path:
    """train: frames 1-6 each with one problem (needs downscale 2 for frame 5); val: unparsable JSON;
    test: no camera_angle_x and a frame that is not an object."""
    frames = []
    for i in range(7):
        frames.append({"file_path": f"./train/r_{i}", "transform_matrix": pose(0.1 * i)})
        write_png(root / "train" / f"r_{i}.png", 8, 6, seed=i)
    frames[1]["transform_matrix"] = NAN_POSE
    (root / "train" / "r_2.png").unlink()
    write_png(root.parent / "outside.png", 8, 6)
    frames[3]["file_path"] = "../outside.png"
    write_truncated_png(root / "train" / "r_4.png")
    write_png(root / "train" / "r_5.png", 1, 1)  # smaller than the downscale factor 2
    (root / "train" / "r_6.png").write_text("this is not an image")
    write_json(root / "transforms_train.json", {"camera_angle_x": 0.7, "frames": frames})
    (root / "transforms_val.json").write_text('{"camera_angle_x": 0.7, "frames": [,]}')
    write_png(root / "test" / "r_0.png", 8, 6)
    write_json(root / "transforms_test.json",
               {"frames": ["test/r_0.png", {"file_path": "test/r_0", "transform_matrix": pose()}]})
    return root


BLENDER_PROBLEMS = [
    ("transforms_train.json", 1, "transform_matrix", "expected finite numbers"),
    ("transforms_train.json", 3, "file_path", "outside the dataset folder"),
    ("transforms_train.json", 2, "file_path", "'train/r_2' does not exist"),
    ("transforms_train.json", 4, "file_path", "r_4.png' cannot be decoded"),
    ("transforms_train.json", 5, "file_path", "image is 1x1, smaller than the downscale factor 2"),
    ("transforms_train.json", 6, "file_path", "r_6.png' cannot be decoded"),
    ("transforms_val.json", None, None, "not valid JSON"),
    ("transforms_test.json", None, "camera_angle_x", "missing"),
    ("transforms_test.json", 0, None, "is a JSON str; expected an object"),
]


def broken_nerfstudio(root: Path) -> Path:
    """Frames 1, 3-7 each with one problem; frame 2's image is missing (a warning)."""
    frames = []
    for i in range(10):
        name = f"images/frame_{i:03d}.png"
        write_png(root / name, 10, 8, seed=i)
        frames.append({"file_path": name, "transform_matrix": pose(0.1 * i)})
    frames[1]["transform_matrix"] = NAN_POSE
    (root / "images" / "frame_002.png").unlink()
    write_png(root.parent / "outside.png", 10, 8)
    frames[3]["file_path"] = "../outside.png"
    write_truncated_png(root / "images" / "frame_004.png")
    write_png(root / "images" / "frame_005.png", 12, 8)
    (root / "images" / "frame_006.png").write_text("this is not an image")
    frames[7]["fl_x"] = -5.0
    write_json(root / "transforms.json", {"fl_x": 20.0, "w": 10, "h": 8, "frames": frames})
    return root


NERFSTUDIO_PROBLEMS = [
    ("transforms.json", 1, "transform_matrix", "expected finite numbers"),
    ("transforms.json", 3, "file_path", "outside the dataset folder"),
    ("transforms.json", 7, "fl_x", "expected a positive number, got -5.0"),
    ("transforms.json", 4, "file_path", "frame_004.png' cannot be decoded"),  # train
    ("transforms.json", 5, "w", "is 12x8 pixels; expected w x h = 10x8"),  # train
    ("transforms.json", 6, "file_path", "frame_006.png' cannot be decoded"),  # val
]


def llff_row(index: int, hwf: tuple[float, float, float] = (12.0, 16.0, 20.0)) -> np.ndarray:
    rotation = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # OpenGL identity in LLFF axes
    matrix = np.concatenate([rotation, [[0.5 * index], [0.0], [5.0]], np.array(hwf)[:, None]], axis=1)
    return np.concatenate([matrix.reshape(-1), [4.0, 30.0]])


def broken_llff(root: Path) -> Path:
    """Rows 1-3 bad in poses_bounds.npy; images 4-6 bad (val is image 4)."""
    rows = np.stack([llff_row(i) for i in range(9)])
    rows[1, 16] = np.nan
    rows[2, 14] = 0.0
    rows[3, :15] = (rows[3, :15].reshape(3, 5) * np.array([1.1, 1.1, 1.1, 1, 1])).reshape(-1)
    root.mkdir(parents=True)
    np.save(root / "poses_bounds.npy", rows)
    for i in range(9):
        write_png(root / "images" / f"IMG_{i}.png", 16, 12, seed=i)
    write_truncated_png(root / "images" / "IMG_4.png")
    write_png(root / "images" / "IMG_5.png", 8, 8)
    (root / "images" / "IMG_6.png").write_text("this is not an image")
    return root


LLFF_PROBLEMS = [
    ("poses_bounds.npy", 1, "bounds", "column 16 is nan; expected finite numbers"),
    ("poses_bounds.npy", 2, "hwf", "expected positive [H, W, focal]"),
    ("poses_bounds.npy", 3, "pose", "expected a rotation"),
    ("poses_bounds.npy", 5, "hwf", "'images/IMG_5.png' is 8x8 pixels"),
    ("poses_bounds.npy", 6, "file_path", "IMG_6.png' cannot be decoded"),
    ("poses_bounds.npy", 4, "file_path", "IMG_4.png' cannot be decoded"),
]


def assert_problems(report: ValidationReport, expected: list[tuple[str, Any, Any, str]]) -> None:
    """``report`` holds exactly the ``expected`` problems (file, frame, field, text), in order."""
    assert keys(report.problems) == [e[:3] for e in expected], report.lines()
    for problem, (_, _, _, detail) in zip(report.problems, expected, strict=True):
        assert detail in str(problem)
    assert not report.ok
    assert_one_line_each(report)


# ---------------------------------------------------------------------------------------------- tests


def test_blender_every_problem_once(tmp_path: Path) -> None:
    root = broken_blender(tmp_path / "scene")
    report = validate_dataset(root, downscale=2)
    assert report.dataset_format == "blender"
    assert_problems(report, BLENDER_PROBLEMS)
    assert report.warnings == []
    assert report.frames == {"train": 1, "val": 0, "test": 1}
    # the loader stops at the first problem of each split, with the same message
    for split in ("train", "val", "test"):
        first = next(p for p in report.problems if Path(p.file).name == f"transforms_{split}.json")
        assert first_error(load_blender, root, split, downscale=2) == str(first)


def test_nerfstudio_every_problem_once(tmp_path: Path) -> None:
    root = broken_nerfstudio(tmp_path / "capture")
    report = validate_dataset(root)
    assert report.dataset_format == "nerfstudio"
    assert_problems(report, NERFSTUDIO_PROBLEMS)
    assert keys(report.warnings) == [("transforms.json", 2, "file_path")]
    assert "'images/frame_002.png' does not exist" in str(report.warnings[0])
    assert report.lines()[0].startswith("warning: ")
    assert report.frames == {"train": 2, "val": 0, "test": 1}
    assert first_error(load_nerfstudio, root, "train") == str(report.problems[0])


def test_llff_every_problem_once(tmp_path: Path) -> None:
    root = broken_llff(tmp_path / "capture")
    report = validate_dataset(root)
    assert report.dataset_format == "llff"
    assert_problems(report, LLFF_PROBLEMS)
    assert report.frames == {"train": 1, "val": 0, "test": 2}
    assert first_error(load_llff, root, "train") == str(report.problems[0])


def test_messages_equal_the_loaders(tmp_path: Path) -> None:
    """Each problem alone: the loader raises exactly the line the validator prints."""
    for index, (_, frame, _, _) in enumerate(LLFF_PROBLEMS):
        root = broken_llff(tmp_path / f"capture{index}")
        rows = np.load(root / "poses_bounds.npy")
        for other in (1, 2, 3):
            if other != frame:
                rows[other] = llff_row(other)
        np.save(root / "poses_bounds.npy", rows)
        for other in (4, 5, 6):
            if other != frame:
                write_png(root / "images" / f"IMG_{other}.png", 16, 12)
        report = validate_dataset(root)
        assert len(report.problems) == 1, report.lines()
        split = "val" if frame == 4 else "train"
        assert first_error(load_llff, root, split) == str(report.problems[0])


def test_top_level_problem_reported_once(tmp_path: Path) -> None:
    root = broken_nerfstudio(tmp_path / "capture")
    meta = json.loads((root / "transforms.json").read_text())
    meta["h"] = -8
    (root / "transforms.json").write_text(json.dumps(meta))
    report = validate_dataset(root)
    lines = [str(p) for p in report.problems if p.field == "h"]
    source = root / "transforms.json"
    assert lines == [f"{source}: field 'h': expected a positive integer number of pixels, got -8"]


def test_file_level_problems(tmp_path: Path) -> None:
    report = validate_dataset(tmp_path)
    assert len(report.problems) == 1 and "unknown dataset format" in str(report.problems[0])
    assert report.dataset_format is None and report.frames == {"train": 0, "val": 0, "test": 0}
    report = validate_dataset(tmp_path, dataset_format="blender")
    assert keys(report.problems) == [(f"transforms_{s}.json", None, None) for s in ("train", "val", "test")]
    assert all("file not found" in str(p) for p in report.problems)
    write_json(tmp_path / "transforms.json", {"fl_x": 10.0, "frames": []})
    report = validate_dataset(tmp_path)
    assert keys(report.problems) == [("transforms.json", None, "frames")]


def test_nerfstudio_all_images_missing_is_one_problem(tmp_path: Path) -> None:
    root = broken_nerfstudio(tmp_path / "capture")
    for image in (root / "images").iterdir():
        image.unlink()
    report = validate_dataset(root)
    assert report.warnings == []
    assert keys(report.problems) == [
        ("transforms.json", 1, "transform_matrix"), ("transforms.json", 3, "file_path"),
        ("transforms.json", None, "frames"),
    ]
    assert "none of the 10 image files exist" in str(report.problems[-1])


def test_one_missing_nerfstudio_image_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "capture"
    frames = []
    for i in range(9):
        name = f"images/{i}.png"
        if i != 3:
            write_png(root / name, 10, 8, seed=i)
        frames.append({"file_path": name, "transform_matrix": pose(0.1 * i)})
    write_json(root / "transforms.json", {"fl_x": 20.0, "frames": frames})
    report = require_valid_dataset(root)
    assert report.ok and len(report.warnings) == 1
    assert cli.main(["data", "validate", str(root)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"warning: {root / 'transforms.json'}: frame 3: field 'file_path': image 'images/3.png' does not "
        "exist; the frame is skipped",
        f"{root}: OK, train/val/test frames: 6/1/1",
    ]


def test_good_demo_scene(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_demo_scene(tmp_path / "demo", num_train=4, num_val=2, num_test=2, resolution=16)
    report = validate_dataset(root)
    assert report.ok and report.problems == [] and report.warnings == []
    assert report.frames == {"train": 4, "val": 2, "test": 2}
    assert cli.main(["data", "validate", str(root)]) == 0
    assert capsys.readouterr().out == f"{root}: OK, train/val/test frames: 4/2/2\n"
    assert cli.main(["data", "validate", str(root), "--format", "blender", "--downscale", "4"]) == 0
    assert cli.main(["data", "validate", str(root), "--downscale", "32"]) == 1  # 16x16 images
    assert "smaller than the downscale factor 32" in capsys.readouterr().out


def test_validation_keeps_no_pixels(tmp_path: Path) -> None:
    """Validating decodes every image (a truncated one is a problem) but converts none to an array: the
    memory it allocates stays far below one image as float32, which loading it takes."""
    root = make_demo_scene(tmp_path / "demo", num_train=4, num_val=2, num_test=2, resolution=16)
    size = 512  # one image is 1 MiB as RGBA bytes and 4 MiB as float32; the PNG of one colour is tiny
    for image in root.rglob("*.png"):
        Image.new("RGBA", (size, size), (200, 100, 50, 255)).save(image)
    one_image = size * size * 4 * 4

    def peak_bytes(action: Any) -> int:
        tracemalloc.start()
        try:
            action()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    report: list[ValidationReport] = []
    validating = peak_bytes(lambda: report.append(validate_dataset(root)))
    assert report[0].ok and report[0].frames == {"train": 4, "val": 2, "test": 2}, report[0].lines()
    loading = peak_bytes(lambda: load_blender(root, "test"))  # the same measure sees a loader's pixels
    assert loading >= one_image, loading
    assert validating < one_image / 4, validating


def test_cli_prints_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = broken_blender(tmp_path / "scene")
    assert cli.main(["data", "validate", str(root), "--downscale", "2"]) == 1
    out = capsys.readouterr().out.splitlines()
    report = validate_dataset(root, downscale=2)
    assert out == [str(p) for p in report.problems] + [f"{root}: 9 problems; train/val/test frames: 1/0/1"]
    assert cli.main(["data", "validate", str(root), "--format", "llff"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == f"{root}: 2 problems; train/val/test frames: 0/0/0"
    # An argument error is one line and exit code 2, as for every command (not argparse's usage exit).
    assert cli.main(["data", "validate", str(root), "--downscale", "0"]) == 2


def test_require_valid_dataset_raises_with_every_problem(tmp_path: Path) -> None:
    root = broken_llff(tmp_path / "capture")
    with pytest.raises(DatasetValidationError) as info:
        require_valid_dataset(root, dataset_format="llff")
    error = info.value
    assert keys(error.problems) == [e[:3] for e in LLFF_PROBLEMS]
    assert f"{root}: 6 problems, the first: {error.problems[0]}" in str(error)
    assert error.command == f"nerf-lightning data validate {root} --format llff"
    assert "\n" not in str(error)


def test_fit_refuses_with_the_same_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = broken_nerfstudio(tmp_path / "capture")
    expected = [str(p) for p in validate_dataset(root).problems]

    def fit(_: object) -> None:  # what LightningCLI's fit does first with the data module
        NerfDataModule(root=str(root)).setup("fit")

    monkeypatch.setattr(cli, "run_lightning_cli", fit)
    assert cli.main(["fit", "--data.root", str(root)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"nerf-lightning: dataset error: {line}" for line in expected] + [
        f"nerf-lightning: {root}: 6 problems; list them again with 'nerf-lightning data validate {root}'"
    ]


def test_data_module_checks_only_the_stage_splits(tmp_path: Path) -> None:
    root = make_demo_scene(tmp_path / "demo", num_train=4, num_val=2, num_test=2, resolution=16)
    (root / "transforms_test.json").unlink()
    data = NerfDataModule(root=str(root))
    data.setup("fit")  # train + val only
    with pytest.raises(DatasetValidationError, match=r"transforms_test\.json: file not found"):
        data.setup("test")


def test_fox() -> None:
    if not (FOX / "transforms.json").is_file():
        pytest.skip(f"{FOX} is not available")
    report = validate_dataset(FOX)
    assert report.ok, report.lines()
    assert len(report.warnings) == 17 and all(w.field == "file_path" for w in report.warnings)
    assert sum(report.frames.values()) == 50


def test_fern() -> None:
    if not (FERN / "poses_bounds.npy").is_file():
        pytest.skip(f"{FERN} is not available")
    report = validate_dataset(FERN, downscale=8)
    assert report.ok and report.warnings == [], report.lines()
    assert report.frames == {"train": 15, "val": 2, "test": 3}
    assert not validate_dataset(FERN).ok  # no images/ for downscale 1
