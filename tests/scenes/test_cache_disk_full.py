"""The image cache on a full disk (nerf_lightning.scenes.cache_entry's writing): the entry is refused
before anything is written, one warning line names it, the bytes it needs and the bytes free, and the
split loads uncached, the same as ever."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.scenes import cache
from nerf_lightning.scenes.cache import cached_load_split
from nerf_lightning.scenes.loading import load_split
from tests.helpers.small_disk import fill, small_filesystem


def test_a_full_cache_disk_warns_once_with_the_entry_and_sizes_and_loads_uncached(tmp_path: Path) -> None:
    scene = make_demo_scene(tmp_path / "scene", num_train=4, num_val=2, num_test=2, resolution=16)
    with small_filesystem(tmp_path / "disk", 1 << 20) as disk:
        cache_dir = disk / "cache"
        cache_dir.mkdir()
        filler = fill(disk)
        cache._warned_unwritable.discard(str(cache_dir))
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            split = cached_load_split(scene, "train", cache_dir=cache_dir)
        messages = [str(w.message) for w in record]
        assert len(messages) == 1, messages
        pixels = 4 * 16 * 16 * 3
        assert messages[0].startswith(f"image cache entry {cache_dir}/")
        assert ": no space left on device: writing it needs more than " in messages[0]
        assert "bytes free there" in messages[0] and messages[0].endswith("loading images without the cache")
        needed = int(messages[0].split("needs more than ")[1].split("(")[1].split(" ")[0].replace(",", ""))
        assert needed > pixels  # the pixels and the cameras
        assert sorted(p.name for p in disk.iterdir()) == ["cache", "filler"]
        assert all(p.name == "file-digests" for p in cache_dir.iterdir())  # no entry, no temporary folder
        assert torch.equal(split.images.pixels, load_split(scene, "train").images.pixels)
        filler.unlink()  # room again: the next load writes the entry
        cached_load_split(scene, "train", cache_dir=cache_dir)
        assert len([p for p in cache_dir.iterdir() if p.name != "file-digests"]) == 1
