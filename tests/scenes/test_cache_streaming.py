"""The image cache's first load, one image at a time (nerf_lightning.scenes.cache_build.build_entry):
memory that does not grow with the number of images, a split that maps the entry it just wrote (and
that training reads without a copy), alphas and masks streamed bitwise as the loaders give them, and an
interrupted build continued without preparing its finished images again, a second load waiting for
the build in progress instead of building the entry too, and the same entry whatever the number of
threads preparing images."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from PIL import Image

from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.scenes import cache, loading
from nerf_lightning.scenes.cache import cache_entry_path, cached_load_split
from nerf_lightning.scenes.cache_build import PARTIAL_PREFIX, _build_lock, write_entry
from nerf_lightning.scenes.cache_entry import ALPHAS_FILE, CAMERAS_FILE, MANIFEST_FILE, PIXELS_FILE
from nerf_lightning.scenes.fingerprint import split_fingerprint
from nerf_lightning.scenes.formats import blender
from nerf_lightning.scenes.formats.common import ImageStream, SplitImages, in_order
from nerf_lightning.scenes.images import load_image
from nerf_lightning.scenes.loading import load_split
from nerf_lightning.scenes.scene import SceneSplit
from tests.helpers.datasets import pose, rgba_pixels
from tests.helpers.memory import mapped_file, peak_anon_growth

SIDE = 320
"""Image side of the memory test: 96 images hold 9.8 M pixels; the whole-split load this replaces held
about 37 bytes per pixel (360 MB) at its peak."""


def entry_of(cache_dir: Path, split: str = "train") -> Path:
    """The one entry of ``split`` in ``cache_dir``."""
    (entry,) = [p for p in cache_dir.iterdir() if (p / MANIFEST_FILE).is_file()
                and json.loads((p / MANIFEST_FILE).read_text())["split"] == split]
    return entry


def assert_bitwise(got: SceneSplit, expected: SceneSplit) -> None:
    assert torch.equal(got.images.pixels, expected.images.pixels)
    assert got.images.shapes == expected.images.shapes and got.names == expected.names
    for name in ("alphas", "masks"):
        a, b = getattr(got, name), getattr(expected, name)
        assert (a is None) == (b is None), name
        assert a is None or (a.dtype == b.dtype and torch.equal(a, b)), name
    assert torch.equal(got.cameras.camera_to_world, expected.cameras.camera_to_world)
    assert torch.equal(got.cameras.fx, expected.cameras.fx)


def write_blender_copies(root: Path, count: int, side: int) -> Path:
    """A Blender split of ``count`` RGBA images of ``side`` pixels, all copies of one file."""
    (root / "train").mkdir(parents=True)
    Image.fromarray(rgba_pixels(side, side, 0)).save(root / "train" / "r_0.png")
    for i in range(1, count):
        shutil.copyfile(root / "train" / "r_0.png", root / "train" / f"r_{i}.png")
    frames = [{"file_path": f"train/r_{i}", "transform_matrix": pose(0.01 * i)} for i in range(count)]
    (root / "transforms_train.json").write_text(json.dumps({"camera_angle_x": 0.7, "frames": frames}))
    return root


def test_first_load_memory_does_not_grow_with_the_number_of_images(tmp_path: Path) -> None:
    growth = {}
    for count in (16, 96):
        root = write_blender_copies(tmp_path / f"scene{count}", count, SIDE)
        split, growth[count] = peak_anon_growth(
            lambda root=root: cached_load_split(root, "train", cache_dir=tmp_path / "cache", num_workers=2))
        assert len(split) == count
    assert growth[96] < growth[16] + 8 * 2**20, growth  # flat: 80 more images, no more memory
    float_rgb = 96 * SIDE * SIDE * 3 * 4  # what holding the images as loaders give them would take: 118 MB
    assert growth[96] < float_rgb / 2, growth


def test_a_cold_build_gives_a_map_of_the_entry_that_training_reads_in_place(tmp_path: Path) -> None:
    scene = make_demo_scene(tmp_path / "scene", num_train=4, num_val=2, num_test=2, resolution=16)
    cache_dir = tmp_path / "cache"
    built = cached_load_split(scene, "train", cache_dir=cache_dir)
    entry = entry_of(cache_dir)
    assert {p.name for p in entry.iterdir()} == {PIXELS_FILE, ALPHAS_FILE, CAMERAS_FILE, MANIFEST_FILE}
    assert mapped_file(built.images.pixels) == entry / PIXELS_FILE
    assert built.alphas is not None and mapped_file(built.alphas) == entry / ALPHAS_FILE
    assert_bitwise(built, load_split(scene, "train"))
    assert_bitwise(cached_load_split(scene, "train", cache_dir=cache_dir), built)

    data = NerfDataModule(root=str(scene), cache_dir=str(tmp_path / "cache2"), random_background=True,
                          rays_per_batch=64)
    data.setup("fit")
    batch = data.train_batch(0, torch.device("cpu"))
    store = data._train_store
    assert store is not None and batch.rgb.shape == (64, 3)
    entry = entry_of(tmp_path / "cache2")
    assert mapped_file(store.pixels) == entry / PIXELS_FILE  # no copy of the training pixels
    assert store.alphas is not None and mapped_file(store.alphas) == entry / ALPHAS_FILE


def write_mixed_capture(root: Path) -> Path:
    """A nerfstudio capture of 5x3 frames (15 pixels: masks do not fill whole bytes per image): frames
    0-3 RGB, 4-7 RGBA; masks on frames 2, 5 and 6 only."""
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    rng = np.random.default_rng(3)
    frames = []
    for i in range(16):
        name = f"images/{i:02d}.png"
        channels = 4 if i % 8 >= 4 else 3
        Image.fromarray(rng.integers(0, 256, (3, 5, channels), dtype=np.uint8)).save(root / name)
        frame = {"file_path": name, "transform_matrix": pose(0.1 * i)}
        if i % 8 in (2, 5, 6):
            mask = (rng.random((3, 5)) > 0.3).astype(np.uint8) * 255
            Image.fromarray(mask, mode="L").save(root / "masks" / f"{i:02d}.png")
            frame["mask_path"] = f"masks/{i:02d}.png"
        frames.append(frame)
    (root / "transforms.json").write_text(json.dumps({"fl_x": 6.0, "w": 5, "h": 3, "frames": frames}))
    return root


def test_alphas_and_masks_stream_bitwise_as_the_loader_gives_them(tmp_path: Path) -> None:
    root = write_mixed_capture(tmp_path / "capture")
    cache_dir = tmp_path / "cache"
    for split in ("train", "val", "test"):
        expected = load_split(root, split)
        built = cached_load_split(root, split, cache_dir=cache_dir)
        assert_bitwise(built, expected)
        assert_bitwise(cached_load_split(root, split, cache_dir=cache_dir), expected)
    train = load_split(root, "train")  # RGB frames first, then RGBA ones: opaque alpha before theirs
    assert train.alphas is not None and train.masks is not None
    assert train.alphas[:15].eq(255).all() and not train.alphas.eq(255).all()
    test = load_split(root, "test")  # frames 0 and 8: RGB, without masks
    assert test.alphas is None and test.masks is None
    assert not (entry_of(cache_dir, "test") / ALPHAS_FILE).exists()
    assert (entry_of(cache_dir, "train") / ALPHAS_FILE).is_file()


def interrupt_after(count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make Blender builds stop with ``KeyboardInterrupt`` (a Ctrl-C) when ``count`` images are prepared."""
    original = loading.STREAMS["blender"]

    def interrupted(root: Path, split: str, **options: Any) -> ImageStream:
        stream = original(root, split, **options)

        def images() -> SplitImages:
            for _, image in zip(range(count), stream.images, strict=False):
                yield image
            raise KeyboardInterrupt

        return ImageStream(stream.count, images())

    monkeypatch.setitem(loading.STREAMS, "blender", interrupted)


