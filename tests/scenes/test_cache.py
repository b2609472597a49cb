"""Image cache (nerf_lightning.scenes.cache, .cache_entry) and dataset fingerprints (.fingerprint)."""

from __future__ import annotations

import json
import logging
import math
import re
import shutil
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from PIL import Image

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.files import digests
from nerf_lightning.files.digests import MEMO_FOLDER
from nerf_lightning.scenes import cache, cache_build
from nerf_lightning.scenes.cache import cached_load_split, default_cache_dir
from nerf_lightning.scenes.cache_entry import (
    ALPHAS_FILE,
    CAMERAS_FILE,
    MANIFEST_FILE,
    PIXELS_FILE,
    _under_root,
)
from nerf_lightning.scenes.fingerprint import dataset_fingerprint, split_fingerprint
from nerf_lightning.scenes.formats import blender, llff, nerfstudio
from nerf_lightning.scenes.images import load_image, quantize_to_uint8
from nerf_lightning.scenes.loading import load_split
from nerf_lightning.scenes.scene import PackedImages, SceneSplit

FOX = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "fox"


# ------------------------------------------------------------------------------------------------ helpers


@pytest.fixture
def scene(tmp_path: Path) -> Path:
    return make_demo_scene(tmp_path / "scene", num_train=4, num_val=2, num_test=2, resolution=16)


def assert_same_split(got: SceneSplit, expected: SceneSplit) -> None:
    """Bitwise equality of everything a split holds."""
    for f in fields(Cameras):
        a, b = getattr(got.cameras, f.name), getattr(expected.cameras, f.name)
        assert a.dtype == b.dtype and torch.equal(a, b), f.name
    assert len(got.images) == len(expected.images)
    for a, b in zip(got.images, expected.images, strict=True):
        assert a.dtype == b.dtype == torch.float32 and torch.equal(a, b)
    assert isinstance(got.images, PackedImages) and isinstance(expected.images, PackedImages)
    assert torch.equal(got.images.pixels, expected.images.pixels)
    assert got.images.shapes == expected.images.shapes
    assert got.names == expected.names
    assert got.source == expected.source
    assert got.depth_range == expected.depth_range
    assert got.world_scale == expected.world_scale
    if expected.world_transform is None:
        assert got.world_transform is None
    else:
        assert torch.equal(got.world_transform, expected.world_transform)
    for name in ("alphas", "masks"):
        a, b = getattr(got, name), getattr(expected, name)
        assert (a is None) == (b is None) and (a is None or (a.dtype == b.dtype and torch.equal(a, b))), name


@contextmanager
def decode_spy(module: object = blender) -> Iterator[mock.MagicMock]:
    """Counts the images a loader module decodes (the real decoder runs)."""
    with mock.patch.object(module, "load_image", wraps=load_image) as spy:
        yield spy


def entries(cache_dir: Path) -> list[Path]:
    """The entry folders (not temporary folders, not the file digest memo)."""
    return sorted(p for p in cache_dir.iterdir() if not p.name.startswith(".") and p.name != MEMO_FOLDER)


def only_entry(cache_dir: Path) -> Path:
    (entry,) = entries(cache_dir)
    return entry


def rewrite_png(path: Path) -> None:
    """Rewrite an image with one pixel changed."""
    with Image.open(path) as img:
        array = np.array(img)
    array[0, 0, 0] = (int(array[0, 0, 0]) + 77) % 256
    if array.shape[-1] == 4:
        array[0, 0, 3] = 255
    Image.fromarray(array).save(path)


def reformat_json(path: Path) -> None:
    """Rewrite a JSON file as ``json.dumps`` writes it (so later edits change only the edited value)."""
    path.write_text(json.dumps(json.loads(path.read_text())))


# -------------------------------------------------------------------------------------------- PackedImages


