"""The image cache on a full disk (nerf_lightning.scenes.cache_build): the entry is refused
before anything is written, or deleted when the disk fills while it is written; either way one warning
line names it, the bytes it needs and the bytes free, and the split loads uncached, the same as ever."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.scenes import cache
from nerf_lightning.scenes.cache import cached_load_split
from nerf_lightning.scenes.loading import load_split
from tests.helpers.datasets import names_of, write_nerfstudio
from tests.helpers.small_disk import PAGE, fill, small_filesystem


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


def test_a_disk_filling_while_the_entry_is_written_leaves_nothing_and_loads_uncached(tmp_path: Path) -> None:
    # The entry's size is estimated from its first image (4x4); the later ones (64x64) overflow the disk
    # part way through the build, after the check before it passed.
    sizes = {i: {"w": 4, "h": 4} if i == 1 else {} for i in range(8)}
    root = tmp_path / "capture"
    write_nerfstudio(root, names_of(8), size=(64, 64), frame_extra=sizes)
    with small_filesystem(tmp_path / "disk", 1 << 20) as disk:
        cache_dir = disk / "cache"
        cache_dir.mkdir()
        fill(disk, leave=8 * PAGE)  # more than the estimate (6 x 48 bytes), less than the 6 images' pixels
        cache._warned_unwritable.discard(str(cache_dir))
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            split = cached_load_split(root, "train", cache_dir=cache_dir)
        messages = [str(w.message) for w in record]
        assert len(messages) == 1, messages
        assert messages[0].startswith(f"image cache entry {cache_dir}/")
        assert ": no space left on device: writing it needs more than " in messages[0]
        assert messages[0].endswith("loading images without the cache")
        assert all(p.name == "file-digests" for p in cache_dir.iterdir())  # no entry, no temporary folder
        expected = load_split(root, "train")
        assert torch.equal(split.images.pixels, expected.images.pixels)
        assert split.images.shapes == expected.images.shapes and split.images.shapes[0] == (4, 4)


def test_data_cache_checks_the_room_first_in_one_line_naming_what_is_needed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from nerf_lightning.cli import main

    scene = make_demo_scene(tmp_path / "scene", num_train=4, num_val=2, num_test=2, resolution=16)
    with small_filesystem(tmp_path / "disk", 1 << 20) as disk:
        cache_dir = disk / "cache"
        cache_dir.mkdir()
        fill(disk)
        capsys.readouterr()
        code = main(["data", "cache", str(scene), "--cache-dir", str(cache_dir)])
        captured = capsys.readouterr()
        assert all(p.name == "file-digests" for p in cache_dir.iterdir())  # nothing built
    assert code == 4 and captured.out == ""
    (line,) = captured.err.strip().splitlines()
    needed = (4 + 2 + 2) * 16 * 16 * 4  # RGB and alpha of every image of the three splits
    assert line.startswith(f"nerf-lightning: {cache_dir}: no space left on device: ")
    assert "writing it needs more than " in line
    assert f"({needed:,} bytes)" in line and "free there" in line
