"""Benchmark of the image cache: first load (decode + build the entry) against a cache hit.

Writes a Blender-layout scene of ``--images`` RGBA PNGs of ``--size`` x ``--size`` pixels (smooth
shapes, a little noise, transparent background, so they compress like rendered images) into a
temporary folder, then times for the train split:

* ``uncached``: ``load_split`` (decode, composite, quantise), for reference;
* ``cold``: ``cached_load_split`` with an empty cache (decode + write and hash the entry);
* ``warm``: ``cached_load_split`` again (fingerprint the inputs, verify the entry's sha256, memory-map
  the pixels): the images are ready as ``PackedImages`` whose uint8 ``pixels`` the datamodule uses;
* ``warm + copy``: the same, plus copying all pixels into process memory (what moving them to a
  device costs at least).

All files are in the page cache when timed (they were just written), so ``cold`` is the best case of a
first run, and the ratio cold / warm errs low. The figures are also added, dated, as a table to
``benchmarks/RESULTS.md`` (``--results PATH``; ``--results ''``: not). Run::

    OMP_NUM_THREADS=1 python -m benchmarks.image_cache
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
from PIL import Image

from nerf_lightning.scenes.cache import cached_load_split
from nerf_lightning.scenes.fingerprint import split_fingerprint
from nerf_lightning.scenes.loading import load_split

try:
    from benchmarks.results import add_option, record_to
except ModuleNotFoundError:  # run as a script, python benchmarks/image_cache.py
    from results import add_option, record_to  # type: ignore[no-redef]

T = TypeVar("T")


def look_at(position: np.ndarray) -> list[list[float]]:
    """OpenGL camera-to-world at ``position`` looking at the origin, world ``+z`` up."""
    back = position / np.linalg.norm(position)
    right = np.cross([0.0, 0.0, 1.0], back)
    right /= np.linalg.norm(right)
    up = np.cross(back, right)
    matrix = np.eye(4)
    matrix[:3, :3] = np.stack([right, up, back], axis=1)
    matrix[:3, 3] = position
    return matrix.tolist()


def write_scene(root: Path, count: int, size: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    (root / "train").mkdir(parents=True)
    yy, xx = np.mgrid[:size, :size].astype(np.float32) / size
    frames = []
    for i in range(count):
        cx, cy, radius = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7), rng.uniform(0.15, 0.3)
        inside = (xx - cx) ** 2 + (yy - cy) ** 2 < radius**2
        box = (np.abs(xx - 0.25) < 0.1 + 0.05 * (i % 3)) & (np.abs(yy - 0.75) < 0.12)
        image = np.zeros((size, size, 4), np.uint8)
        shade = np.stack([xx, yy, 0.5 + 0.5 * np.sin(20 * (xx + yy) + i)], axis=-1) * 200
        noise = rng.integers(0, 8, (size, size, 3))
        image[..., :3] = np.clip(shade + noise, 0, 255).astype(np.uint8) * (inside | box)[..., None]
        image[..., 3] = np.where(inside | box, 255, 0)
        Image.fromarray(image, "RGBA").save(root / "train" / f"r_{i}.png")
        angle = 2 * math.pi * i / count
        position = np.array([4 * math.cos(angle), 4 * math.sin(angle), 1.5])
        frames.append({"file_path": f"./train/r_{i}", "transform_matrix": look_at(position)})
    meta = {"camera_angle_x": 0.6911112070083618, "frames": frames}
    (root / "transforms_train.json").write_text(json.dumps(meta, indent=1))


def timed(function: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=100)
    parser.add_argument("--size", type=int, default=800)
    parser.add_argument("--repeats", type=int, default=3, help="warm runs (the median is reported)")
    add_option(parser)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="nerf-lightning-cache-bench-") as tmp:
        root, cache_dir = Path(tmp) / "scene", Path(tmp) / "cache"
        seconds, _ = timed(lambda: write_scene(root, args.images, args.size))
        data_mb = sum(p.stat().st_size for p in root.rglob("*.png")) / 1e6
        size = f"{args.size}x{args.size}"
        print(f"scene: {args.images} RGBA PNGs {size}, {data_mb:.0f} MB, written in {seconds:.1f} s")

        uncached_s, uncached = timed(lambda: load_split(root, "train"))
        cold_s, cold = timed(lambda: cached_load_split(root, "train", cache_dir=cache_dir))
        entry_mb = sum(p.stat().st_size for p in cache_dir.rglob("*") if p.is_file()) / 1e6
        fingerprint_s = min(timed(lambda: split_fingerprint(root, "train"))[0] for _ in range(args.repeats))

        warm_runs, copy_runs = [], []
        for _ in range(args.repeats):
            seconds, warm = timed(lambda: cached_load_split(root, "train", cache_dir=cache_dir))
            warm_runs.append(seconds)
            copy_s, _ = timed(lambda warm=warm: warm.images.pixels.clone())
            copy_runs.append(seconds + copy_s)
        expected = uncached.images.pixels
        assert warm.images.pixels.equal(expected) and cold.images.pixels.equal(expected)
        warm_s, copy_s = statistics.median(warm_runs), statistics.median(copy_runs)

        print(f"uncached load_split          : {uncached_s:7.3f} s")
        print(f"cold (decode + build entry)  : {cold_s:7.3f} s   (entry {entry_mb:.0f} MB)")
        print(f"warm (hit, memory-mapped)    : {warm_s:7.3f} s   (fingerprint alone {fingerprint_s:.3f} s)")
        print(f"warm + copy pixels to memory : {copy_s:7.3f} s")
        print(f"ratio cold / warm            : {cold_s / warm_s:7.1f}x   (target >= 5)")
        print(f"ratio uncached / warm + copy : {uncached_s / copy_s:7.1f}x")
        record_to(args.results, "image-cache", "\n".join([
            f"{args.images} RGBA PNGs of {size} pixels ({data_mb:.0f} MB), train split; seconds, warm runs: "
            f"median of {args.repeats}.", "",
            "| uncached | cold (decode + build entry) | entry MB | warm (hit) | fingerprint alone "
            "| warm + copy | cold / warm | uncached / (warm + copy) |", "|" + "---|" * 8,
            f"| {uncached_s:.3f} | {cold_s:.3f} | {entry_mb:.0f} | {warm_s:.3f} | {fingerprint_s:.3f} "
            f"| {copy_s:.3f} | {cold_s / warm_s:.1f}x | {uncached_s / copy_s:.1f}x |"]), device="cpu")


if __name__ == "__main__":
    main()