def test_an_interrupted_build_resumes_without_preparing_its_finished_images_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scene = make_demo_scene(tmp_path / "scene", num_train=6, num_val=2, num_test=2, resolution=16)
    cache_dir = tmp_path / "cache"
    with monkeypatch.context() as patch:
        interrupt_after(4, patch)
        with pytest.raises(KeyboardInterrupt):
            cached_load_split(scene, "train", cache_dir=cache_dir)
    (partial,) = [p for p in cache_dir.iterdir() if p.name.startswith(PARTIAL_PREFIX)]
    assert (partial / PIXELS_FILE).stat().st_size == 4 * 16 * 16 * 3
    assert [p.name for p in cache_dir.iterdir() if p.name.startswith(".lock-")] == []

    with mock.patch.object(blender, "load_image", wraps=load_image) as decoded:
        resumed = cached_load_split(scene, "train", cache_dir=cache_dir)
    assert decoded.call_count == 2  # the last two images only
    assert not partial.exists() and entry_of(cache_dir).name == partial.name[len(PARTIAL_PREFIX):]
    expected = load_split(scene, "train")
    assert_bitwise(resumed, expected)
    assert_bitwise(cached_load_split(scene, "train", cache_dir=cache_dir), expected)  # verified hit

    # A progress record that its files do not hold (cut short) is not trusted: that image is redone.
    with monkeypatch.context() as patch:
        interrupt_after(3, patch)
        with pytest.raises(KeyboardInterrupt):
            cached_load_split(scene, "val", cache_dir=cache_dir)  # 2 images: finished, then interrupted
    (partial,) = [p for p in cache_dir.iterdir() if p.name.startswith(PARTIAL_PREFIX)]
    with open(partial / PIXELS_FILE, "r+b") as pixels:
        pixels.truncate(16 * 16 * 3 + 5)
    with mock.patch.object(blender, "load_image", wraps=load_image) as decoded:
        resumed = cached_load_split(scene, "val", cache_dir=cache_dir)
    assert decoded.call_count == 1 and not partial.exists()
    assert_bitwise(resumed, load_split(scene, "val"))


