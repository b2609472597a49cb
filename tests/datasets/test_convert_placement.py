"""``nerf-lightning data convert SRC DST`` into a folder that does not hold the images: they are
hard-linked (or copied, ``--copy``) into ``DST``, from a source that may be read-only, atomically, and
never over a different file without ``--force``; the result validates and loads like an in-place
conversion."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nerf_lightning import cli
from nerf_lightning.datasets.convert import convert_dataset
from nerf_lightning.files import DiskFullError, is_temporary
from nerf_lightning.scenes.formats.llff import load_llff
from nerf_lightning.scenes.loading import load_split
from nerf_lightning.scenes.validate import validate_dataset
from tests.helpers.datasets import (
    NUM_IMAGES,
    SPLITS,
    assert_matches_llff_loader,
    assert_one_line,
    colmap_capture,
    llff_capture,
    read_transforms,
    write_png,
)

# --------------------------------------------------------------------------------------------- helpers


def make_read_only(root: Path) -> None:
    """``chmod -R a-w``: the conversion must only read the source."""
    for path in sorted([root, *root.rglob("*")], reverse=True):  # files before their folders
        path.chmod(path.stat().st_mode & ~0o222)


@pytest.fixture
def read_only() -> Iterator[list[Path]]:
    """Folders made read-only by a test, made writable again afterwards (so they can be removed)."""
    roots: list[Path] = []
    yield roots
    for root in roots:
        for path in [root, *root.rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)


def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under ``root``: its mode and, for files, its bytes (running as root, a read-only
    source could still be written: this proves it was not)."""
    paths = sorted(root.rglob("*"))
    return {p.relative_to(root).as_posix(): (p.stat().st_mode, p.read_bytes() if p.is_file() else None)
            for p in paths}


def same_inode(a: Path, b: Path) -> bool:
    return os.path.samefile(a, b)


def placement(folder: Path) -> dict[str, Any]:
    return read_transforms(folder)["conversion"]["image_placement"]


def temporary_files(root: Path) -> list[Path]:
    return [p for p in root.rglob(".*") if is_temporary(p.name)]


