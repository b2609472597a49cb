"""Shared fixtures: a tiny generated scene and the arguments of a short real training run."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Before torch loads OpenMP, which reads it once: threads waiting for work sleep instead of spinning.
# On two cores shared with other processes (this suite's own subprocesses, DDP ranks, other users),
# a spinning thread holds a core the thread it waits for needs: a 400-step fit with one core busy
# took 42 s instead of 20 s (idle: 15 s vs 16 s). Only the waiting changes, never the results.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest
import torch

from nerf_lightning.datasets.demo_scene import make_demo_scene
from tests.helpers.runs import short_run_args


@pytest.fixture(scope="session")
def tiny_scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo scene at 24x24 with 8 train, 2 val and 2 test views."""
    return make_demo_scene(tmp_path_factory.mktemp("scene") / "demo", num_train=8, num_val=2, num_test=2,
                           resolution=24)


SEVERAL_AT_ONCE = ("test_distributed.py", "test_runs.py", "test_determinism.py")
"""Test files that run several processes or threads at once: DDP ranks, a reference run beside the run
it kills, training on two threads by design."""


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown (and unused) without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (``make test``), with ``SEVERAL_AT_ONCE`` as one unit: every test file runs
    whole on one worker, so its module fixtures are built once, and the files of ``SEVERAL_AT_ONCE``
    run one after the other on the same worker, never beside each other. (``--dist loadgroup`` with
    ``xdist_group`` marks would say this, but pytest-xdist 3.8 cannot regroup pytest 9's node ids.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndSeveralAtOnce(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file = nodeid.split("::", 1)[0]
            return "several-at-once" if Path(file).name in SEVERAL_AT_ONCE else file

    return FilesAndSeveralAtOnce(config, log)


@pytest.fixture(scope="session")
def tiny_run(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory (``config.yaml``, ``checkpoints/last.ckpt``) of a 3-step fit on ``tiny_scene``."""
    from nerf_lightning.cli import run_lightning_cli

    out = tmp_path_factory.mktemp("tiny_run")
    run_lightning_cli(["fit", *short_run_args(tiny_scene, out, steps=3)])
    return out / "lightning_logs" / "version_0"


_CUDA = torch.cuda.is_available()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not _CUDA, reason="no CUDA"))])
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each device a test should pass on: the CPU always, CUDA when present (skipped otherwise)."""
    return torch.device(request.param)
