"""Benchmark of the data pipeline as the dataset grows: first load, warm start and cache size.

For each number of training views (``--views``, e.g. ``150 300``) a Blender-layout dataset is made from
the demo scene: ``--base-views`` training views rendered at ``--base-resolution``, centre-cropped to
the aspect ratio of ``--size WxH`` (so the cameras stay exact) and upsampled to it, then repeated until
there are that many views (each repeat a hard link to the same PNG, with its own pose entry); val and
test get two views each. Then, each in a fresh process, with a fresh cache folder:

* ``first load``: ``cached_load_split`` of the training split alone (decode, composite, quantise, write
  and hash the cache entry): seconds per image (timed in the process), peak anonymous memory;
* ``cold fit``: ``nerf-lightning fit`` of ``configs/demo.yaml`` for ``--steps`` steps (no validation),
  with an empty cache (so it builds the train and val entries first): peak anonymous memory, seconds;
* ``warm fit``: the same fit again on the cache the cold fit filled: peak anonymous memory, seconds;
* the size of the cache on disk after them.

Anonymous memory is ``RssAnon`` of ``/proc/PID/status`` (summed over the process and its children),
sampled every ``--sample-s`` seconds: the heap and anonymous maps, not the page cache of the files a
process maps or writes, which the kernel may drop and reread. The table is printed and written to
``OUT/data_scale.md`` (the figures to ``OUT/data_scale.json``); it is not added to
``benchmarks/RESULTS.md``. A quick run::

    OMP_NUM_THREADS=1 python -m benchmarks.data_scale --views 20 60 --size 400x400 --steps 10

What a first load costs per pixel, and whether its peak memory stays flat as the views grow, is the
point: the cache builds its entries one image at a time (``nerf_lightning/scenes/cache_build.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

try:
    from benchmarks.common import REPO, bench_trainer, load_config, machine
    from benchmarks.results import add_option, record_to
except ModuleNotFoundError:  # run as a script, python benchmarks/data_scale.py
    from common import REPO, bench_trainer, load_config, machine  # type: ignore[no-redef]
    from results import add_option, record_to  # type: ignore[no-redef]

CONFIG = REPO / "configs" / "demo.yaml"
MB = 2**20


# ------------------------------------------------------------------------------------------ the datasets


def parse_size(text: str) -> tuple[int, int]:
    """``"WxH"`` (or ``"N"`` for ``NxN``) -> ``(width, height)``."""
    width, _, height = text.lower().partition("x")
    size = (int(width), int(height or width))
    if min(size) < 1:
        raise argparse.ArgumentTypeError(f"expected WxH with positive sides, got {text!r}")
    return size


def make_pool(folder: Path, base_views: int, base_resolution: int, size: tuple[int, int]) -> dict[str, Any]:
    """The demo scene's views upsampled to ``size`` (one PNG each) and their poses, in ``folder``."""
    from PIL import Image

    from nerf_lightning.datasets.demo_scene import make_demo_scene

    base = make_demo_scene(folder / "base", num_train=base_views, num_val=2, num_test=2,
                           resolution=base_resolution)
    width, height = size
    crop = round(base_resolution * height / width)  # rows kept: the aspect ratio of the target size
    if not 0 < crop <= base_resolution:
        raise SystemExit(f"--size {width}x{height}: expected a width at least the height (the demo's "
                         "views are square and are cropped in height)")
    top = (base_resolution - crop) // 2
    pool: dict[str, Any] = {}
    for split in ("train", "val", "test"):
        meta = json.loads((base / f"transforms_{split}.json").read_text())
        (folder / "pool" / split).mkdir(parents=True)
        frames = []
        for i, frame in enumerate(meta["frames"]):
            with Image.open(base / f"{frame['file_path']}.png") as image:
                image = image.crop((0, top, base_resolution, top + crop)).resize((width, height),
                                                                                  Image.Resampling.BICUBIC)
                image.save(folder / "pool" / split / f"r_{i}.png")
            frames.append({"file": folder / "pool" / split / f"r_{i}.png", "pose": frame["transform_matrix"]})
        pool[split] = frames
        pool["camera_angle_x"] = meta["camera_angle_x"]
    return pool


