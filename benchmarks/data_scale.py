"""Benchmark of the data pipeline as the dataset grows: first load, warm start, reading and training speed,
with the image cache in memory and with the cache larger than the memory the process may use.

For each number of training views (``--views``, e.g. ``150 300``) a Blender-layout dataset is made from
the demo scene: ``--base-views`` training views rendered at ``--base-resolution``, centre-cropped to
the aspect ratio of ``--size WxH`` (so the cameras stay exact) and upsampled to it, then repeated until
there are that many views (each repeat a hard link to the same PNG, with its own pose entry); val and
test get two views each. Then, each in a fresh process, with a fresh cache folder:

* ``first load``: ``cached_load_split`` of the training split alone (decode, composite, quantise, write
  and hash the cache entry): seconds per image (timed in the process), peak anonymous memory;
* ``cold fit``: ``nerf-lightning fit`` of ``configs/demo.yaml`` for ``--steps`` steps (no validation,
  the ``Telemetry`` callback writing ``telemetry.jsonl``), with an empty cache (so it builds the train
  and val entries first): peak anonymous memory, seconds (``--skip cold-fit`` fills the cache in the
  benchmark's own process instead, with the data module the fit sets up: a quick check of the other
  parts, with no cold fit figures);
* ``warm fit``: the same fit again on the cache the cold fit filled: peak anonymous memory, seconds;
  its ``warm start`` (its seconds less the seconds of its training steps: start-up, the cache hit,
  the final checkpoint), its training steps/s (the steps of ``telemetry.jsonl`` after the first
  :data:`WARMUP_STEPS` over their seconds) and mean ``data_wait`` (ms) over the same steps;
* ``loader``: the reader alone, a ``NerfDataModule`` of the fit's data settings on the warm cache
  (``setup("fit")``), ``train_batch(position, cpu)`` for ``--loader-positions`` positions of
  ``--loader-rays`` rays with ``prefetch=False`` (the reader's own speed: rays/s), then as many
  with ``prefetch=True`` (in the JSON only: with no step to overlap it measures the hand-over, not a gain);
  each way stops early after ``--loader-max-s`` seconds (a reader thrashing under a limit);
* the size of the cache on disk (its entries, not the digest memo).

These run with the cache in RAM: the page cache holds it after the cold fit wrote it. Then, with ``limited``
(``--skip limited`` leaves it out), the warm fit and the loader run again, each in a memory cgroup of its own
(:mod:`benchmarks.memory_limit`; v2 ``memory.max`` where that controller is enabled, else v1
``memory.limit_in_bytes``), after the cache's files are dropped from the page cache. The limit holds
everything the process charges: its anonymous memory and the page cache it reads in, the cache's memory map
included. What should be short of memory is the page cache left to the map, not the process's own heap (model,
optimizer, torch), which cannot be reread from disk and would only get the process killed. So the twins with
everything in RAM (the warm fit, the RAM loader) run in a cgroup without a limit, whose charge is all they
need besides the cache (the cache's pages were charged to the cold fit that brought them in, not to them:
anonymous and kernel memory, the run's own files). A process needs more while it starts (imports, building the
model) than while it trains, so a limit from the peak alone would leave the map the difference as well: each
limited process is limited to its twin's peak charge + ``--memory-margin-mb`` (0) +
``--memory-limit-fraction`` (0.5) of the cache until it reads batches (the fit's ``telemetry.jsonl`` exists,
the loader has touched its ``.started`` file), then to its twin's most charged while reading batches + the
same margin + the same share, so the map has room for about that share of the cache, and its other pages are
read from disk again whenever a batch touches them (the first steps may still run under the higher limit: they
are not counted). The margin is 0 by default: the twin's charge is the kernel's own peak, which holds its
reclaimable pages too (the files it writes), so what cannot be reclaimed fits; a margin only gives the map
more room, which for a small cache is all of it. ``--memory-limit-mb`` sets one fixed limit for both instead.
The rows give the limited runs' rays/s, steps/s, data wait and the ratio of limited to RAM steps/s; the notes
under the table give each limit, the peak the group charged and how often it hit the limit (the proof that the
limit bit), and whether the limited fit ended with the same weights as the RAM fit (its rays are the same, so
it should: the same test PSNR). Where no memory cgroup can be made (not root, no memory controller, a
read-only hierarchy) the limited runs are skipped with one line saying why; the rest still runs.

Anonymous memory is ``RssAnon`` of ``/proc/PID/status`` (summed over the process and its children),
sampled every ``--sample-s`` seconds: the heap and anonymous maps, not the page cache of the files a
process maps or writes, which the kernel may drop and reread. The table is printed and written to
``OUT/data_scale.md`` (the figures to ``OUT/data_scale.json``) and, with ``--results``, added to
``benchmarks/RESULTS.md``. A quick run::

    OMP_NUM_THREADS=1 python -m benchmarks.data_scale --views 20 60 --size 400x400 --steps 10

What a first load costs per pixel, and whether its peak memory stays flat as the views grow, is one
point: the cache builds its entries one image at a time (``nerf_lightning/scenes/cache_build.py``).
The other is whether training keeps its speed when the cache does not fit in memory (the reads are
random pixels of every image, so every step may touch pages that are on disk only); ``--data KEY=VALUE``
sets a data option of the fits and the loader alike (e.g. ``images_per_window=8``) to compare readers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

try:
    from benchmarks.common import REPO, bench_trainer, load_config, machine, read_jsonl
    from benchmarks.memory_limit import cgroup_unavailable, drop_page_cache, memory_cgroup
    from benchmarks.results import add_option, record_to
except ModuleNotFoundError:  # run as a script, python benchmarks/data_scale.py
    from common import REPO, bench_trainer, load_config, machine, read_jsonl  # type: ignore[no-redef]
    from memory_limit import cgroup_unavailable, drop_page_cache, memory_cgroup  # type: ignore[no-redef]
    from results import add_option, record_to  # type: ignore[no-redef]

CONFIG = REPO / "configs" / "demo.yaml"
MB = 2**20
PARTS = ("first-load", "cold-fit", "loader", "limited")
"""The parts ``--skip`` may leave out (the warm fit always runs; without the cold fit the cache is filled by
:func:`fill_cache` in this process: it must be there for the warm fit to start warm)."""
WARMUP_STEPS = 3
"""Training steps left out of steps/s and data wait: the first steps build the sampler's state and
fault in the code and the cache's first pages (with fewer steps, only the last counts)."""
TELEMETRY = {"class_path": "nerf_lightning.callbacks.Telemetry",
             "init_args": {"write_jsonl": True, "histogram_every_n_steps": 0}}


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