def test_packed_images_round_trip() -> None:
    images = [torch.rand(3, 5, 3), torch.rand(2, 4, 3), torch.tensor([[[0.0, 1.0, 0.5]]])]
    packed = PackedImages.from_images(images)
    assert len(packed) == 3 and packed.shapes == ((3, 5), (2, 4), (1, 1))
    assert packed.pixels.shape == (15 + 8 + 1, 3) and packed.pixels.dtype == torch.uint8
    assert packed.offsets.tolist() == [0, 15, 23, 24]
    for got, image in zip(packed, images, strict=True):
        assert torch.equal(got, quantize_to_uint8(image).float() / 255.0)
        assert (got - image).abs().max() <= 0.5 / 255 + 1e-7
    assert torch.equal(packed.uint8(-1), torch.tensor([[[0, 255, 128]]], dtype=torch.uint8))
    assert [t.shape for t in packed[1:]] == [(2, 4, 3), (1, 1, 3)]
    assert torch.equal(torch.stack(list(packed[:1]))[0], packed[0])
    with pytest.raises(IndexError):
        packed[3]
    with pytest.raises(ValueError, match="pixels"):
        PackedImages(torch.zeros(5, 3, dtype=torch.uint8), [(2, 2)])


def test_quantize_to_uint8() -> None:
    values = torch.tensor([-0.1, 0.0, 0.6 / 255, 0.4 / 255, 0.5, 1.0, 1.2])  # 127.5 rounds to even
    assert quantize_to_uint8(values).tolist() == [0, 0, 1, 0, 128, 255, 255]
    q = torch.arange(256, dtype=torch.uint8)
    assert torch.equal(quantize_to_uint8(q.float() / 255.0), q)  # q / 255 round-trips exactly


def test_load_split_quantizes_loader_images(scene: Path) -> None:
    raw = blender.load_blender(scene, "train")
    split = load_split(scene, "train")
    assert isinstance(split.images, PackedImages)
    for got, image in zip(split.images, raw.images, strict=True):
        assert torch.equal(got, quantize_to_uint8(image).float() / 255.0)


# ---------------------------------------------------------------------------------------------- the cache


def test_build_then_hit_equals_uncached(
    scene: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache_dir = tmp_path / "cache"
    dataset_files = {p: p.stat().st_mtime_ns for p in scene.rglob("*")}
    with decode_spy() as spy:
        built = cached_load_split(scene, "train", cache_dir=cache_dir)
    assert spy.call_count == 4
    entry = only_entry(cache_dir)
    assert {p.name for p in entry.iterdir()} == {PIXELS_FILE, ALPHAS_FILE, CAMERAS_FILE, MANIFEST_FILE}
    assert (entry / PIXELS_FILE).stat().st_size == 4 * 16 * 16 * 3
    assert (entry / ALPHAS_FILE).stat().st_size == 4 * 16 * 16  # the demo scene's images are RGBA
    manifest = json.loads((entry / MANIFEST_FILE).read_text())
    assert manifest["key"] == entry.name and manifest["split"] == "train" and manifest["format"] == "blender"
    assert manifest["shapes"] == [[16, 16]] * 4 and manifest["offsets"] == [0, 768, 1536, 2304]
    assert manifest["fingerprint"] == split_fingerprint(scene, "train")
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".")]  # no temporary folders left

    with decode_spy() as spy, caplog.at_level(logging.INFO, logger=cache.__name__):
        hit = cached_load_split(scene, "train", dataset_format="auto", cache_dir=cache_dir)
        hit_explicit = cached_load_split(scene, "train", dataset_format="blender", cache_dir=cache_dir)
    assert spy.call_count == 0
    assert "image cache hit" in caplog.text
    assert entries(cache_dir) == [entry]
    uncached = load_split(scene, "train")
    for split in (built, hit, hit_explicit):
        assert_same_split(split, uncached)
    assert hit.source == str(scene / "transforms_train.json")
    assert {p: p.stat().st_mtime_ns for p in scene.rglob("*")} == dataset_files  # the dataset is only read


