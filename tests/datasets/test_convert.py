"""``nerf-lightning data convert``: COLMAP models (text and binary) and LLFF captures of known cameras
converted to ``transforms.json`` and read back through the project's own nerfstudio loader."""

from __future__ import annotations

import math
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from nerf_lightning import cli
from nerf_lightning.datasets.convert import CAMERA_CONVENTION, convert_dataset
from nerf_lightning.datasets.sources.colmap_model import (
    ColmapCamera,
    ColmapImage,
    quaternion_to_rotation,
    read_cameras_binary,
    read_cameras_text,
    read_images_binary,
    read_images_text,
    rotation_to_quaternion,
    write_cameras_text,
    write_images_text,
)
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.llff import load_llff
from nerf_lightning.scenes.loading import load_split
from nerf_lightning.scenes.scene import SceneSplit
from tests.helpers.datasets import (
    CAMERA_PARAMS,
    HEIGHT,
    NUM_IMAGES,
    SPLITS,
    WIDTH,
    assert_matches_llff_loader,
    assert_one_line,
    colmap_capture,
    colmap_image,
    known_poses,
    llff_capture,
    read_transforms,
    write_model,
    write_png,
)
from tests.helpers.runs import SHARED_DATASETS

FERN = SHARED_DATASETS / "fern"
# --------------------------------------------------------------------------------------------- helpers


def load_all(root: Path, dataset_format: str = "nerfstudio") -> dict[str, SceneSplit]:
    return {split: load_split(root, split, dataset_format=dataset_format) for split in SPLITS}


def expected_intrinsics(model: str) -> tuple[list[float], list[float]]:
    """``[fx, fy, cx, cy]`` and the eight distortion slots ``k1, k2, p1, p2, k3, k4, k5, k6`` a COLMAP
    camera of ``model`` stands for (a fisheye's ``k1..k4`` in the ``k1, k2, k3, k4`` slots)."""
    p = CAMERA_PARAMS[model]
    if model in ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL"):
        fx, fy, cx, cy, rest = p[0], p[0], p[1], p[2], list(p[3:])
    else:
        fx, fy, cx, cy, rest = p[0], p[1], p[2], p[3], list(p[4:])
    if model == "OPENCV_FISHEYE":
        rest = [rest[0], rest[1], 0.0, 0.0, rest[2], rest[3]]
    return [fx, fy, cx, cy], [*rest, *[0.0] * 8][:8]


# ---------------------------------------------------------------------------------------------- COLMAP IO


def test_quaternions_round_trip() -> None:
    for pose in known_poses():
        w, x, y, z = rotation_to_quaternion(pose[:3, :3])
        assert w >= 0 and math.isclose(math.hypot(w, x, y, z), 1.0)
        np.testing.assert_allclose(quaternion_to_rotation((w, x, y, z)), pose[:3, :3], atol=1e-12)
    # COLMAP's convention: (w, x, y, z), a rotation of 90 degrees about z
    half = math.sqrt(0.5)
    np.testing.assert_allclose(
        quaternion_to_rotation((half, 0.0, 0.0, half)), [[0, -1, 0], [1, 0, 0], [0, 0, 1]], atol=1e-12
    )


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_readers_round_trip_writers(tmp_path: Path, binary: bool) -> None:
    cameras = [ColmapCamera(i + 1, model, 640 + i, 480, params) for i, (model, params) in
               enumerate(CAMERA_PARAMS.items())]
    images = [colmap_image(7 + i, 1 + i % 5, f"sub dir/im {i}.jpg", pose)
              for i, pose in enumerate(known_poses())]
    write_model(tmp_path, cameras, images, binary)
    read_cameras = read_cameras_binary if binary else read_cameras_text
    read_images = read_images_binary if binary else read_images_text
    suffix = "bin" if binary else "txt"
    assert read_cameras(tmp_path / f"cameras.{suffix}") == {c.camera_id: c for c in cameras}
    assert read_images(tmp_path / f"images.{suffix}") == {i.image_id: i for i in images}