def test_the_entry_is_the_same_whatever_the_number_of_threads_preparing_it(tmp_path: Path) -> None:
    root = write_mixed_capture(tmp_path / "capture")
    manifests = []
    for workers in (1, 3):
        cache_dir = tmp_path / f"cache-{workers}"
        built = cached_load_split(root, "train", cache_dir=cache_dir, num_workers=workers)
        assert_bitwise(built, load_split(root, "train"))
        manifest = json.loads((entry_of(cache_dir) / MANIFEST_FILE).read_text())
        manifests.append({name: manifest[name] for name in ("pixels", "alphas", "cameras", "shapes")})
    assert manifests[0] == manifests[1]


def test_in_order_gives_results_in_order_holding_the_one_given_and_at_most_workers_more() -> None:
    def job(index: int) -> int:
        time.sleep(0.002 * (5 - index % 5))  # later jobs finish first
        if index == 7:
            raise ValueError("job 7")
        return index

    taken: list[int] = []

    def jobs(count: int) -> Iterator[Callable[[], int]]:
        for index in range(count):
            taken.append(index)  # in_order takes a job when it is about to start it
            yield partial(job, index)

    results = in_order(jobs(10), workers=3)
    got = []
    with pytest.raises(ValueError, match="job 7"):
        for value in results:
            # The value in hand and 3 jobs beyond it, the last taken as this one was given.
            assert len(taken) == min(len(got) + 1 + 3, 10)
            got.append(value)
    assert got == list(range(7))
    assert list(in_order((partial(job, i) for i in range(5)), workers=1)) == list(range(5))


def test_a_second_load_waits_for_the_build_in_progress_and_reads_its_entry(tmp_path: Path) -> None:
    scene = make_demo_scene(tmp_path / "scene", num_train=4, num_val=2, num_test=2, resolution=16)
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    key = cache_entry_path(scene, "train", cache_dir=cache_dir).name
    expected = load_split(scene, "train")
    settings = cache._settings(split_fingerprint(scene, "train"), "blender", "train", (1.0, 1.0, 1.0), 1)
    loaded: list[SceneSplit] = []
    with mock.patch.object(blender, "load_image", wraps=load_image) as decoded:
        with _build_lock(cache_dir, key):  # another process is building the entry
            waiter = threading.Thread(
                target=lambda: loaded.append(cached_load_split(scene, "train", cache_dir=cache_dir)))
            waiter.start()
            waiter.join(0.5)
            assert waiter.is_alive()  # it waits for the build instead of building the entry too
            write_entry(cache_dir, key, settings, expected, scene, [])  # the other build's entry
        waiter.join(30)
    assert not waiter.is_alive() and decoded.call_count == 0  # it read the entry, decoding nothing
    assert_bitwise(loaded[0], expected)
    assert mapped_file(loaded[0].images.pixels) == cache_dir / key / PIXELS_FILE
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".")]


def test_progress_is_told_of_each_image_written_and_a_continued_build_starts_at_its_finished_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scene = make_demo_scene(tmp_path / "scene", num_train=6, num_val=1, num_test=1, resolution=16)
    cache_dir = tmp_path / "cache"
    told: list[tuple[str, int, int]] = []
    with monkeypatch.context() as patch:
        interrupt_after(4, patch)
        with pytest.raises(KeyboardInterrupt):
            cached_load_split(scene, "train", cache_dir=cache_dir, progress=lambda *call: told.append(call))
    assert told == [("train", done, 6) for done in range(5)]
    told.clear()
    cached_load_split(scene, "train", cache_dir=cache_dir, progress=lambda *call: told.append(call))
    assert told == [("train", done, 6) for done in (4, 5, 6)]
    told.clear()
    cached_load_split(scene, "train", cache_dir=cache_dir, progress=lambda *call: told.append(call))
    assert told == []  # a hit builds nothing
