"""The ``nerf-lightning`` entry point: dispatch to :mod:`nerf_lightning.commands`.

``fit|validate|test|predict`` are LightningCLI's (:mod:`nerf_lightning.commands.lightning`);
``data|render|export|compare|pipeline`` are the project's own commands. Nothing in the package
imports this module: it is only the entry point (``pyproject.toml``, ``python -m nerf_lightning``).
"""

from __future__ import annotations

import sys

from nerf_lightning.commands import dispatch
from nerf_lightning.commands.lightning import NerfCLI, run_lightning_cli

__all__ = ["NerfCLI", "main", "run_lightning_cli"]  # run_lightning_cli: the tests' and scripts' handle


def main(argv: list[str] | None = None) -> int:
    """Run ``nerf-lightning ARGV`` (default ``sys.argv[1:]``); the exit code."""

    def lightning(args: list[str]) -> None:  # looked up here at call time: tests replace it
        if argv is None:
            sys.argv[1:] = args  # LightningCLI, and the ranks DDP launches, read the command line itself
            run_lightning_cli(None)
        else:
            run_lightning_cli(args)

    return dispatch(list(sys.argv[1:] if argv is None else argv), lightning)


if __name__ == "__main__":
    sys.exit(main())
