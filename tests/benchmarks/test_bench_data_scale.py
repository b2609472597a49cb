"""benchmarks/data_scale.py's datasets (the demo scene's views cropped, upsampled and repeated) and its
measures: what it trains on is a valid dataset of the size asked for, a first load in a process of
its own reports its time and pixels, the steps/s and data wait come from the run's ``telemetry.jsonl``,
and a whole tiny run reports the loader's rays/s, the steps/s and the limited runs (or why they were
skipped) from the real run files. benchmarks/memory_limit.py says why no memory cgroup can be made."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmarks import data_scale, memory_limit
from benchmarks.data_scale import (
    MB,
    data_option,
    fit_config,
    limit_for,
    loader_only,
    make_dataset,
    make_pool,
    parse_size,
    rss_anon,
    step_stats,
    table,
)
from nerf_lightning.scenes.loading import load_split

REPO = Path(__file__).resolve().parents[2]


def test_datasets_repeat_the_demo_views_upsampled_to_the_size_asked_for(tmp_path: Path) -> None:
    pool = make_pool(tmp_path / "work", 3, 16, (32, 24))
    root = make_dataset(tmp_path / "scene", pool, 7)
    train = load_split(root, "train")
    assert len(train) == 7 and train.images.shapes == ((24, 32),) * 7
    assert torch.equal(train.images.uint8(3), train.images.uint8(0))  # view 3 repeats view 0
    assert torch.equal(train.cameras.camera_to_world[4], train.cameras.camera_to_world[1])
    assert not torch.equal(train.images.uint8(1), train.images.uint8(0))
    focal = 0.5 * 32 / math.tan(0.5 * pool["camera_angle_x"])  # the crop keeps the horizontal field of view
    assert torch.allclose(train.cameras.fx, torch.full((7,), focal))
    assert len(load_split(root, "val")) == len(load_split(root, "test")) == 2
    assert (root / "train" / "r_3.png").stat().st_ino == (root / "train" / "r_0.png").stat().st_ino


def test_sizes_memory_and_table() -> None:
    assert parse_size("1600x1200") == (1600, 1200) and parse_size("64") == (64, 64)
    assert data_option("images_per_window=8") == ("images_per_window", 8)
    assert data_option("pixel_selection=error") == ("pixel_selection", "error")
    assert rss_anon(os.getpid()) > 0
    row = {"views": 150, "pixels": 96e6, "load_s_per_image": 0.05, "load_peak_anon": 500 * MB,
           "warm_start_s": 12.34, "cache_bytes": 367 * MB, "loader_rays_per_s": 1.5e6, "steps_per_s": 4.0,
           "data_wait_ms": 0.25, "limited_loader_rays_per_s": 3e5, "limited_steps_per_s": 3.0,
           "limited_data_wait_ms": 2.5, "limited_ratio": 0.75, "limited_weights_max_diff": 0.0,
           "limited": {"fit": {"limit": 734 * MB, "group_peak_bytes": 730 * MB, "group_limit_hits": 12,
                               "group_file_bytes": 180 * MB,
                               "error": None}}}
    skipped = {"views": 300, "steps_per_s": 2.0,
               "limited_skipped": "not root (making a memory cgroup needs root)"}
    lines = table([row, skipped], (800, 800), 60).splitlines()
    assert lines[4] == ("| 150 | 96.0 M | 0.050 | 500 | 12.3 | 367 | 1,500,000 | 4.00 | 0.2 | 300,000 | 3.00 "
                        "| 2.5 | 0.75 |")
    assert lines[5] == "| 300 | - M | - | - | - | - | - | 2.00 | - | - | - | - | - |"
    assert lines[7] == ("* 150 views, limited fit: limit 734 MB for a cache of 367 MB (cache / limit 0.50); "
                        "the group peaked at 730 MB, held at most 180 MB of page cache (sampled) and hit its "
                        "limit 12 times; same final weights as the RAM fit.")
    assert lines[8] == "* 300 views: limited runs skipped: not root (making a memory cgroup needs root)."


def test_steps_per_second_and_limits(tmp_path: Path) -> None:
    run = tmp_path / "run" / "version_0"
    run.mkdir(parents=True)
    steps = [3.0, 2.0, 1.0, 0.5, 0.25, 0.5, 1.75]  # the first three are left out: 4 steps in 3 s
    run.joinpath("telemetry.jsonl").write_text("".join(
        json.dumps({"step": s, "data_wait": 0.001 * i}) + "\n" for i, s in enumerate(steps)))
    stats = step_stats(tmp_path / "run")
    assert stats["steps"] == 7 and stats["train_s"] == sum(steps)
    assert stats["steps_per_s"] == pytest.approx(4 / 3.0)
    assert stats["data_wait_ms"] == pytest.approx(4.5)  # mean of 3, 4, 5, 6 ms
    assert step_stats(tmp_path / "none")["steps_per_s"] is None
    args = argparse.Namespace(memory_limit_mb=None, memory_margin_mb=16, memory_limit_fraction=0.5)
    twin = {"peak_anon": 600 * MB, "group_peak_bytes": 650 * MB}
    assert limit_for(twin, 400 * MB, args) == (650 + 16 + 200) * MB  # twin charge + margin + cache share
    assert limit_for({"peak_anon": 600 * MB}, 400 * MB, args) == (600 + 16 + 200) * MB  # had no group
    args.memory_limit_mb = 300
    assert limit_for(twin, 400 * MB, args) == 300 * MB


def test_why_no_memory_cgroup_can_be_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reason = memory_limit.cgroup_unavailable()
    assert reason is None or reason  # either one can be made, or a reason is given
    mounts = tmp_path / "mounts"
    mounts.write_text("proc /proc proc rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n")
    monkeypatch.setattr(memory_limit, "MOUNTS", mounts)
    monkeypatch.setattr(memory_limit.os, "geteuid", lambda: 0)
    assert memory_limit.cgroup_unavailable() == "no memory cgroup hierarchy is mounted"
    v2 = tmp_path / "unified"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("hugetlb\n")
    (v2 / "cgroup.subtree_control").write_text("\n")
    mounts.write_text(f"cgroup2 {v2} cgroup2 rw 0 0\ncgroup {tmp_path} cgroup ro,memory 0 0\n")
    assert memory_limit.cgroup_unavailable() == (f"cgroup v2 at {v2}: no memory controller (controllers: "
                                                 f"hugetlb); cgroup v1 memory at {tmp_path}: not writable")
    mounts.write_text(f"cgroup {tmp_path} cgroup rw,memory 0 0\n")
    hierarchy, _ = memory_limit.find_hierarchy()
    assert hierarchy == memory_limit.Hierarchy(tmp_path, 1, "memory.limit_in_bytes")
    monkeypatch.setattr(memory_limit.os, "geteuid", lambda: 1000)
    assert memory_limit.cgroup_unavailable() == "not root (making a memory cgroup needs root)"
    data = tmp_path / "data.u8"
    data.write_bytes(bytes(5000))
    assert memory_limit.drop_page_cache([data]) == 5000


@pytest.mark.slow
def test_the_first_load_is_measured_in_a_process_of_its_own(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "scene", make_pool(tmp_path / "work", 2, 16, (24, 24)), 5)
    report = tmp_path / "load.json"
    subprocess.run([sys.executable, "-m", "benchmarks.data_scale", "--load-only", str(root), "--cache-dir",
                    str(tmp_path / "cache"), "--load-json", str(report)], cwd=REPO, check=True, timeout=120)
    figures = json.loads(report.read_text())
    assert figures["pixels"] == 5 * 24 * 24 and figures["seconds"] > 0 and figures["anon_before"] > 0


@pytest.mark.slow  # builds a cache and draws batches: seconds
def test_the_loader_alone_reports_rays_per_second_with_and_without_prefetch(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "data", make_pool(tmp_path / "pool", 2, 16, (32, 32)), 3)
    report = tmp_path / "loader.json"
    loader_only(root, tmp_path / "cache", fit_config(tmp_path, 2), report, positions=3, rays=64, max_s=30)
    figures = json.loads(report.read_text())
    assert figures["pixels"] == 3 * 32 * 32
    assert figures["rays_per_s"] > 0 and figures["rays_per_s_batches"] == 3
    assert figures["rays_per_s_prefetch"] > 0 and figures["rays_per_s_prefetch_batches"] == 3
    assert report.with_suffix(".started").exists()  # a limited run's cue that batches are being read


@pytest.mark.slow  # starts the fits it measures: seconds
def test_a_tiny_run_reports_the_steps_and_the_limited_fit(tmp_path: Path) -> None:
    # The benchmark runs in this process, and only the fits it measures start processes of their own:
    # the warm fit (steps/s, data wait, warm start) and the limited fit. The first load and the loader
    # are left out (the tests above run the same functions), and so is the cold fit, which only fills
    # the cache here (this process fills it instead, as the fit's data module would). Small batches:
    # what the steps compute is not the point. A margin in the limit: the fit's own needs vary by a few
    # megabytes from run to run, and the twin's peak alone left it none.
    out = tmp_path / "out"
    data_scale.main(["--views", "4", "--size", "48x48", "--base-views", "2", "--base-resolution", "16",
                     "--steps", "5", "--data", "rays_per_batch=64", "--skip", "first-load", "cold-fit",
                     "loader", "--memory-margin-mb", "32", "--results", "", "--work", str(tmp_path),
                     "--out", str(out)])
    row = json.loads((out / "data_scale.json").read_text())["rows"][0]
    assert row["cache_bytes"] > 4 * 48 * 48 * 3
    assert row["steps_per_s"] > 0 and row["data_wait_ms"] >= 0 and row["warm_start_s"] > 0
    notes = (out / "data_scale.md").read_text()
    reason = memory_limit.cgroup_unavailable()
    if reason is None:  # root with a memory controller: the limited fit ran, in a group that is gone
        assert row["limited"]["fit"]["error"] is None and "loader" not in row["limited"]
        assert row["limited_ratio"] > 0 and row["limited_steps_per_s"] > 0
        assert row["limited"]["fit"]["group_peak_bytes"] <= row["limited"]["fit"]["start_limit"]
        assert row["limited_weights_max_diff"] is not None
        assert "limited fit: limit" in notes
        root = memory_limit.find_hierarchy()[0]
        assert root is not None and not list(root.root.glob("nerf-data-scale-4-*"))
    else:
        assert row["limited_skipped"] == reason and f"limited runs skipped: {reason}" in notes


def _groups_of(pid: int) -> list[Path]:
    hierarchy = memory_limit.find_hierarchy()[0]
    return [] if hierarchy is None else list(hierarchy.root.glob(f"nerf-data-scale-*-{pid}"))


def _procs(group: Path) -> list[int]:
    try:
        return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" not in status.read_text()
    except OSError:
        return False


@pytest.mark.slow  # starts a process in the group
def test_a_group_whose_process_outlives_its_block_is_emptied_and_removed() -> None:
    if (reason := memory_limit.cgroup_unavailable()) is not None:
        pytest.skip(f"no memory cgroup here: {reason}")
    with memory_limit.memory_cgroup(64 * MB, "nerf-data-scale-test-orphan") as group:
        child = subprocess.Popen(["sleep", "120"], preexec_fn=group.join)
        deadline = time.monotonic() + 10
        while child.pid not in _procs(group.path) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert child.pid in _procs(group.path)
    assert child.wait(timeout=10) == -signal.SIGKILL  # killed by the block's end, not left running
    assert not group.path.exists()


@pytest.mark.slow  # runs the benchmark as a process and signals it
def test_sigterm_ends_the_benchmark_with_its_running_fit_and_memory_cgroup_removed(tmp_path: Path) -> None:
    # The benchmark as a scheduler would stop it: SIGTERM while a fit it measures runs in a memory
    # cgroup. The fit must end with it, the group must be removed (a limited group left behind keeps its
    # limit and its pages), and so must the temporary datasets; one line says so, exit 128 + 15.
    if (reason := memory_limit.cgroup_unavailable()) is not None:
        pytest.skip(f"no memory cgroup here: {reason}")
    bench = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.data_scale", "--views", "4", "--size", "48x48",
         "--base-views", "2", "--base-resolution", "16", "--steps", "100000", "--data", "rays_per_batch=64",
         "--skip", "first-load", "cold-fit", "loader", "--results", "", "--work", str(tmp_path),
         "--out", str(tmp_path / "out")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    inside: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while not inside and bench.poll() is None and time.monotonic() < deadline:
            inside = [pid for group in _groups_of(bench.pid) for pid in _procs(group)]
            time.sleep(0.1)
        assert inside, f"no fit started in a memory cgroup: {bench.poll()}"
        time.sleep(1.0)  # the fit is under way, importing or training
        bench.send_signal(signal.SIGTERM)
        _, err = bench.communicate(timeout=60)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
        for group in _groups_of(bench.pid):  # leave nothing behind, whatever the outcome
            for pid in _procs(group):
                os.kill(pid, signal.SIGKILL)
            emptied_by = time.monotonic() + 10
            while _procs(group) and time.monotonic() < emptied_by:
                time.sleep(0.05)
            group.rmdir()
    assert bench.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert err.strip().splitlines()[-1] == ("benchmarks.data_scale: stopped by SIGTERM; the running process "
                                            "and its memory cgroup are removed, no table is written")
    assert not _groups_of(bench.pid)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in inside) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in inside)
    assert not list(tmp_path.glob("nerf-lightning-data-scale-*"))
    assert not (tmp_path / "out" / "data_scale.json").exists()
