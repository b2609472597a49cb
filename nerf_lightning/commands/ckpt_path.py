"""What ``--ckpt_path`` names for ``fit``, ``validate``, ``test`` and ``predict``: a checkpoint file, a run
folder (its ``last.ckpt``, and its ``config.yaml`` when no ``--config`` is given), or ``last`` (the newest
loadable ``last.ckpt`` of the runs under ``--trainer.default_root_dir``); and the command line rewritten
to name the file, since the processes a data-parallel fit starts read it again."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities.rank_zero import rank_zero_only

from nerf_lightning.core.errors import CheckpointError
from nerf_lightning.runs.checkpoint_io import load_checkpoint_file
from nerf_lightning.runs.folders import checkpoint_of, run_folder_of, runs_newest_first
from nerf_lightning.runs.trained import RUN_CONFIG

SUBCOMMANDS = ("fit", "validate", "test", "predict")
"""The commands whose ``--ckpt_path`` this resolves."""

LAST = "last"
"""The ``--ckpt_path`` value naming the run folder's newest ``last.ckpt`` (:func:`newest_last_checkpoint`)."""


def say(line: str) -> None:
    """Print ``line`` on stderr, from rank zero only (every rank parses the command line)."""
    if getattr(rank_zero_only, "rank", 0) == 0:
        print(f"nerf-lightning: {line}", file=sys.stderr, flush=True)


def newest_last_checkpoint(root: Path, weights_only: bool | None) -> tuple[Path, dict[str, Any]] | None:
    """The newest loadable ``last.ckpt`` of the runs under ``root`` and its contents
    (:func:`~nerf_lightning.runs.folders.runs_newest_first`: the most recently written first).

    A ``last.ckpt`` that does not load (:func:`load_checkpoint_file`) is skipped with one line saying
    why. ``None`` when no run holds a loadable one.
    """
    for path in runs_newest_first(root):
        try:
            return path, load_checkpoint_file(path, weights_only=weights_only)
        except (CheckpointError, FileNotFoundError) as error:  # broken, or gone since it was listed
            say(f"--ckpt_path last: skipping {error}")
    return None


def replace_ckpt_path(args: list[str], old: str, path: str | None) -> list[str]:
    """``args`` with ``--ckpt_path OLD`` (or ``--ckpt_path=OLD``) naming ``path`` (``None``: dropped)."""
    replaced: list[str] = []
    skip = False
    for index, arg in enumerate(args):
        if skip:
            skip = False
        elif arg == "--ckpt_path" and index + 1 < len(args) and args[index + 1] == old:
            replaced += ["--ckpt_path", path] if path is not None else []
            skip = True
        elif arg == f"--ckpt_path={old}":
            replaced += [f"--ckpt_path={path}"] if path is not None else []
        else:
            replaced.append(arg)
    return replaced


def with_run_config(args: list[str]) -> list[str]:
    """``SUBCOMMAND ... --ckpt_path RUN ...`` without ``--config``: ``args`` with the run's saved
    ``config.yaml`` as the first ``--config`` (``RUN`` a run folder or a checkpoint in one), so that
    ``test --ckpt_path RUN`` scores the run on its own data and ``fit --ckpt_path RUN`` resumes it as
    configured; options given still win. Other arguments are returned as they are.

    Raises:
        FileNotFoundError: ``--ckpt_path`` names neither a checkpoint nor a run folder.
    """
    if not args or args[0] not in SUBCOMMANDS or any(arg in ("--config", "-c") or arg.startswith("--config=")
                                                      for arg in args):
        return args
    values = [value for option, value in itertools.pairwise(args) if option == "--ckpt_path"]
    values += [arg.split("=", 1)[1] for arg in args if arg.startswith("--ckpt_path=")]
    if not values or values[-1] == LAST:
        return args
    run = run_folder_of(checkpoint_of(Path(values[-1])))  # FileNotFoundError: one line, exit 2
    config = run / RUN_CONFIG if run is not None else None
    if config is None or not config.is_file():
        return args
    return [args[0], "--config", str(config), *args[1:]]
