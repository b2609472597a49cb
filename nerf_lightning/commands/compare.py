"""``nerf-lightning compare RUN_A RUN_B``: what differs between two recorded runs."""

from __future__ import annotations

from nerf_lightning.commands.base import Command
from nerf_lightning.runs.compare import run_compare


def compare(run_a: str, run_b: str) -> int:
    """Show how two recorded runs differ (config, environment, data, metrics).

    Args:
        run_a: a run directory (holding run.json).
        run_b: the run directory to compare it with.
    """
    print(run_compare(run_a, run_b))
    return 0


COMMAND = Command("compare", compare, positional=True)