def run_sampled(command: list[str], log: Path, sample_s: float, cwd: Path,
                preexec_fn: Callable[[], None] | None = None, check: bool = True,
                tick: Callable[[], None] | None = None) -> dict[str, Any]:
    """Run ``command`` (output to ``log``), sampling its anonymous memory; its seconds, peak bytes and exit
    code. ``preexec_fn`` runs in the child before the command (joining a cgroup); ``tick`` is called at
    every sample (watching a cgroup). The child is killed should this process be interrupted, so nothing
    outlives it.

    Raises:
        SystemExit: the command failed and ``check`` is set (naming its log).
    """
    peak = [0]
    start = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                   preexec_fn=preexec_fn)
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss_anon(process.pid))
                if tick is not None:
                    tick()
                stop.wait(sample_s)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            code = process.wait()
        except BaseException:
            process.kill()
            process.wait()
            raise
        finally:
            stop.set()
            sampler.join()
    if code != 0 and check:
        raise SystemExit(f"{' '.join(command[:4])} ... failed with exit code {code}; see {log}")
    return {"seconds": time.perf_counter() - start, "peak_anon": peak[0], "code": code}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def fit_config(out: Path, steps: int, data: dict[str, Any] | None = None) -> Path:
    """``configs/demo.yaml`` for ``steps`` training steps, no validation, ``Telemetry`` writing
    ``telemetry.jsonl`` as its one callback, ``data`` merged into its data options; as JSON."""
    config = load_config(CONFIG)
    bench_trainer(config, [TELEMETRY])
    config["trainer"]["max_steps"] = steps
    config["data"]["make_demo"] = False
    config["data"].update(data or {})
    path = out / "fit_config.json"
    path.write_text(json.dumps(config, indent=1))
    return path