def test_text_images_with_points_and_comments(tmp_path: Path) -> None:
    path = tmp_path / "images.txt"
    path.write_text(
        "# comment\n"
        "# Number of images: 2\n"
        "3 1 0 0 0 0.5 -1 2 1 a.png\n"
        "10.5 20.25 7 11 12 -1\n"
        "\n"
        "5 0 1 0 0 1 2 3 2 b.png\n"
        "\n"
    )
    images = read_images_text(path)
    assert images == {
        3: ColmapImage(3, (1.0, 0.0, 0.0, 0.0), (0.5, -1.0, 2.0), 1, "a.png"),
        5: ColmapImage(5, (0.0, 1.0, 0.0, 0.0), (1.0, 2.0, 3.0), 2, "b.png"),
    }


def test_binary_images_with_points(tmp_path: Path) -> None:
    data = struct.pack("<Q", 2)
    for image_id, name, points in ((4, b"x.png", 3), (9, b"y.png", 0)):
        data += struct.pack("<i7di", image_id, 1, 0, 0, 0, 1, 2, 3, 2) + name + b"\0"
        data += struct.pack("<Q", points) + b"".join(struct.pack("<ddq", 1.5, 2.5, k) for k in range(points))
    (tmp_path / "images.bin").write_bytes(data)
    images = read_images_binary(tmp_path / "images.bin")
    assert [(i.image_id, i.name, i.camera_id) for i in images.values()] == [(4, "x.png", 2), (9, "y.png", 2)]
    for broken, detail in ((data[:-4], "expected a complete COLMAP binary file"),
                           (data + b"\0", "1 bytes after the last record")):
        (tmp_path / "images.bin").write_bytes(broken)
        with pytest.raises(DatasetError) as info:
            read_images_binary(tmp_path / "images.bin")
        assert_one_line(info.value, str(tmp_path / "images.bin"), detail)


# ----------------------------------------------------------------------------------- COLMAP conversion


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
@pytest.mark.parametrize("model", ["PINHOLE", "OPENCV", "FULL_OPENCV", "OPENCV_FISHEYE", "SIMPLE_PINHOLE"])
def test_colmap_round_trip(tmp_path: Path, model: str, binary: bool) -> None:
    root = colmap_capture(tmp_path / "capture", [model], binary=binary)
    result = convert_dataset(root, root)
    assert result.path == root / "transforms.json"

    meta = read_transforms(root)
    conversion = meta["conversion"]
    assert conversion["source_format"] == ("colmap-binary" if binary else "colmap-text")
    assert conversion["source"] == "sparse/0" and conversion["images"] == "images"
    assert conversion["applied_transform"] == np.eye(4).tolist()
    assert conversion["camera_convention"] == CAMERA_CONVENTION == "OpenGL (x right, y up, z back)"
    assert conversion["cameras"]["1"] == {"model": model, "width": WIDTH, "height": HEIGHT,
                                          "params": list(CAMERA_PARAMS[model])}
    # one camera: shared intrinsics at the top level, frames reference the images in place
    assert meta["w"] == WIDTH and meta["h"] == HEIGHT and "fl_x" not in meta["frames"][0]
    assert ("k1" in meta) == (model in ("OPENCV", "FULL_OPENCV", "OPENCV_FISHEYE"))
    assert meta["camera_model"] == {"SIMPLE_PINHOLE": "PINHOLE"}.get(model, model)
    names = [f"images/frame_{i:02d}.png" for i in range(NUM_IMAGES)]
    assert [f["file_path"] for f in meta["frames"]] == names
    assert [f["colmap_im_id"] for f in meta["frames"]] == [100 - i for i in range(NUM_IMAGES)]
    assert not any(p.name.startswith(".transforms") for p in root.iterdir())  # no temporary file left

    poses = known_poses()
    focal, distortion = expected_intrinsics(model)
    seen = 0
    for scene in load_all(root).values():
        for i, name in enumerate(scene.names):
            index = int(re.fullmatch(r"images/frame_(\d+)\.png", name).group(1))
            np.testing.assert_allclose(scene.cameras.camera_to_world[i].numpy(), poses[index][:3], atol=1e-5)
            cams = scene.cameras
            got = [float(cams.fx[i]), float(cams.fy[i]), float(cams.cx[i]), float(cams.cy[i])]
            np.testing.assert_allclose(got, focal, rtol=1e-6)
            assert (int(cams.width[i]), int(cams.height[i])) == (WIDTH, HEIGHT)
            np.testing.assert_allclose(cams.distortion[i].numpy(), distortion, rtol=1e-6)
            assert int(cams.lens[i]) == int(model == "OPENCV_FISHEYE")
            seen += 1
    assert seen == NUM_IMAGES


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_colmap_mixed_models_give_per_frame_intrinsics(tmp_path: Path, binary: bool) -> None:
    models = ["SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL"]
    root = colmap_capture(tmp_path / "capture", models, binary=binary)
    convert_dataset(root / "sparse" / "0", root)  # SRC may be the model folder itself
    meta = read_transforms(root)
    assert "fl_x" not in meta and all("fl_x" in frame for frame in meta["frames"])
    assert sorted(meta["conversion"]["cameras"]) == ["1", "2", "3"]
    for scene in load_all(root).values():
        for i, name in enumerate(scene.names):
            model = models[int(name[-6:-4]) % len(models)]
            focal, distortion = expected_intrinsics(model)
            cams = scene.cameras
            np.testing.assert_allclose([float(cams.fx[i]), float(cams.fy[i])], focal[:2], rtol=1e-6)
            np.testing.assert_allclose(cams.distortion[i].numpy(), distortion, rtol=1e-6)


