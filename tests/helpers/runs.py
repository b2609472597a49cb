"""Running the package the way the tests do: a short real training run's arguments, a command's exit
code and output, and where the repository and the optional shared datasets are."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DEMO_CONFIG = REPO / "configs" / "demo.yaml"
SHARED_DATASETS = REPO.parent / "shared" / "datasets"


RUN = "run"
"""The run folder's name ``short_run_args`` gives (``--run_name``): its run is ``OUT/run``."""


def short_run_args(scene: Path, out: Path, *extra: str, steps: int = 6,
                   sampler_args: tuple[str, ...] = ("--model.sampler.resolution", "16")) -> list[str]:
    """Arguments (after the subcommand) for a few real training steps on ``scene`` with a small field
    (``sampler_args`` shrink the config's OccupancyGrid), into the run folder ``OUT/run`` (:data:`RUN`;
    a later ``--run_name`` in ``extra`` wins)."""
    return ["--config", str(DEMO_CONFIG), "--data.root", str(scene), "--data.make_demo", "false",
            "--trainer.default_root_dir", str(out), "--run_name", RUN, "--trainer.max_time", "null",
            "--trainer.max_steps", str(steps), "--data.steps_per_epoch", "3",
            "--trainer.limit_val_batches", "2", "--trainer.log_every_n_steps", "1",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--model.field.num_levels", "4", "--model.field.log2_hashmap_size", "12",
            "--model.field.max_resolution", "64", "--model.field.hidden_dim", "16",
            *sampler_args, *extra]


def kill_at_step(step: int, *, process_group: bool = False, rank: int | None = None,
                 sig: str = "SIGKILL") -> tuple[str, ...]:
    """Arguments that make a run SIGKILL itself (or its process group: a pipeline and its fit, both DDP
    ranks; or, with ``rank``, only that rank of a DDP run) at the start of training step ``step``
    (``tests/helpers/kill.py``); ``sig="SIGINT"`` to the process group is a terminal's Ctrl-C. The run's
    process needs ``REPO_ON_PATH`` to import the callback."""
    return ("--trainer.callbacks+=tests.helpers.kill.KillAtStep", "--trainer.callbacks.step", str(step),
            "--trainer.callbacks.process_group", str(process_group).lower(),
            *(() if rank is None else ("--trainer.callbacks.rank", str(rank))),
            *(() if sig == "SIGKILL" else ("--trainer.callbacks.sig", sig)))


REPO_ON_PATH = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
"""For the processes a test starts that import test-only plugins from ``tests.helpers``."""

ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""For the processes a test starts: several of them, or one beside this one, share two cores."""


@contextlib.contextmanager
def sigint_inherited_as(handler: Any) -> Iterator[None]:
    """While the block runs, SIGINT's handler in this process is ``handler``, which is what the processes
    it starts inherit: ``signal.default_int_handler`` for a command run in a terminal's foreground, where
    Ctrl-C reaches it; ``signal.SIG_IGN`` for one a shell started in the background (a shell ignores
    SIGINT in its background jobs, and so in a whole ``make test`` started that way)."""
    before = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


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


def printed_and_exited(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """What ``nerf-lightning ARGS`` prints to stdout in this process when ``ARGS`` end in an option that
    prints and exits (``--help``, ``--print_config``), having exited with code 0."""
    from nerf_lightning.cli import main

    capsys.readouterr()  # what earlier commands printed
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code in (0, None)
    return capsys.readouterr().out