def step_stats(run_dir: Path) -> dict[str, float | None]:
    """From the ``telemetry.jsonl`` under ``run_dir``: the steps, their seconds in all, steps/s (the steps
    after :data:`WARMUP_STEPS` over their seconds: a throughput, so the slow steps of a reader, such as
    the first reads of each new window of images from disk, count as much as they cost) and the mean
    ``data_wait`` in ms over the same steps."""
    files = sorted(run_dir.rglob("telemetry.jsonl"))
    records = read_jsonl(files[0]) if files else []
    if not records:
        return {"steps": 0, "train_s": None, "steps_per_s": None, "data_wait_ms": None}
    counted = records[WARMUP_STEPS:] or records[-1:]
    waits = [r["data_wait"] for r in counted if "data_wait" in r]
    seconds = math.fsum(r["step"] for r in counted)
    return {"steps": len(records), "train_s": sum(r["step"] for r in records),
            "steps_per_s": len(counted) / seconds if seconds > 0 else None,
            "data_wait_ms": 1000.0 * statistics.fmean(waits) if waits else None}


def weights_difference(first: Path, second: Path) -> float | None:
    """The largest absolute difference between the floating-point tensors of the ``last.ckpt`` under the
    two run folders (``None`` where one is missing or their tensors differ in name or shape)."""
    import torch

    found = [sorted(folder.rglob("last.ckpt")) for folder in (first, second)]
    if not all(found):
        return None
    a, b = (torch.load(files[0], map_location="cpu", weights_only=False)["state_dict"] for files in found)
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        return None
    return max((float((a[k].double() - b[k].double()).abs().max()) for k in a
                if a[k].is_floating_point() and a[k].numel()), default=0.0)


def cache_files(cache: Path) -> list[Path]:
    """The files of the cache's entries (the digest memo aside): what the limited runs read."""
    return [p for p in cache.rglob("*") if p.is_file() and "file-digests" not in p.relative_to(cache).parts]


def limit_for(twin: dict[str, Any], cache_bytes: int, args: argparse.Namespace, steady: bool = False) -> int:
    """A memory limit of a limited run whose twin with everything in RAM is ``twin`` (module docstring):
    ``--memory-limit-mb`` if given, else what the twin's group charged (at its peak; with ``steady``, at
    its most once it was reading batches; its sampled anonymous peak where it had no group) + the margin +
    the fraction of the cache."""
    if args.memory_limit_mb is not None:
        return int(args.memory_limit_mb * MB)
    charged = (twin.get("group_steady_bytes") if steady else None) or twin.get("group_peak_bytes")
    return int((charged or twin["peak_anon"]) + args.memory_margin_mb * MB
               + args.memory_limit_fraction * cache_bytes)


def run_twin(command: list[str], log: Path, name: str, started: Callable[[], bool], sample_s: float,
             in_group: bool) -> dict[str, Any]:
    """A run with everything in RAM; with ``in_group``, in a memory cgroup without a limit, whose charge
    (anonymous and kernel memory, the files it writes; not the cache, whose pages the cold fit brought
    in) at its peak and at its most once ``started`` (reading batches) set the limits of its limited
    twin."""
    if not in_group:
        return run_sampled(command, log, sample_s, REPO)
    steady: list[int] = []  # the group's usage once started (what is left where its peak cannot be reset)
    start_peak: list[int | None] = []  # the peak until started, where the peak could be reset then
    with memory_cgroup(None, name) as group:
        def tick() -> None:
            usage = group.usage()
            if usage is None or not started():
                return
            if not steady:  # from here on the kernel's peak, transient allocations included
                before = group.report()["peak_bytes"]
                if group.reset_peak():
                    start_peak.append(before)
            steady.append(usage)

        ran = run_sampled(command, log, sample_s, REPO, preexec_fn=group.join, tick=tick)
        peak = group.report()["peak_bytes"]
        ran.update(group_peak_bytes=peak, group_steady_bytes=max(steady, default=None))
        if start_peak and peak is not None:
            ran.update(group_steady_bytes=peak, group_peak_bytes=max(peak, start_peak[0] or 0))
    return ran