def make_dataset(root: Path, pool: dict[str, Any], views: int) -> Path:
    """A Blender scene of ``views`` training views, repeating the pool's (hard links, one pose entry each)."""
    for split in ("train", "val", "test"):
        count = views if split == "train" else len(pool[split])
        (root / split).mkdir(parents=True)
        frames = []
        for i in range(count):
            source = pool[split][i % len(pool[split])]
            target = root / split / f"r_{i}.png"
            try:
                os.link(source["file"], target)
            except OSError:
                shutil.copyfile(source["file"], target)
            frames.append({"file_path": f"./{split}/r_{i}", "transform_matrix": source["pose"]})
        meta = {"camera_angle_x": pool["camera_angle_x"], "frames": frames}
        (root / f"transforms_{split}.json").write_text(json.dumps(meta))
    return root


# ---------------------------------------------------------------------------------- measuring a process


def rss_anon(pid: int) -> int:
    """``RssAnon`` bytes of ``pid`` and its descendants (0 for a process that is gone)."""
    total = 0
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("RssAnon:"):
                    total += int(line.split()[1]) * 1024
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += rss_anon(int(child))
    except (OSError, ValueError):
        pass
    return total


def run_sampled(command: list[str], log: Path, sample_s: float, cwd: Path) -> dict[str, float]:
    """Run ``command`` (output to ``log``), sampling its anonymous memory; its seconds and peak bytes.

    Raises:
        SystemExit: the command failed (naming its log).
    """
    peak = [0]
    start = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss_anon(process.pid))
                stop.wait(sample_s)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = process.wait()
        stop.set()
        sampler.join()
    if code != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed with exit code {code}; see {log}")
    return {"seconds": time.perf_counter() - start, "peak_anon": peak[0]}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def fit_config(out: Path, steps: int) -> Path:
    """``configs/demo.yaml`` for ``steps`` training steps, no validation, no callbacks, as JSON."""
    config = load_config(CONFIG)
    bench_trainer(config, [])
    config["trainer"]["max_steps"] = steps
    config["data"]["make_demo"] = False
    path = out / "fit_config.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def measure(root: Path, views: int, work: Path, out: Path, config: Path, sample_s: float) -> dict[str, Any]:
    """The first load, cold fit and warm fit of the dataset in ``root`` (module docstring)."""
    python = sys.executable
    load_cache, fit_cache = work / f"cache-load-{views}", work / f"cache-fit-{views}"
    load_json = out / f"load-{views}.json"
    load = run_sampled([python, "-m", "benchmarks.data_scale", "--load-only", str(root), "--cache-dir",
                        str(load_cache), "--load-json", str(load_json)], out / f"load-{views}.log", sample_s,
                       REPO)
    loaded = json.loads(load_json.read_text())
    shutil.rmtree(load_cache, ignore_errors=True)
    fits = {}
    for kind in ("cold", "warm"):
        command = [python, "-m", "nerf_lightning", "fit", "--config", str(config), "--data.root", str(root),
                   "--data.cache_dir", str(fit_cache), "--trainer.default_root_dir", str(work / "runs"),
                   "--run_name", f"{views}-{kind}"]
        fits[kind] = run_sampled(command, out / f"fit-{views}-{kind}.log", sample_s, REPO)
    cache_bytes = folder_bytes(fit_cache) - folder_bytes(fit_cache / "file-digests")
    shutil.rmtree(fit_cache, ignore_errors=True)
    shutil.rmtree(work / "runs", ignore_errors=True)
    return {
        "views": views, "pixels": loaded["pixels"], "load_s": loaded["seconds"],
        "load_s_per_image": loaded["seconds"] / views, "load_peak_anon": load["peak_anon"],
        "load_anon_before": loaded["anon_before"], "cold_fit_s": fits["cold"]["seconds"],
        "cold_fit_peak_anon": fits["cold"]["peak_anon"], "warm_fit_s": fits["warm"]["seconds"],
        "warm_fit_peak_anon": fits["warm"]["peak_anon"], "cache_bytes": cache_bytes,
    }


