"""benchmarks/data_scale.py's datasets (the demo scene's views cropped, upsampled and repeated) and its
measures: what it trains on is a valid dataset of the size asked for, and a first load in a process of
its own reports its time and pixels."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.data_scale import make_dataset, make_pool, parse_size, rss_anon, table
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
    assert rss_anon(os.getpid()) > 0
    row = {"views": 150, "pixels": 96e6, "load_s_per_image": 0.05, "load_peak_anon": 500 * 2**20,
           "load_anon_before": 300 * 2**20, "cold_fit_peak_anon": 900 * 2**20, "cold_fit_s": 40.0,
           "warm_fit_peak_anon": 880 * 2**20, "warm_fit_s": 30.0, "cache_bytes": 367 * 2**20}
    lines = table([row], (800, 800), 60).splitlines()
    assert lines[-1] == "| 150 | 96.0 M | 0.050 | 500 (300) | 900 | 40 | 880 | 30 | 367 MB |"


@pytest.mark.slow
def test_the_first_load_is_measured_in_a_process_of_its_own(tmp_path: Path) -> None:
    root = make_dataset(tmp_path / "scene", make_pool(tmp_path / "work", 2, 16, (24, 24)), 5)
    report = tmp_path / "load.json"
    subprocess.run([sys.executable, "-m", "benchmarks.data_scale", "--load-only", str(root), "--cache-dir",
                    str(tmp_path / "cache"), "--load-json", str(report)], cwd=REPO, check=True, timeout=120)
    figures = json.loads(report.read_text())
    assert figures["pixels"] == 5 * 24 * 24 and figures["seconds"] > 0 and figures["anon_before"] > 0
