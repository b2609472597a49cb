"""How ``make test`` spreads the test files over its two pytest-xdist workers (``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

SEVERAL_AT_ONCE = ("test_distributed.py", "test_runs.py", "test_determinism.py", "test_preemption.py",
                   "test_sweep_workers.py")
"""Test files (basenames) that run several processes or threads at once: DDP ranks, a reference run
beside the run it kills, training on two threads by design, two sweep workers."""


HEAVY_FIRST = (
    "several-at-once",
    "tests/export/test_export_pt2.py",
    "tests/callbacks/test_appearance_eval.py",
    "tests/sweeps/test_sweep.py",
    "tests/export/test_export.py",
    "tests/pipeline/test_pipeline.py",
    "tests/viewer/test_viewer.py",
    "tests/fields/test_real_scenes.py",
    "tests/datasets/test_data_process.py",
    "tests/benchmarks/test_bench_data_scale.py",
    "tests/sweeps/test_sweep_pruning.py",
    "tests/nn/test_hash_kernels.py",
    "tests/samplers/test_occupancy_cascade.py",
    "tests/benchmarks/test_bench_speed.py",
    "tests/callbacks/test_watching_a_run.py",
    "tests/datasets/test_scene_suite.py",
    "tests/datasets/test_data_process_video.py",
    "tests/system/test_training.py",
    "tests/system/test_supersampling.py",
    "tests/callbacks/test_eval_report.py",
    "tests/cameras/test_camera_refinement.py",
    "tests/viewer/test_viewer_view.py",
    "tests/data/test_normalise_option.py",
)
"""The units that take longest, longest first: handed out before the rest, so that the last unit a
worker starts is a short one and the two workers finish close together (longest-first scheduling). A
unit missing here only runs later; a stale order costs time, never a result."""


def heavy_first(nodeids: list[str]) -> list[str]:
    """``nodeids`` with the units of ``HEAVY_FIRST`` first, in its order; each unit's tests, and the other
    units, keep their order."""
    rank = {unit: index for index, unit in enumerate(HEAVY_FIRST)}
    return sorted(nodeids, key=lambda nodeid: rank.get(scope(nodeid), len(rank)))


def scope(nodeid: str) -> str:
    """The unit a test is scheduled with: its file, or ``several-at-once`` for ``SEVERAL_AT_ONCE``."""
    file = nodeid.split("::", 1)[0]
    return "several-at-once" if PurePosixPath(file).name in SEVERAL_AT_ONCE else file


def make_scheduler(config: Any, log: Any) -> Any:
    """``--dist loadfile``, with ``SEVERAL_AT_ONCE`` as one unit: every test file runs whole on one
    worker, so its module fixtures are built once, and the files of ``SEVERAL_AT_ONCE`` run one after
    the other on the same worker, never beside each other. (``--dist loadgroup`` with ``xdist_group``
    marks would say this, but pytest-xdist 3.8 cannot regroup pytest 9's node ids.)"""
    from xdist.scheduler import LoadFileScheduling

    class FilesAndSeveralAtOnce(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid)

    return FilesAndSeveralAtOnce(config, log)