def test_binary_model_is_preferred_and_dst_may_be_an_ancestor(tmp_path: Path) -> None:
    root = colmap_capture(tmp_path / "capture", ["PINHOLE"], binary=True)
    model = root / "sparse" / "0"
    write_cameras_text(model / "cameras.txt", read_cameras_binary(model / "cameras.bin").values())
    write_images_text(model / "images.txt", read_images_binary(model / "images.bin").values())
    convert_dataset(root, tmp_path)
    meta = read_transforms(tmp_path)
    assert meta["conversion"]["source_format"] == "colmap-binary"
    assert meta["frames"][0]["file_path"] == "capture/images/frame_00.png"
    assert len(load_split(tmp_path, "train").names) == 6


# ------------------------------------------------------------------------------------------------- LLFF


@pytest.mark.parametrize("folder", [None, "images_2"])
def test_llff_matches_the_llff_loader(tmp_path: Path, folder: str | None) -> None:
    root = llff_capture(tmp_path / "scene")
    images = None if folder is None else root / folder
    convert_dataset(root, root, images=images)
    meta = read_transforms(root)
    conversion = meta["conversion"]
    assert conversion["source_format"] == "llff" and conversion["source"] == "poses_bounds.npy"
    assert conversion["images"] == (folder or "images")
    assert conversion["camera_axes_change"] == [[0, -1, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    bounds = conversion["bounds"]
    assert bounds["near"] == pytest.approx(2.0) and bounds["far"] == pytest.approx(40.0)
    assert bounds["per_frame"][f"{folder or 'images'}/IMG_03.png"] == pytest.approx([2.3, 37.0])
    # the recorded column permutation is what was applied: transform_matrix = LLFF matrix @ P
    row = np.load(root / "poses_bounds.npy")[3, :15].reshape(3, 5)[:, :4]
    np.testing.assert_allclose(
        np.array(meta["frames"][3]["transform_matrix"])[:3],
        row @ np.array(conversion["camera_axes_change"]), atol=1e-12,
    )
    np.testing.assert_allclose(np.array(meta["frames"][3]["transform_matrix"]), known_poses()[3], atol=1e-12)

    downscale = 1 if folder is None else 2
    applied = np.array(conversion["applied_transform"])
    converted = load_all(root)
    for split in SPLITS:
        assert_matches_llff_loader(converted[split], load_llff(root, split, downscale=downscale), applied)


def test_fern(tmp_path: Path) -> None:
    if not (FERN / "poses_bounds.npy").is_file():
        pytest.skip(f"{FERN} is absent")
    root = tmp_path / "fern"
    shutil.copytree(FERN, root)  # the shared copy is read-only; transforms.json goes next to the images
    for path in [root, *root.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    convert_dataset(root, root)
    meta = read_transforms(root)
    assert len(meta["frames"]) == 20 and meta["conversion"]["images"] == "images_8"
    assert (meta["w"], meta["h"]) == (504, 378)
    applied = np.array(meta["conversion"]["applied_transform"])
    converted = load_split(root, "test", dataset_format="nerfstudio")
    assert_matches_llff_loader(converted, load_llff(root, "test", downscale=8), applied)


# ------------------------------------------------------------------------------------------- bad input


def test_missing_images_file(tmp_path: Path) -> None:
    root = colmap_capture(tmp_path / "capture", ["PINHOLE"], binary=False)
    (root / "sparse" / "0" / "images.txt").unlink()
    with pytest.raises(DatasetError) as info:
        convert_dataset(root, root)
    assert_one_line(info.value, str(root / "sparse" / "0" / "images.txt"), "file not found")
    assert not (root / "transforms.json").exists()


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_unsupported_camera_model(tmp_path: Path, binary: bool) -> None:
    root = colmap_capture(tmp_path / "capture", ["PINHOLE"], binary=binary)
    model = root / "sparse" / "0"
    fisheye = [ColmapCamera(1, "PINHOLE", WIDTH, HEIGHT, CAMERA_PARAMS["PINHOLE"]),
               ColmapCamera(7, "THIN_PRISM_FISHEYE", WIDTH, HEIGHT, (7.0, 7.0, 4.0, 3.0, *[0.0] * 8))]
    images = list((read_images_binary if binary else read_images_text)(
        model / ("images.bin" if binary else "images.txt")).values())
    images[2] = ColmapImage(images[2].image_id, images[2].qvec, images[2].tvec, 7, images[2].name)
    write_model(model, fisheye, images, binary)
    with pytest.raises(DatasetError) as info:
        convert_dataset(root, root)
    cameras_file = model / ("cameras.bin" if binary else "cameras.txt")
    assert_one_line(info.value, str(cameras_file), "camera 7", "THIN_PRISM_FISHEYE")


def test_registered_image_missing_on_disk(tmp_path: Path) -> None:
    root = colmap_capture(tmp_path / "capture", ["OPENCV"], binary=True)
    (root / "images" / "frame_05.png").unlink()
    with pytest.raises(DatasetError) as info:
        convert_dataset(root, root)
    assert_one_line(info.value, str(root / "sparse" / "0" / "images.bin"), "frame_05.png", "does not exist")


def test_image_of_the_wrong_size(tmp_path: Path) -> None:
    root = colmap_capture(tmp_path / "capture", ["PINHOLE"], binary=False)
    write_png(root / "images" / "frame_02.png", 4, 3)
    with pytest.raises(DatasetError) as info:
        convert_dataset(root, root)
    assert_one_line(info.value, "images.txt", "frame_02.png", "is 4x3 pixels", "8x6")


def test_in_place_image_linked_from_outside_dst_is_refused(tmp_path: Path) -> None:
    root = colmap_capture(tmp_path / "capture", ["PINHOLE"], binary=False)
    outside = tmp_path / "outside.png"
    (root / "images" / "frame_02.png").rename(outside)
    (root / "images" / "frame_02.png").symlink_to(outside)  # the loader resolves links: it would refuse it
    with pytest.raises(DatasetError) as info:
        convert_dataset(root, root)
    assert_one_line(info.value, "frame_02.png", "outside", "expected the file itself, not a link to it")
    assert not (root / "transforms.json").exists()


def test_existing_output_needs_force(tmp_path: Path) -> None:
    root = colmap_capture(tmp_path / "capture", ["PINHOLE"], binary=False)
    (root / "transforms.json").write_text("keep me")
    with pytest.raises(FileExistsError) as info:
        convert_dataset(root, root)
    assert_one_line(info.value, str(root / "transforms.json"), "--force")
    assert (root / "transforms.json").read_text() == "keep me"
    convert_dataset(root, root, force=True)
    assert read_transforms(root)["conversion"]["source_format"] == "colmap-text"


# ------------------------------------------------------------------------------------------------- CLI


def test_cli_convert_then_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = colmap_capture(tmp_path / "capture", ["OPENCV"], binary=True)
    assert cli.main(["data", "convert", str(root), str(root)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {root / 'transforms.json'}: {NUM_IMAGES} frames from colmap-binary" in out
    assert cli.main(["data", "validate", str(root)]) == 0
    assert "OK" in capsys.readouterr().out
    # a second conversion keeps the file: one line on stderr, exit code 2
    before = (root / "transforms.json").read_bytes()
    assert cli.main(["data", "convert", str(root), str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "already exists" in err
    assert (root / "transforms.json").read_bytes() == before
    assert cli.main(["data", "convert", str(root), str(root), "--force"]) == 0


def test_cli_convert_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["data", "convert", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "SRC" in out and "DST" in out and "--force" in out and "--images" in out