def run_limited(command: list[str], log: Path, twin: dict[str, Any], cache: Path, name: str,
                started: Callable[[], bool], args: argparse.Namespace) -> dict[str, Any]:
    """``command`` in a memory cgroup, the cache's files dropped from the page cache first: limited to
    the twin's peak charge + margin + the cache's share while it starts, then, once ``started``, to its
    steady charge + margin + the cache's share (module docstring). Its seconds, anonymous peak, exit
    code, the limits, and the group's peak and limit hits."""
    cache_bytes = sum(p.stat().st_size for p in cache_files(cache))
    start_limit = limit_for(twin, cache_bytes, args)
    steady_limit = limit_for(twin, cache_bytes, args, steady=True)
    drop_page_cache(cache_files(cache))
    lowered: list[bool] = []
    file_bytes = [0]  # the most page cache the group held at a sample: the room the map actually had
    with memory_cgroup(start_limit, name) as group:
        def tick() -> None:
            file_bytes[0] = max(file_bytes[0], group.file_bytes() or 0)
            if steady_limit < start_limit and not lowered and started() and group.set_limit(steady_limit):
                lowered.append(True)

        ran = run_sampled(command, log, args.sample_s, REPO, preexec_fn=group.join, check=False, tick=tick)
        ran.update(start_limit=start_limit, limit=group.limit_bytes, lowered=bool(lowered),
                   group_file_bytes=file_bytes[0],
                   **{f"group_{k}": v for k, v in group.report().items()})
    return ran


def fill_cache(root: Path, cache_dir: Path, config: Path) -> None:
    """What a fit of ``config`` puts in the empty ``cache_dir``, built in this process instead (``--skip
    cold-fit``): a data module of its data options set up for fitting (the train and val entries) and the
    dataset's fingerprint (the digest memo, where the files are old enough to be remembered)."""
    from nerf_lightning.data.datamodule import NerfDataModule

    options = {**json.loads(config.read_text())["data"], "root": str(root), "cache_dir": str(cache_dir)}
    module = NerfDataModule(**options)
    module.setup("fit")
    module.fingerprint()
    module.teardown("fit")


def failure(ran: dict[str, Any], log: Path) -> str | None:
    """Why a limited run failed (``None``: it did not)."""
    if ran["code"] == 0:
        return None
    killed = " (killed: out of memory under the limit?)" if ran["code"] in (-9, 137) else ""
    return f"exit code {ran['code']}{killed}; see {log}"


