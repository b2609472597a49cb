"""How ``make test`` spreads the test files over its two pytest-xdist workers (``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

SEVERAL_AT_ONCE = ("test_distributed.py", "test_runs.py", "test_determinism.py")
"""Test files (basenames) that run several processes or threads at once: DDP ranks, a reference run
beside the run it kills, training on two threads by design."""


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
