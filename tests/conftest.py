"""Shared fixtures (a tiny generated scene, a short real training run of it, the devices), the ``slow``
mark enforced, and how ``make test`` schedules the files on its two workers.

No test file imports this one or another test file: what several share lives in ``tests/helpers``
(``tests/test_suite_layout.py`` checks it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# Before torch loads OpenMP, which reads it once: threads waiting for work sleep instead of spinning.
# On two cores shared with other processes (this suite's own subprocesses, DDP ranks, other users),
# a spinning thread holds a core the thread it waits for needs, and a fit beside a busy core runs at a
# fraction of its speed. Only the waiting changes, never the results.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Every process a test starts (a command, a pipeline's stage, a sweep's trial) runs one thread unless the test
# sets its own count: the suite's two workers already fill both cores, and a process synchronising two
# threads on a core another process holds runs several times slower than it would on one thread. A test
# about threads says so itself (``torch.set_num_threads``, or ``OMP_NUM_THREADS`` in the process's
# environment).
os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

import pytest
import torch

from nerf_lightning.core.subnormal import flush_subnormals
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.system.host_memory import keep_freed_memory
from tests.helpers import scheduling, slow_guard
from tests.helpers.runs import RUN, short_run_args

TEST_THREADS = 1
"""torch's threads in a test process. The tests' tensors are small: a second thread costs more in
synchronisation than it brings, and under ``make test`` the workers already share the cores. A test about
threads sets its own count (``tests/system/test_determinism.py``); one whose numbers were measured on
two threads owns that too (``tests/helpers/numerics.py``)."""


def pytest_configure(config: pytest.Config) -> None:
    """The ``slow`` mark, enforced (``tests/helpers/slow_guard.py``): a test not marked slow that starts a
    Trainer, a LightningCLI or a process, itself or through a fixture, fails saying so. One thread,
    subnormals flushed to zero before any thread starts, as in the ``nerf-lightning`` script, and freed
    memory kept mapped, as the Lightning commands keep it: a test that trains through a ``Trainer`` of its
    own has the allocator settings a command's fit has, whichever tests ran before it in the process."""
    slow_guard.install(config)
    flush_subnormals()
    keep_freed_memory()
    torch.set_num_threads(TEST_THREADS)


@pytest.fixture(scope="session")
def tiny_scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo scene at 24x24 with 8 train, 2 val and 2 test views."""
    return make_demo_scene(tmp_path_factory.mktemp("scene") / "demo", num_train=8, num_val=2, num_test=2,
                           resolution=24)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown (and unused) without it
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` (``make test``) with the files that start several processes or threads at once
    as one unit, run one after the other on one worker (``tests/helpers/scheduling.py``)."""
    if config.getvalue("dist") != "loadfile":
        return None
    return scheduling.make_scheduler(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``make test``'s workers (which all collect the same order), the longest units first
    (``tests/helpers/scheduling.py``); a run without workers keeps the files' order."""
    if os.environ.get("PYTEST_XDIST_WORKER") and config.getvalue("dist") == "loadfile":
        ordered = scheduling.heavy_first([item.nodeid for item in items])
        order = {nodeid: index for index, nodeid in enumerate(ordered)}
        items.sort(key=lambda item: order[item.nodeid])


@pytest.fixture(scope="session")
def tiny_run(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory (``config.yaml``, ``checkpoints/last.ckpt``) of a 3-step fit on ``tiny_scene``."""
    from nerf_lightning.cli import run_lightning_cli

    out = tmp_path_factory.mktemp("tiny_run")
    run_lightning_cli(["fit", *short_run_args(tiny_scene, out, steps=3)])
    return out / RUN


_CUDA = torch.cuda.is_available()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not _CUDA, reason="no CUDA"))])
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each device a test should pass on: the CPU always, CUDA when present (skipped otherwise)."""
    return torch.device(request.param)