def measure(root: Path, views: int, work: Path, out: Path, config: Path,
            args: argparse.Namespace) -> dict[str, Any]:
    """The first load, cold fit, warm fit, loader and limited runs of the dataset in ``root`` (module
    docstring); ``args`` are the command line's (parts, loader and limit settings)."""
    python, sample_s, skip = sys.executable, args.sample_s, set(args.skip)
    load_cache, fit_cache = work / f"cache-load-{views}", work / f"cache-fit-{views}"
    row: dict[str, Any] = {"views": views}
    if "first-load" not in skip:
        load_json = out / f"load-{views}.json"
        load = run_sampled([python, "-m", "benchmarks.data_scale", "--load-only", str(root), "--cache-dir",
                            str(load_cache), "--load-json", str(load_json)], out / f"load-{views}.log",
                           sample_s, REPO)
        loaded = json.loads(load_json.read_text())
        shutil.rmtree(load_cache, ignore_errors=True)
        row.update(pixels=loaded["pixels"], load_s=loaded["seconds"],
                   load_s_per_image=loaded["seconds"] / views, load_peak_anon=load["peak_anon"],
                   load_anon_before=loaded["anon_before"])

    def fit(kind: str) -> list[str]:
        return [python, "-m", "nerf_lightning", "fit", "--config", str(config), "--data.root", str(root),
                "--data.cache_dir", str(fit_cache), "--trainer.default_root_dir", str(work / "runs"),
                "--run_name", f"{views}-{kind}"]

    def loader(kind: str) -> list[str]:
        (out / f"loader-{views}-{kind}.started").unlink(missing_ok=True)
        return [python, "-m", "benchmarks.data_scale", "--loader-only", str(root), "--cache-dir",
                str(fit_cache), "--fit-config", str(config), "--loader-json",
                str(out / f"loader-{views}-{kind}.json"),
                "--loader-positions", str(args.loader_positions), "--loader-rays", str(args.loader_rays),
                "--loader-max-s", str(args.loader_max_s)]

    reason = cgroup_unavailable() if "limited" not in skip else "left out (--skip limited)"

    def fit_started(kind: str) -> Callable[[], bool]:  # Telemetry opens its file when training starts
        return lambda: any((work / "runs" / f"{views}-{kind}").rglob("telemetry.jsonl"))

    def loader_started(kind: str) -> Callable[[], bool]:
        return (out / f"loader-{views}-{kind}.started").exists

    if "cold-fit" in skip:
        fill_cache(root, fit_cache, config)
    else:
        cold = run_sampled(fit("cold"), out / f"fit-{views}-cold.log", sample_s, REPO)
        row.update(cold_fit_s=cold["seconds"], cold_fit_peak_anon=cold["peak_anon"])
    warm_fit = run_twin(fit("warm"), out / f"fit-{views}-warm.log", f"nerf-data-scale-{views}-warm",
                        fit_started("warm"), sample_s, reason is None)
    warm = step_stats(work / "runs" / f"{views}-warm")
    cache_bytes = folder_bytes(fit_cache) - folder_bytes(fit_cache / "file-digests")
    row.update(warm_fit_s=warm_fit["seconds"], warm_fit_peak_anon=warm_fit["peak_anon"],
               warm_start_s=warm_fit["seconds"] - (warm["train_s"] or 0.0), cache_bytes=cache_bytes,
               steps_per_s=warm["steps_per_s"], data_wait_ms=warm["data_wait_ms"])
    if "loader" not in skip:
        loader_ram = run_twin(loader("ram"), out / f"loader-{views}-ram.log", f"nerf-data-scale-{views}-ram",
                              loader_started("ram"), sample_s, reason is None)
        figures = json.loads((out / f"loader-{views}-ram.json").read_text())
        row.update(loader_peak_anon=loader_ram["peak_anon"], loader_rays_per_s=figures["rays_per_s"],
                   loader_rays_per_s_prefetch=figures["rays_per_s_prefetch"])
        row.setdefault("pixels", figures["pixels"])
    if reason is None:
        limited: dict[str, Any] = {}
        log = out / f"fit-{views}-limited.log"
        ran = run_limited(fit("limited"), log, warm_fit, fit_cache, f"nerf-data-scale-{views}-fit",
                          fit_started("limited"), args)
        limited["fit"] = {**ran, "error": failure(ran, log)}
        if ran["code"] == 0:
            stats = step_stats(work / "runs" / f"{views}-limited")
            row.update(limited_steps_per_s=stats["steps_per_s"], limited_data_wait_ms=stats["data_wait_ms"])
            if stats["steps_per_s"] and warm["steps_per_s"]:
                row["limited_ratio"] = stats["steps_per_s"] / warm["steps_per_s"]
            row["limited_weights_max_diff"] = weights_difference(work / "runs" / f"{views}-warm",
                                                                 work / "runs" / f"{views}-limited")
        if "loader" not in skip:
            log = out / f"loader-{views}-limited.log"
            ran = run_limited(loader("limited"), log, loader_ram, fit_cache,
                              f"nerf-data-scale-{views}-loader", loader_started("limited"), args)
            limited["loader"] = {**ran, "error": failure(ran, log)}
            if ran["code"] == 0:
                figures = json.loads((out / f"loader-{views}-limited.json").read_text())
                row.update(limited_loader_rays_per_s=figures["rays_per_s"],
                           limited_loader_rays_per_s_prefetch=figures["rays_per_s_prefetch"])
        row["limited"] = limited
    elif "limited" not in skip:
        row["limited_skipped"] = reason
    shutil.rmtree(fit_cache, ignore_errors=True)
    shutil.rmtree(work / "runs", ignore_errors=True)
    return row


def _cell(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value / scale, spec)