def assert_same_scene(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Two conversions' splits load to the same names, cameras and pixels."""
    for split in SPLITS:
        assert a[split].names == b[split].names
        for key in ("camera_to_world", "fx", "fy", "cx", "cy", "width", "height", "distortion"):
            torch.testing.assert_close(getattr(a[split].cameras, key), getattr(b[split].cameras, key))
        for x, y in zip(a[split].images, b[split].images, strict=True):
            torch.testing.assert_close(torch.as_tensor(np.asarray(x)), torch.as_tensor(np.asarray(y)))


def load_all(root: Path) -> dict[str, Any]:
    return {split: load_split(root, split, dataset_format="nerfstudio") for split in SPLITS}


# ---------------------------------------------------------------------------------------- fresh folders


def test_llff_read_only_into_fresh_folder_hard_links(tmp_path: Path, read_only: list[Path]) -> None:
    src = llff_capture(tmp_path / "capture")
    in_place = tmp_path / "in_place"
    shutil.copytree(src, in_place)
    convert_dataset(in_place, in_place, images=in_place / "images_2")
    make_read_only(src)
    read_only.append(src)
    before = snapshot(src)

    dst = tmp_path / "out" / "fresh"  # does not exist yet
    result = convert_dataset(src, dst, images=src / "images_2")
    assert snapshot(src) == before  # the source was only read
    for i in range(NUM_IMAGES):
        assert same_inode(dst / "images_2" / f"IMG_{i:02d}.png", src / "images_2" / f"IMG_{i:02d}.png")
    assert not (dst / "images").exists() and temporary_files(dst) == []

    meta, reference = read_transforms(dst), read_transforms(in_place)
    assert meta["frames"] == reference["frames"]  # the same file_path values as in place
    conversion = meta["conversion"]
    assert conversion["version"] == 2
    assert conversion["images"] == "images_2"
    assert conversion["source"] == (src / "poses_bounds.npy").resolve().as_posix()  # outside DST
    assert conversion["image_placement"] == {
        "mode": "linked", "from": (src / "images_2").resolve().as_posix(), "count": NUM_IMAGES,
        "linked": NUM_IMAGES, "copied": 0, "reused": 0,
    }
    assert reference["conversion"]["image_placement"] == {
        "mode": "in place", "from": "images_2", "count": 0, "linked": 0, "copied": 0, "reused": 0,
    }
    assert f"images placed in {dst / 'images_2'}" in result.messages[0]
    assert f"{NUM_IMAGES} hard-linked" in result.messages[0]

    report = validate_dataset(dst)
    assert report.ok and report.warnings == [], report.lines()
    converted = load_all(dst)
    assert_same_scene(converted, load_all(in_place))
    applied = np.array(conversion["applied_transform"])
    for split in SPLITS:
        assert_matches_llff_loader(converted[split], load_llff(src, split, downscale=2), applied)


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_colmap_read_only_into_fresh_folder_copies(
    tmp_path: Path, read_only: list[Path], binary: bool
) -> None:
    src = colmap_capture(tmp_path / "capture", ["OPENCV"], binary=binary)
    in_place = tmp_path / "in_place"
    shutil.copytree(src, in_place)
    convert_dataset(in_place, in_place)
    make_read_only(src)
    read_only.append(src)
    before = snapshot(src)

    dst = tmp_path / "out"
    convert_dataset(src / "sparse" / "0", dst, copy=True)  # SRC the model folder: images/ found above it
    assert snapshot(src) == before
    for i in range(NUM_IMAGES):
        copy, original = dst / "images" / f"frame_{i:02d}.png", src / "images" / f"frame_{i:02d}.png"
        assert not same_inode(copy, original) and copy.read_bytes() == original.read_bytes()
        assert copy.stat().st_mode & stat.S_IWUSR  # a copy is the user's to edit, unlike the source
    meta = read_transforms(dst)
    assert meta["frames"] == read_transforms(in_place)["frames"]
    assert meta["conversion"]["source"] == (src / "sparse" / "0").resolve().as_posix()
    assert meta["conversion"]["image_placement"]["mode"] == "copied"
    assert meta["conversion"]["image_placement"]["copied"] == NUM_IMAGES
    assert validate_dataset(dst).ok
    assert_same_scene(load_all(dst), load_all(in_place))


def test_in_place_and_ancestor_place_nothing(tmp_path: Path) -> None:
    src = colmap_capture(tmp_path / "capture", ["PINHOLE"], binary=True)
    convert_dataset(src, src, copy=True)  # --copy has nothing to do in place
    assert placement(src) == {"mode": "in place", "from": "images", "count": 0, "linked": 0, "copied": 0,
                              "reused": 0}
    convert_dataset(src, tmp_path)  # DST an ancestor of the images
    assert placement(tmp_path)["from"] == "capture/images" and placement(tmp_path)["count"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capture", "transforms.json"]
    assert sorted(p.name for p in src.iterdir()) == ["images", "sparse", "transforms.json"]


# ------------------------------------------------------------------------------------------------ reruns


def test_rerun_refused_then_force_reuses(tmp_path: Path, read_only: list[Path]) -> None:
    src = llff_capture(tmp_path / "capture")
    make_read_only(src)
    read_only.append(src)
    dst = tmp_path / "out"
    convert_dataset(src, dst)
    first = read_transforms(dst)
    assert first["conversion"]["images"] == "images"

    with pytest.raises(FileExistsError) as info:  # transforms.json is there: without --force, refused
        convert_dataset(src, dst)
    assert_one_line(info.value, str(dst / "transforms.json"), "--force")
    convert_dataset(src, dst, force=True)  # reuses the links: nothing is rewritten
    assert placement(dst) == {**first["conversion"]["image_placement"], "reused": NUM_IMAGES}
    assert read_transforms(dst)["frames"] == first["frames"]

    # a different file where an image goes: refused without --force (nothing written), replaced with it
    (dst / "transforms.json").unlink()
    target = dst / "images" / "IMG_03.png"
    target.unlink()
    write_png(target, 16, 12, seed=99)
    different = target.read_bytes()
    with pytest.raises(FileExistsError) as info:
        convert_dataset(src, dst)
    assert_one_line(info.value, str(target), "differs from", str(src / "images" / "IMG_03.png"), "--force")
    assert target.read_bytes() == different and not (dst / "transforms.json").exists()
    convert_dataset(src, dst, force=True)
    assert same_inode(target, src / "images" / "IMG_03.png")
    assert placement(dst)["reused"] == NUM_IMAGES - 1 and placement(dst)["linked"] == NUM_IMAGES

    # --copy replaces the links by copies (the same bytes: no --force needed for the images); copies
    # with the same bytes are then reused
    (dst / "transforms.json").unlink()
    convert_dataset(src, dst, copy=True)
    assert not same_inode(target, src / "images" / "IMG_03.png")
    assert placement(dst)["mode"] == "copied" and placement(dst)["reused"] == 0
    convert_dataset(src, dst, force=True)  # identical copies are kept, even without --copy
    kept = placement(dst)
    assert [kept[k] for k in ("mode", "copied", "linked", "reused")] == ["copied", NUM_IMAGES, 0, NUM_IMAGES]
    assert temporary_files(dst) == []


def test_a_link_in_dst_is_not_trusted(tmp_path: Path) -> None:
    src = llff_capture(tmp_path / "capture")
    dst = tmp_path / "out"
    (dst / "images").mkdir(parents=True)
    (dst / "images" / "IMG_00.png").symlink_to(src / "images" / "IMG_00.png")  # the loader would refuse it
    with pytest.raises(FileExistsError, match=r"IMG_00\.png: already exists and differs"):
        convert_dataset(src, dst)
    convert_dataset(src, dst, force=True)
    assert not (dst / "images" / "IMG_00.png").is_symlink()
    assert validate_dataset(dst).ok


def test_interrupted_copy_leaves_nothing_a_rerun_trusts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = colmap_capture(tmp_path / "capture", ["PINHOLE"], binary=False)
    dst = tmp_path / "out"
    real_copy = shutil.copyfileobj
    calls: list[int] = []

    def disk_full_at_the_fourth(data: Any, out: Any, length: int = 0) -> None:
        calls.append(1)
        if len(calls) == 4:
            out.write(data.read(100))  # half an image, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        real_copy(data, out, length)

    monkeypatch.setattr(shutil, "copyfileobj", disk_full_at_the_fourth)
    with pytest.raises(DiskFullError) as info:
        convert_dataset(src, dst, copy=True)
    target = dst / "images" / "frame_03.png"
    assert_one_line(info.value, f"{target}: no space left on device: writing it needs ", "bytes) free there")
    assert sorted(p.name for p in (dst / "images").iterdir()) == [f"frame_{i:02d}.png" for i in range(3)]
    assert not (dst / "transforms.json").exists()  # the rerun is not refused
    monkeypatch.undo()
    convert_dataset(src, dst, copy=True)
    assert placement(dst)["reused"] == 3 and placement(dst)["copied"] == NUM_IMAGES
    assert validate_dataset(dst).ok


def test_links_impossible_fall_back_to_copies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = llff_capture(tmp_path / "capture")
    dst = tmp_path / "out"
    attempts: list[str] = []

    def across_filesystems(source: Any, target: Any) -> None:
        attempts.append(str(target))
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", across_filesystems)
    result = convert_dataset(src, dst)
    assert len(attempts) == 1  # after EXDEV every link would fail: not tried again
    assert placement(dst)["mode"] == "copied" and placement(dst)["copied"] == NUM_IMAGES
    assert "hard links failed (Invalid cross-device link), copied instead" in result.messages[0]
    assert not same_inode(dst / "images" / "IMG_00.png", src / "images" / "IMG_00.png")


# ------------------------------------------------------------------------------------------------- CLI


def test_cli_convert_into_fresh_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], read_only: list[Path]
) -> None:
    src = llff_capture(tmp_path / "capture")
    make_read_only(src)
    read_only.append(src)
    dst = tmp_path / "out"
    assert cli.main(["data", "convert", str(src), str(dst), "--images", str(src / "images_2"), "--copy"]) == 0
    out = capsys.readouterr().out
    assert f"images placed in {dst / 'images_2'} from {src / 'images_2'}: {NUM_IMAGES} copied" in out
    assert cli.main(["data", "validate", str(dst)]) == 0
    assert capsys.readouterr().out == f"{dst}: OK, train/val/test frames: 6/1/2\n"
    assert cli.main(["data", "convert", str(src), str(dst)]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert json.loads((dst / "transforms.json").read_text())["conversion"]["images"] == "images_2"


def test_cli_convert_help_mentions_placement(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["data", "convert", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--copy" in out and "hard-linked" in out and "must contain" not in out