def test_entry_found_from_a_copy_of_the_dataset(scene: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    cached_load_split(scene, "val", cache_dir=cache_dir)
    moved = tmp_path / "moved"
    shutil.copytree(scene, moved)
    with decode_spy() as spy:
        hit = cached_load_split(moved, "val", cache_dir=cache_dir)
    assert spy.call_count == 0
    assert_same_split(hit, load_split(moved, "val"))  # paths name the copy, not the original


def test_default_cache_dir(scene: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "nerf-lightning"
    cached_load_split(scene, "test")
    assert len(entries(tmp_path / "xdg" / "nerf-lightning")) == 1
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == Path.home() / ".cache" / "nerf-lightning"


def test_changed_image_or_pose_misses(scene: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    reformat_json(scene / "transforms_train.json")
    cached_load_split(scene, "train", cache_dir=cache_dir)
    first = only_entry(cache_dir)

    rewrite_png(scene / "val" / "r_0.png")  # another split's image: the train entry still holds
    with decode_spy() as spy:
        cached_load_split(scene, "train", cache_dir=cache_dir)
    assert spy.call_count == 0 and entries(cache_dir) == [first]

    rewrite_png(scene / "train" / "r_2.png")
    with decode_spy() as spy:
        changed = cached_load_split(scene, "train", cache_dir=cache_dir)
    assert spy.call_count == 4 and len(entries(cache_dir)) == 2
    assert_same_split(changed, load_split(scene, "train"))

    meta = json.loads((scene / "transforms_train.json").read_text())
    meta["frames"][1]["transform_matrix"][0][3] += 0.01
    (scene / "transforms_train.json").write_text(json.dumps(meta))
    with decode_spy() as spy:
        moved = cached_load_split(scene, "train", cache_dir=cache_dir)
    assert spy.call_count == 4 and len(entries(cache_dir)) == 3
    assert_same_split(moved, load_split(scene, "train"))


def test_changed_settings_miss(scene: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    cached_load_split(scene, "train", cache_dir=cache_dir)
    for count, (background, downscale) in enumerate([((0.0, 0.0, 0.0), 1), ((0.0, 0.0, 0.0), 2)], start=2):
        with decode_spy() as spy:
            split = cached_load_split(scene, "train", background=background, downscale=downscale,
                                      cache_dir=cache_dir)
        assert spy.call_count == 4 and len(entries(cache_dir)) == count
        assert_same_split(split, load_split(scene, "train", background=background, downscale=downscale))
    with decode_spy() as spy:
        hit = cached_load_split(scene, "train", background=[0, 0, 0], downscale=2, cache_dir=cache_dir)
    assert spy.call_count == 0
    assert hit.images.shapes == ((8, 8),) * 4


def flip_pixel_byte(entry: Path) -> None:
    data = bytearray((entry / PIXELS_FILE).read_bytes())
    data[100] ^= 0x01
    (entry / PIXELS_FILE).write_bytes(bytes(data))


def truncate_pixels(entry: Path) -> None:
    with open(entry / PIXELS_FILE, "r+b") as file:
        file.truncate(1000)


def flip_alpha_byte(entry: Path) -> None:
    data = bytearray((entry / ALPHAS_FILE).read_bytes())
    data[-1] ^= 0x01
    (entry / ALPHAS_FILE).write_bytes(bytes(data))


def flip_camera_byte(entry: Path) -> None:
    data = bytearray((entry / CAMERAS_FILE).read_bytes())
    data[len(data) // 2] ^= 0x10
    (entry / CAMERAS_FILE).write_bytes(bytes(data))


def edit_manifest(entry: Path) -> None:  # consistent JSON that lies about the images
    manifest = json.loads((entry / MANIFEST_FILE).read_text())
    manifest["shapes"][0] = [8, 32]
    (entry / MANIFEST_FILE).write_text(json.dumps(manifest))


CORRUPTIONS = {
    "flipped pixel byte": (flip_pixel_byte, "pixels.u8 sha256 mismatch"),
    "truncated pixels": (truncate_pixels, "pixels.u8 has 1000 bytes"),
    "missing pixels": (lambda e: (e / PIXELS_FILE).unlink(), "pixels.u8 is missing"),
    "flipped alpha byte": (flip_alpha_byte, "alphas.u8 sha256 mismatch"),
    "missing alphas": (lambda e: (e / ALPHAS_FILE).unlink(), "alphas.u8 is missing"),
    "flipped camera byte": (flip_camera_byte, "cameras.pt sha256 mismatch"),
    "missing manifest": (lambda e: (e / MANIFEST_FILE).unlink(), "manifest.json is missing"),
    "unparsable manifest": (lambda e: (e / MANIFEST_FILE).write_text('{"key": '), "cannot be parsed"),
    "edited manifest": (edit_manifest, "camera sizes"),
    "entry is a file": (lambda e: (shutil.rmtree(e), e.write_text("x")), "manifest.json is missing"),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_corrupt_entry_is_rebuilt(corruption: str, scene: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    cached_load_split(scene, "train", cache_dir=cache_dir)
    entry = only_entry(cache_dir)
    damage, problem = CORRUPTIONS[corruption]
    damage(entry)

    with decode_spy() as spy, pytest.warns(UserWarning, match="image cache entry") as record:
        rebuilt = cached_load_split(scene, "train", cache_dir=cache_dir)
    messages = [str(w.message) for w in record if "image cache" in str(w.message)]
    assert len(messages) == 1 and str(entry) in messages[0] and problem in messages[0], messages
    assert spy.call_count == 4
    assert_same_split(rebuilt, load_split(scene, "train"))

    assert entries(cache_dir) == [entry] and entry.is_dir()  # rebuilt in place, trash removed
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".")]
    with decode_spy() as spy, warnings.catch_warnings():
        warnings.simplefilter("error")
        hit = cached_load_split(scene, "train", cache_dir=cache_dir)
    assert spy.call_count == 0
    assert_same_split(hit, rebuilt)


def test_warm_hit_reads_no_file_again_until_one_changes(
    scene: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(digests, "RACY_SECONDS", 0.0)  # remember files just written (we sleep a tick)
    digests.forget_in_process()
    cache_dir = tmp_path / "cache"
    cached_load_split(scene, "train", cache_dir=cache_dir)  # builds; the dataset's files are hashed
    cached_load_split(scene, "train", cache_dir=cache_dir)  # first hit: the pixels are hashed
    entry = only_entry(cache_dir)
    digests.forget_in_process()  # a new process: only the memo on disk
    with mock.patch.object(digests, "file_sha256", wraps=digests.file_sha256) as spy:
        hit = cached_load_split(scene, "train", cache_dir=cache_dir)
    assert spy.call_count == 0  # neither the dataset nor the pixels were read to check them
    assert_same_split(hit, load_split(scene, "train"))
    assert (cache_dir / MEMO_FOLDER).is_dir() and entries(cache_dir) == [entry]

    time.sleep(0.05)  # a file system timestamp tick: the change below shows in mtime and ctime
    flip_pixel_byte(entry)
    with pytest.warns(UserWarning, match="pixels.u8 sha256 mismatch"):
        rebuilt = cached_load_split(scene, "train", cache_dir=cache_dir)
    assert_same_split(rebuilt, load_split(scene, "train"))  # (hit maps the damaged file: not compared)
    time.sleep(0.05)
    rewrite_png(scene / "train" / "r_1.png")
    with decode_spy() as spy:
        cached_load_split(scene, "train", cache_dir=cache_dir)
    assert spy.call_count == 4 and len(entries(cache_dir)) == 2
    digests.forget_in_process()


def test_unwritable_cache_dir_falls_back_with_one_warning(scene: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder's parent should be")
    cache_dir = blocker / "cache"
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        first = cached_load_split(scene, "train", cache_dir=cache_dir)
        second = cached_load_split(scene, "val", cache_dir=cache_dir)
    messages = [str(w.message) for w in record]
    assert len(messages) == 1 and "cannot be written" in messages[0] and str(cache_dir) in messages[0]
    assert_same_split(first, load_split(scene, "train"))
    assert_same_split(second, load_split(scene, "val"))


def test_losing_a_write_race_keeps_the_winner(scene: Path, tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    split = cached_load_split(scene, "train", cache_dir=cache_dir)
    entry = only_entry(cache_dir)
    manifest = (entry / MANIFEST_FILE).read_bytes()
    settings = {k: v for k, v in json.loads(manifest).items() if k in cache._settings("", "", "", (0,), 1)}
    time.sleep(1.1)  # a later creation time would show in the manifest if the entry were replaced
    cache_build.write_entry(cache_dir, entry.name, settings, split, scene, [])  # the slower process
    assert entries(cache_dir) == [entry] and (entry / MANIFEST_FILE).read_bytes() == manifest
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".")]


def test_dataset_errors_are_not_cache_errors(tmp_path: Path) -> None:
    from nerf_lightning.scenes.errors import DatasetError

    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError):
        cached_load_split(tmp_path / "empty", "train", cache_dir=tmp_path / "cache")
    with pytest.raises(DatasetError):
        cached_load_split(tmp_path / "empty", "train", dataset_format="blender", cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match="dataset_format"):
        cached_load_split(tmp_path / "empty", "train", dataset_format="colmap", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not entries(tmp_path / "cache")


# ------------------------------------------------------------------------------- nerfstudio and LLFF


def write_image(path: Path, width: int, height: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def write_nerfstudio(root: Path, count: int = 9, missing: int = 1) -> Path:
    frames = []
    for i in range(count):
        name = f"images/frame_{i:03d}.png"
        if i >= missing:
            write_image(root / name, 10, 8, i)
        pose = np.eye(4)
        pose[:3, 3] = [0.1 * i, 0.0, 3.0]
        frames.append({"file_path": name, "transform_matrix": pose.tolist()})
    meta = {"fl_x": 12.0, "w": 10, "h": 8, "k1": 0.01, "frames": frames}
    (root / "transforms.json").write_text(json.dumps(meta))
    return root


def write_llff(root: Path, count: int = 9) -> Path:
    rows = []
    for i in range(count):
        angle = 0.05 * i
        cos, sin = math.cos(angle), math.sin(angle)
        rotation = np.array([[cos, 0, sin], [0, 1, 0], [-sin, 0, cos]])
        matrix = np.concatenate([rotation, [[0.1 * i], [0.0], [0.0]], [[12.0], [16.0], [20.0]]], axis=1)
        rows.append(np.concatenate([matrix.reshape(-1), [2.0 + 0.1 * i, 10.0]]))
        write_image(root / "images" / f"IMG_{i:02d}.png", 16, 12, 50 + i)
    np.save(root / "poses_bounds.npy", np.stack(rows))
    return root


def test_nerfstudio_entry_replays_loader_warnings(tmp_path: Path) -> None:
    root = write_nerfstudio(tmp_path / "capture")
    cache_dir = tmp_path / "cache"
    with decode_spy(nerfstudio) as spy, pytest.warns(UserWarning, match="skipping 1 frame"):
        built = cached_load_split(root, "train", cache_dir=cache_dir)
    assert spy.call_count == len(built) > 0
    with decode_spy(nerfstudio) as spy, pytest.warns(UserWarning, match="skipping 1 frame"):
        hit = cached_load_split(root, "train", cache_dir=cache_dir)
    assert spy.call_count == 0
    with pytest.warns(UserWarning, match="skipping 1 frame"):
        uncached = load_split(root, "train")
    assert_same_split(built, uncached)
    assert_same_split(hit, uncached)
    assert hit.cameras.distortion[:, 0].eq(0.01).all()


def test_a_copy_of_the_dataset_elsewhere_hits_the_entry_and_its_warnings_name_the_copy(
    tmp_path: Path,
) -> None:
    original = write_nerfstudio(tmp_path / "capture")
    copy = tmp_path / "moved" / "capture"
    shutil.copytree(original, copy)
    cache_dir = tmp_path / "cache"
    with pytest.warns(UserWarning, match="skipping 1 frame"):
        cached_load_split(original, "train", cache_dir=cache_dir)
    with decode_spy(nerfstudio) as spy, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cached_load_split(copy, "train", cache_dir=cache_dir)
    assert spy.call_count == 0  # a hit: the key is the content's, not the folder's
    messages = [str(w.message) for w in caught if "skipping 1 frame" in str(w.message)]
    assert len(messages) == 1
    assert str(copy / "transforms.json") in messages[0]
    assert str(original) not in messages[0].replace(str(copy), "")


@pytest.mark.parametrize(("message", "recorded", "root", "expected"), [
    ("/a/fox/transforms.json: skipping 1", "/a/fox", "/b/fox", "/b/fox/transforms.json: skipping 1"),
    ("/a/foxes/transforms.json: x", "/a/fox", "/b/fox", "/a/foxes/transforms.json: x"),
    ("/a/fox copy/transforms.json: x", "/a/fox", "/b/fox", "/a/fox copy/transforms.json: x"),
    ("in '/a/fox': no images", "/a/fox", "/b/fox", "in '/b/fox': no images"),
    ("/z/a/fox/t.json: x", "/a/fox", "/b/fox", "/z/a/fox/t.json: x"),
    ("t.json: skipping 1 frame(s): a.png, ...", ".", "/b/fox", "t.json: skipping 1 frame(s): a.png, ..."),
    ("/a/[x]+(1)/t.json: x", "/a/[x]+(1)", "/b", "/b/t.json: x"),
    ("C:\\d\\fox\\t.json: x", "C:\\d\\fox", "D:\\e", "D:\\e\\t.json: x"),
    ("capture/t.json: 'capture 2.png' missing", "capture", "other", "other/t.json: 'capture 2.png' missing"),
])
def test_a_replayed_warning_names_the_root_where_it_begins_a_path(message: str, recorded: str, root: str,
                                                                  expected: str) -> None:
    assert _under_root(message, recorded, Path(root)) == expected


def test_an_entry_without_a_recorded_root_replays_its_warnings_as_written(tmp_path: Path) -> None:
    original = write_nerfstudio(tmp_path / "capture")
    cache_dir = tmp_path / "cache"
    with pytest.warns(UserWarning, match="skipping 1 frame"):
        cached_load_split(original, "train", cache_dir=cache_dir)
    (manifest_path,) = cache_dir.glob(f"*/{MANIFEST_FILE}")
    manifest = json.loads(manifest_path.read_text())
    assert manifest.pop("loader_root") == str(original)
    manifest_path.write_text(json.dumps(manifest))  # an entry written before the root was recorded
    copy = tmp_path / "moved" / "capture"
    shutil.copytree(original, copy)
    with pytest.warns(UserWarning, match="skipping 1 frame") as caught:
        cached_load_split(copy, "train", cache_dir=cache_dir)
    assert any(str(original / "transforms.json") in str(w.message) for w in caught)


def test_llff_entry(tmp_path: Path) -> None:
    root = write_llff(tmp_path / "capture")
    cache_dir = tmp_path / "cache"
    cached_load_split(root, "train", downscale=2, cache_dir=cache_dir)
    with decode_spy(llff) as spy:
        hit = cached_load_split(root, "train", downscale=2, cache_dir=cache_dir)
    assert spy.call_count == 0
    uncached = load_split(root, "train", downscale=2)
    assert uncached.depth_range is not None and uncached.world_transform is not None
    assert_same_split(hit, uncached)
    # any pose change re-normalises every split: the key covers the whole capture
    array = np.load(root / "poses_bounds.npy")
    array[0, 3] += 0.5  # camera 0 is a test image
    np.save(root / "poses_bounds.npy", array)
    with decode_spy(llff) as spy:
        moved = cached_load_split(root, "train", downscale=2, cache_dir=cache_dir)
    assert spy.call_count == len(moved)
    assert_same_split(moved, load_split(root, "train", downscale=2))


# ------------------------------------------------------------------------------------------ fingerprints


def test_fingerprint_stable_and_sensitive(scene: Path) -> None:
    reformat_json(scene / "transforms_val.json")
    first = dataset_fingerprint(scene)
    assert first == dataset_fingerprint(scene, dataset_format="blender") == dataset_fingerprint(str(scene))
    assert re.fullmatch(r"[0-9a-f]{64}", first), first  # a sha256 hex digest
    train = split_fingerprint(scene, "train")
    assert train != first

    (scene / "README.txt").write_text("not part of the dataset")
    assert dataset_fingerprint(scene) == first

    rewrite_png(scene / "test" / "r_1.png")
    second = dataset_fingerprint(scene)
    assert second != first
    assert split_fingerprint(scene, "train") == train  # the train split's inputs did not change

    meta = json.loads((scene / "transforms_val.json").read_text())
    meta["frames"][0]["transform_matrix"][2][3] += 1e-6
    (scene / "transforms_val.json").write_text(json.dumps(meta))
    third = dataset_fingerprint(scene)
    assert third not in (first, second)

    (scene / "train" / "r_3.png").rename(scene / "train" / "r_3_renamed.png")
    assert dataset_fingerprint(scene) != third and split_fingerprint(scene, "train") != train


def test_fingerprint_of_llff_and_nerfstudio(tmp_path: Path) -> None:
    root = write_llff(tmp_path / "llff")
    first = dataset_fingerprint(root)
    assert split_fingerprint(root, "val") == first
    write_image(root / "images" / "IMG_03.png", 16, 12, 999)
    assert dataset_fingerprint(root) != first

    root = write_nerfstudio(tmp_path / "ns", missing=1)
    first = dataset_fingerprint(root)
    write_image(root / "images" / "frame_000.png", 10, 8, 0)  # the missing frame appears
    assert dataset_fingerprint(root) != first


@pytest.mark.skipif(not FOX.is_dir(), reason=f"{FOX} is not there")
def test_fingerprint_of_fox(tmp_path: Path) -> None:
    dataset_fingerprint(FOX)  # warm the file cache
    start = time.perf_counter()
    first = dataset_fingerprint(FOX)
    elapsed = time.perf_counter() - start
    assert first == dataset_fingerprint(FOX, dataset_format="nerfstudio")
    assert elapsed < 2.0, f"{elapsed:.2f} s to fingerprint fox"

    copy = tmp_path / "fox"
    shutil.copytree(FOX, copy)
    assert dataset_fingerprint(copy) == first  # content, not location
    reformat_json(copy / "transforms.json")
    first = dataset_fingerprint(copy)
    meta = json.loads((copy / "transforms.json").read_text())
    image = copy / meta["frames"][0]["file_path"]
    data = bytearray(image.read_bytes())
    data[-3] ^= 0xFF
    image.write_bytes(bytes(data))
    changed = dataset_fingerprint(copy)
    assert changed != first
    meta["frames"][5]["transform_matrix"][0][3] += 1e-4
    (copy / "transforms.json").write_text(json.dumps(meta))
    assert dataset_fingerprint(copy) not in (first, changed)


def test_data_cache_command_warms_every_split(
    scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nerf_lightning.cli import main

    cache_dir = tmp_path / "cache"
    assert main(["data", "cache", str(scene), "--cache-dir", str(cache_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["train", "val", "test"]
    assert lines[0].startswith("train: 4 images") and lines[0].endswith("(cached)")
    expected = {cache.cache_entry_path(scene, split, cache_dir=cache_dir)
                for split in ("train", "val", "test")}
    assert set(entries(cache_dir)) == expected
    with decode_spy() as spy:
        assert main(["data", "cache", str(scene), "--cache-dir", str(cache_dir), "--splits", "train"]) == 0
    assert spy.call_count == 0
    assert capsys.readouterr().out.strip().endswith("(already cached)")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["data", "cache", str(scene), "--cache-dir", str(blocker / "cache")]) == 1
    assert "NOT cached" in capsys.readouterr().out