def table(rows: list[dict[str, Any]], size: tuple[int, int], steps: int) -> str:
    """The markdown table of ``rows`` (:func:`measure`'s), with a note per limited run and skip."""
    lines = [
        f"Training views of {size[0]}x{size[1]} pixels; `fit` of configs/demo.yaml for {steps} steps "
        f"(steps/s and data wait over the steps after the first {WARMUP_STEPS}); the loader alone reads "
        "batches of rays without prefetching; RAM: the cache in the page cache; limited: in a memory cgroup "
        "with room for part of the cache (notes below).", "",
        "| training views | pixels | first load: s / image | first load: peak anon MB | warm start s "
        "| cache MB | loader rays/s (RAM) | steps/s (RAM) | data wait ms (RAM) | loader rays/s (limited) "
        "| steps/s (limited) | data wait ms (limited) | limited / RAM steps/s |",
        "|" + "---|" * 13,
    ]
    notes = []
    for r in rows:
        lines.append(
            f"| {r['views']} | {_cell(r.get('pixels'), '.1f', 1e6)} M "
            f"| {_cell(r.get('load_s_per_image'), '.3f')} "
            f"| {_cell(r.get('load_peak_anon'), ',.0f', MB)} | {_cell(r.get('warm_start_s'), '.1f')} "
            f"| {_cell(r.get('cache_bytes'), ',.0f', MB)} | {_cell(r.get('loader_rays_per_s'), ',.0f')} "
            f"| {_cell(r.get('steps_per_s'), '.2f')} | {_cell(r.get('data_wait_ms'), '.1f')} "
            f"| {_cell(r.get('limited_loader_rays_per_s'), ',.0f')} "
            f"| {_cell(r.get('limited_steps_per_s'), '.2f')} "
            f"| {_cell(r.get('limited_data_wait_ms'), '.1f')} | {_cell(r.get('limited_ratio'), '.2f')} |")
        if r.get("limited_skipped"):
            notes.append(f"* {r['views']} views: limited runs skipped: {r['limited_skipped']}.")
        for kind, ran in (r.get("limited") or {}).items():
            cache = r["cache_bytes"]
            starting = (f" ({ran['start_limit'] / MB:,.0f} MB until it read batches)"
                        if ran.get("lowered") else "")
            note = (f"* {r['views']} views, limited {kind}: limit {ran['limit'] / MB:,.0f} MB{starting} "
                    f"for a cache of {cache / MB:,.0f} MB (cache / limit {cache / ran['limit']:.2f}); "
                    f"the group peaked at {_cell(ran['group_peak_bytes'], ',.0f', MB)} MB, held at most "
                    f"{_cell(ran.get('group_file_bytes'), ',.0f', MB)} MB of page cache (sampled) and hit "
                    f"its limit {_cell(ran['group_limit_hits'], '.0f')} times")
            if ran["error"]:
                note += f"; failed: {ran['error']}"
            elif kind == "fit":
                diff = r.get("limited_weights_max_diff")
                note += ("; final weights not compared" if diff is None else
                         "; same final weights as the RAM fit" if diff == 0 else
                         f"; final weights differ from the RAM fit's by up to {diff:.3g}")
            notes.append(note + ".")
    return "\n".join(lines + (["", *notes] if notes else []))


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


def loader_only(root: Path, cache_dir: Path, config: Path, report: Path, positions: int, rays: int,
                max_s: float) -> None:
    """The reader alone (module docstring): a data module of ``config``'s data options on the cache in
    ``cache_dir``, ``positions`` batches of ``rays`` rays timed without prefetching, then with, each
    stopping early after ``max_s`` seconds (a reader that thrashes under a memory limit would take
    hours); the figures to ``report``."""
    import torch

    from nerf_lightning.data.datamodule import NerfDataModule

    options = {**json.loads(config.read_text())["data"], "root": str(root), "cache_dir": str(cache_dir),
               "rays_per_batch": rays}
    cpu, figures = torch.device("cpu"), {}
    for prefetch, first in ((False, 0), (True, positions + 1)):
        module = NerfDataModule(**{**options, "prefetch": prefetch})
        start = time.perf_counter()
        module.setup("fit")
        module.train_batch(first, cpu)  # builds the pixel store: not timed
        setup_s = time.perf_counter() - start
        report.with_suffix(".started").touch()  # reading batches from here (a limited run's cue)
        start = time.perf_counter()
        done, seconds = 0, 0.0
        while done < positions and seconds < max_s:
            done += 1
            module.train_batch(first + done, cpu)
            seconds = time.perf_counter() - start
        module.teardown("fit")
        key = "rays_per_s_prefetch" if prefetch else "rays_per_s"
        figures[key] = done * rays / seconds
        figures[f"{key}_batches"] = done
        figures.setdefault("setup_s", setup_s)
        figures["pixels"] = int(module.splits["train"].images.offsets[-1])
    report.write_text(json.dumps(figures))