def table(rows: list[dict[str, Any]], size: tuple[int, int], steps: int) -> str:
    lines = [
        f"Training views of {size[0]}x{size[1]} pixels; `fit` of configs/demo.yaml for {steps} steps; "
        "anonymous memory (RssAnon) peaks, MB.", "",
        "| training views | pixels | first load: s / image | first load: peak anon (before loading) "
        "| cold fit: peak anon | cold fit: s | warm fit: peak anon | warm fit: s | cache on disk |",
        "|" + "---|" * 9,
    ]
    for r in rows:
        lines.append(
            f"| {r['views']} | {r['pixels'] / 1e6:.1f} M | {r['load_s_per_image']:.3f} "
            f"| {r['load_peak_anon'] / MB:,.0f} ({r['load_anon_before'] / MB:,.0f}) "
            f"| {r['cold_fit_peak_anon'] / MB:,.0f} | {r['cold_fit_s']:.0f} "
            f"| {r['warm_fit_peak_anon'] / MB:,.0f} | {r['warm_fit_s']:.0f} "
            f"| {r['cache_bytes'] / MB:,.0f} MB |")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ the load process


def load_only(root: Path, cache_dir: Path, report: Path) -> None:
    """``cached_load_split(root, "train")`` into an empty ``cache_dir``, timed; the figures to ``report``."""
    import torch  # noqa: F401  (imported before the baseline is read, as the load needs it)

    from nerf_lightning.scenes.cache import cached_load_split

    before = rss_anon(os.getpid())
    start = time.perf_counter()
    split = cached_load_split(root, "train", cache_dir=cache_dir)
    seconds = time.perf_counter() - start
    pixels = int(split.images.offsets[-1])  # PackedImages, cached or not
    report.write_text(json.dumps({"seconds": seconds, "pixels": pixels, "anon_before": before,
                                  "anon_after": rss_anon(os.getpid())}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--views", type=int, nargs="+", default=[150, 300],
                        help="training views of each dataset (default: 150 300)")
    parser.add_argument("--size", type=parse_size, default=(800, 800),
                        help="WxH of every view (default 800x800)")
    parser.add_argument("--base-views", type=int, default=50,
                        help="distinct demo views rendered (default 50)")
    parser.add_argument("--base-resolution", type=int, default=200,
                        help="side of the rendered demo views before upsampling (default 200)")
    parser.add_argument("--steps", type=int, default=60, help="training steps of each fit (default 60)")
    parser.add_argument("--sample-s", type=float, default=0.5, help="memory sampling period (default 0.5 s)")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for the datasets and caches (default: a temporary folder, removed)")
    parser.add_argument("--out", type=Path, default=Path("bench_out") / "data_scale")
    add_option(parser)
    parser.add_argument("--load-only", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--load-json", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_only is not None:
        load_only(args.load_only, args.cache_dir, args.load_json)
        return

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work_parent = args.work.resolve() if args.work is not None else None
    if work_parent is not None:
        work_parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nerf-lightning-data-scale-", dir=work_parent) as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        pool = make_pool(work, args.base_views, args.base_resolution, args.size)
        print(f"views: {args.base_views} demo views at {args.base_resolution} px upsampled to "
              f"{args.size[0]}x{args.size[1]} in {time.perf_counter() - start:.0f} s", flush=True)
        config = fit_config(out, args.steps)
        rows = []
        for views in args.views:
            root = make_dataset(work / f"scene-{views}", pool, views)
            rows.append(measure(root, views, work, out, config, args.sample_s))
            print(json.dumps(rows[-1]), flush=True)
            shutil.rmtree(root, ignore_errors=True)
    report = table(rows, args.size, args.steps)
    print(report)
    (out / "data_scale.md").write_text(report + "\n")
    (out / "data_scale.json").write_text(json.dumps({"rows": rows, "machine": machine(),
                                                     "size": list(args.size), "steps": args.steps}, indent=1))
    record_to(args.results, "data-scale", report)


if __name__ == "__main__":
    main()
