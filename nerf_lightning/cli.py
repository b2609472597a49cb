"""The ``nerf-lightning`` entry point: dispatch to :mod:`nerf_lightning.commands`.

``fit|validate|test|predict`` are LightningCLI's (:mod:`nerf_lightning.commands.lightning`);
``data|render|export|compare|pipeline`` are the project's own commands. Nothing in the package
imports this module: it is only the entry point (``pyproject.toml``, ``python -m nerf_lightning``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NoReturn

from nerf_lightning.commands import dispatch
from nerf_lightning.core.subnormal import flush_subnormals
from nerf_lightning.core.warm_start import end_process

if TYPE_CHECKING:
    from nerf_lightning.commands.lightning import NerfCLI, run_lightning_cli

# run_lightning_cli: the tests' and scripts' handle
__all__ = ["NerfCLI", "console_main", "main", "run_lightning_cli"]

_LIGHTNING_NAMES = ("NerfCLI", "run_lightning_cli")


def __getattr__(name: str) -> Any:
    """``NerfCLI`` and ``run_lightning_cli``, imported on first use: importing Lightning takes
    seconds, which the commands beside Lightning's (``data validate``, ``data cache``, ``--help``)
    need not pay."""
    if name in _LIGHTNING_NAMES:
        from nerf_lightning.commands import lightning

        for each in _LIGHTNING_NAMES:
            globals().setdefault(each, getattr(lightning, each))
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Run ``nerf-lightning ARGV`` (default ``sys.argv[1:]``); the exit code.

    Exit codes: 0 done; 2 a usage, config, dataset or checkpoint error (one line); 3 a non-finite
    loss; a fit stopped by SIGTERM or a scheduler's early signal, ``--preemption.exit_code`` (75,
    ``EX_TEMPFAIL``: resume it with ``--ckpt_path last``); by Ctrl-C, 130
    (:mod:`nerf_lightning.callbacks.preemption`).
    """
    stopped = 0

    def lightning(args: list[str]) -> None:
        nonlocal stopped
        run = sys.modules[__name__].run_lightning_cli  # at call time: tests replace it
        if argv is None:
            sys.argv[1:] = args  # LightningCLI, and the ranks DDP launches, read the command line itself
            cli = run(None)
        else:
            cli = run(args)
        stopped = int(getattr(cli, "exit_code", 0) or 0)  # a fit stopped by a signal

    return dispatch(list(sys.argv[1:] if argv is None else argv), lightning) or stopped


def console_main() -> NoReturn:
    """The ``nerf-lightning`` script and ``python -m nerf_lightning``: :func:`main`, then the process ends
    without the interpreter's teardown (:func:`~nerf_lightning.core.warm_start.end_process`: threads
    joined, ``atexit`` handlers run, output flushed first). An exception out of :func:`main` ends the
    process as usual, with its traceback. Subnormal floats are flushed to zero first, before any thread
    starts (:mod:`nerf_lightning.core.subnormal`)."""
    flush_subnormals()
    end_process(main())


if __name__ == "__main__":
    console_main()