def data_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> ``(key, value)``, the value read as JSON where it is JSON (else a string)."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main(argv: list[str] | None = None) -> None:
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
    parser.add_argument("--data", type=data_option, action="append", default=[], metavar="KEY=VALUE",
                        help="a data option of the fits and the loader (a JSON value), e.g. "
                             "images_per_window=8")
    parser.add_argument("--skip", nargs="+", choices=PARTS, default=[],
                        help="parts to leave out (the warm fit always runs; without the cold fit this "
                             "process fills the cache)")
    parser.add_argument("--loader-positions", type=int, default=50,
                        help="batches the loader alone reads, each way (default 50)")
    parser.add_argument("--loader-rays", type=int, default=4096, help="rays per loader batch (default 4096)")
    parser.add_argument("--loader-max-s", type=float, default=30,
                        help="seconds after which the loader stops reading early, each way (default 30)")
    parser.add_argument("--memory-limit-fraction", type=float, default=0.5,
                        help="share of the cache the limited runs' page cache has room for (default 0.5)")
    parser.add_argument("--memory-margin-mb", type=float, default=0,
                        help="room in the limit besides the RAM twin's charge and the cache's share "
                             "(default 0)")
    parser.add_argument("--memory-limit-mb", type=float, default=None,
                        help="one limit for every limited run instead (MB)")
    parser.add_argument("--sample-s", type=float, default=0.5, help="memory sampling period (default 0.5 s)")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder for the datasets and caches (default: a temporary folder, removed)")
    parser.add_argument("--out", type=Path, default=Path("bench_out") / "data_scale")
    add_option(parser)
    parser.add_argument("--load-only", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--loader-only", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--fit-config", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--cache-dir", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--load-json", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--loader-json", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load_only is not None:
        load_only(args.load_only, args.cache_dir, args.load_json)
        return
    if args.loader_only is not None:
        loader_only(args.loader_only, args.cache_dir, args.fit_config, args.loader_json,
                    args.loader_positions, args.loader_rays, args.loader_max_s)
        return
    with _sigterm_as_exit():
        _measure_all(args)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM (``kill``, a scheduler's timeout) ends the benchmark as Ctrl-C does: by an exception, so
    every ``finally`` runs: the running fit or loader is killed, its memory cgroup removed (with a
    limit, a group left behind would keep holding its pages) and the temporary datasets deleted. Exit
    code 143 (128 + SIGTERM), after one line. Only from the main thread, where Python runs handlers; the
    previous handler comes back when the block ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        print("benchmarks.data_scale: stopped by SIGTERM; the running process and its memory cgroup are "
              "removed, no table is written", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _measure_all(args: argparse.Namespace) -> None:
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work_parent = args.work.resolve() if args.work is not None else None
    if work_parent is not None:
        work_parent.mkdir(parents=True, exist_ok=True)
    if "limited" not in args.skip and (reason := cgroup_unavailable()) is not None:
        print(f"limited runs skipped: {reason}", flush=True)
    with tempfile.TemporaryDirectory(prefix="nerf-lightning-data-scale-", dir=work_parent) as tmp:
        work = Path(tmp)
        start = time.perf_counter()
        pool = make_pool(work, args.base_views, args.base_resolution, args.size)
        print(f"views: {args.base_views} demo views at {args.base_resolution} px upsampled to "
              f"{args.size[0]}x{args.size[1]} in {time.perf_counter() - start:.0f} s", flush=True)
        config = fit_config(out, args.steps, dict(args.data))
        rows = []
        for views in args.views:
            root = make_dataset(work / f"scene-{views}", pool, views)
            rows.append(measure(root, views, work, out, config, args))
            print(json.dumps(rows[-1]), flush=True)
            shutil.rmtree(root, ignore_errors=True)
    report = table(rows, args.size, args.steps)
    print(report)
    (out / "data_scale.md").write_text(report + "\n")
    figures = {"rows": rows, "machine": machine(), "size": list(args.size), "steps": args.steps,
               "data": dict(args.data), "skip": args.skip}
    (out / "data_scale.json").write_text(json.dumps(figures, indent=1))
    record_to(args.results, "data-scale", report)


if __name__ == "__main__":
    main()
