"""Shared fixtures: a tiny generated scene and the arguments of a short real training run."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# Before torch loads OpenMP, which reads it once: threads waiting for work sleep instead of spinning.
# On two cores shared with other processes (this suite's own subprocesses, DDP ranks, other users),
# a spinning thread holds a core the thread it waits for needs: a 400-step fit with one core busy
# took 42 s instead of 20 s (idle: 15 s vs 16 s). Only the waiting changes, never the results.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import pytest
import torch

from nerf_lightning.data.demo_scene import make_demo_scene

REPO = Path(__file__).resolve().parents[1]
DEMO_CONFIG = REPO / "configs" / "demo.yaml"
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


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


def short_run_args(scene: Path, out: Path, *extra: str, steps: int = 6,
                   sampler_args: tuple[str, ...] = ("--model.sampler.resolution", "16")) -> list[str]:
    """Arguments (after the subcommand) for a few real training steps on ``scene`` with a small field
    (``sampler_args`` shrink the config's OccupancyGrid)."""
    return ["--config", str(DEMO_CONFIG), "--data.root", str(scene), "--data.make_demo", "false",
            "--trainer.default_root_dir", str(out), "--trainer.max_time", "null",
            "--trainer.max_steps", str(steps), "--data.steps_per_epoch", "3",
            "--trainer.limit_val_batches", "2", "--trainer.log_every_n_steps", "1",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--model.field.num_levels", "4", "--model.field.log2_hashmap_size", "12",
            "--model.field.max_resolution", "64", "--model.field.hidden_dim", "16",
            *sampler_args, *extra]


@pytest.fixture(scope="session")
def tiny_run(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory (``config.yaml``, ``checkpoints/last.ckpt``) of a 3-step fit on ``tiny_scene``."""
    from nerf_lightning.cli import run_lightning_cli

    out = tmp_path_factory.mktemp("tiny_run")
    run_lightning_cli(["fit", *short_run_args(tiny_scene, out, steps=3)])
    return out / "lightning_logs" / "version_0"


ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""For the processes a test starts: several of them, or one beside this one, share two cores."""


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``nerf-lightning ARGS`` run by its entry point in this process: the exit code and what it printed.

    For commands whose work happens in processes of their own (``pipeline``'s stages, ``export
    --verify``'s fresh interpreter), which still start with ``python -m nerf_lightning``: running the
    parent here instead of in a fresh interpreter spares one Lightning import (seconds) per call.
    Those child processes inherit ``ONE_THREAD``.
    """
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        for name, value in ONE_THREAD.items():
            patch.setenv(name, value)
        from nerf_lightning.cli import main

        code = main(list(args))
    return subprocess.CompletedProcess([sys.executable, "-m", "nerf_lightning", *args], code, out.getvalue(),
                                       err.getvalue())


_CUDA = torch.cuda.is_available()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not _CUDA, reason="no CUDA"))])
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each device a test should pass on: the CPU always, CUDA when present (skipped otherwise)."""
    return torch.device(request.param)
