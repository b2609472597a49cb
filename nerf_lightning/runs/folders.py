"""Run folders: one folder per fit, named, claimed atomically, and taken by every command.

A fit writes everything it makes into ``ROOT/NAME/`` (ROOT is ``--trainer.default_root_dir``): the
TensorBoard events, ``checkpoints/``, ``config.yaml`` and ``run.json``. NAME is ``--run_name`` when
given, else ``SCENE-CONFIG-YYYYmmdd-HHMMSS`` (the dataset folder's name, the first config file's
name, the local start time), with ``-2``, ``-3``... when that folder exists: a folder is claimed by
creating it, which one process wins, so fits started at the same second never share one. Under
data parallelism only rank zero claims, after the process group is up; the other ranks take its
choice from the paths Lightning broadcasts (``trainer.log_dir``, the checkpoint folder).

A fit resumed from a run's checkpoint writes into that run's folder again; ``validate``, ``test``
and ``predict`` of a run's checkpoint write into ``RUN/<command>/`` (the test report lands beside
the run it scored, and ``compare`` reads it from there). A command that fails leaves no folder it
created unless a checkpoint was written into it.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
import shutil
from pathlib import Path

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

CHECKPOINTS = "checkpoints"
LAST = "last.ckpt"
RUN_RECORD = "run.json"
"""The run's record (:mod:`nerf_lightning.runs.record`)."""
RUN_CONFIG = "config.yaml"
"""The run's resolved config, as LightningCLI saves it."""
TRIAL_RECORD = "trial.json"
"""In the run folder of a sweep's trial: its study, trial number, parameters and seed
(:mod:`nerf_lightning.sweeps`)."""
RUN_MARKERS = (RUN_RECORD, RUN_CONFIG)
"""Files a run folder holds from the start of its fit: a checkpoint beside one of them is a run's."""
PENDING = "pending"
"""What a rank other than zero reads as the name of a folder rank zero has not told it yet; it never
creates a folder of that name (every path it writes comes from rank zero by broadcast)."""


class RunFolderTakenError(FileExistsError):
    """``--run_name`` names a folder that already holds a run."""


def slug(text: str) -> str:
    """``text`` as a piece of a folder name: letters, digits, ``.``, ``_`` and ``-``; ``run`` when empty."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")
    return cleaned or "run"


def check_run_name(name: str) -> str:
    """``name`` if it can name a folder of its own under the root (``slug`` leaves it as it is).

    Raises:
        ValueError: a path (``a/b``, ``..``) or other characters; the message names ``--run_name``.
    """
    if slug(name) != name:
        raise ValueError(f"--run_name {name}: expected a folder name of letters, digits, '.', '_' and '-' "
                         f"(such as {slug(name)})")
    return name


def default_run_name(scene: str | None, config: str | None, now: dt.datetime | None = None) -> str:
    """``SCENE-CONFIG-YYYYmmdd-HHMMSS``: what trained, on what, when (local time). A missing part is
    left out."""
    stamp = (now or dt.datetime.now()).strftime("%Y%m%d-%H%M%S")
    return "-".join([*(slug(part) for part in (scene, config) if part), stamp])


def claim(root: Path, name: str) -> Path:
    """Create ``ROOT/NAME`` (or ``NAME-2``, ``NAME-3``... when it exists) and return it: ``mkdir`` is
    atomic, so of processes claiming at once each gets its own folder."""
    root.mkdir(parents=True, exist_ok=True)
    for number in itertools.count(1):
        folder = root / (name if number == 1 else f"{name}-{number}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise AssertionError("unreachable")


def last_checkpoint(folder: Path) -> Path:
    """``FOLDER/checkpoints/last.ckpt``; an older fit's output folder (``FOLDER/lightning_logs/
    version_N``) for its newest version's.

    Raises:
        FileNotFoundError: the folder holds neither.
    """
    last = folder / CHECKPOINTS / LAST
    if last.is_file():
        return last
    versions = sorted((p for p in (folder / "lightning_logs").glob("version_*") if p.name[8:].isdigit()),
                      key=lambda p: int(p.name[8:]))
    if versions and (versions[-1] / CHECKPOINTS / LAST).is_file():
        return versions[-1] / CHECKPOINTS / LAST
    raise FileNotFoundError(f"{folder}: a folder without {CHECKPOINTS}/{LAST}; expected a checkpoint or a "
                            f"run folder RUN holding RUN/{CHECKPOINTS}/{LAST}")


def checkpoint_of(path: Path) -> Path:
    """The checkpoint a ``--ckpt_path`` value names: a file as it is, a run folder for its
    ``last.ckpt`` (:func:`last_checkpoint`).

    Raises:
        FileNotFoundError: neither a file nor a folder holding a last checkpoint.
    """
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such checkpoint or run folder")
    return last_checkpoint(path)


def run_folder_of(checkpoint: Path) -> Path | None:
    """The run folder a checkpoint belongs to (``RUN/checkpoints/x.ckpt`` with ``RUN/run.json`` or
    ``RUN/config.yaml``), ``None`` for a checkpoint kept elsewhere."""
    folder = checkpoint.parent.parent
    if checkpoint.parent.name == CHECKPOINTS and any((folder / marker).is_file() for marker in RUN_MARKERS):
        return folder
    return None


def runs_newest_first(root: Path) -> list[Path]:
    """The ``last.ckpt`` files of the runs under ``root`` (``ROOT/RUN/checkpoints/last.ckpt``, and an
    older fit's ``ROOT/lightning_logs/version_N/...``), the most recently written first."""
    found = [*root.glob(f"*/{CHECKPOINTS}/{LAST}"),
             *root.glob(f"lightning_logs/version_*/{CHECKPOINTS}/{LAST}")]
    stamped = []
    for path in found:
        try:
            stamped.append((path.stat().st_mtime_ns, str(path), path))
        except FileNotFoundError:  # gone since it was listed
            continue
    return [path for *_, path in sorted(stamped, reverse=True)]


def holds_checkpoint(folder: Path) -> bool:
    """Whether any checkpoint was written under ``folder``."""
    return any(folder.rglob("*.ckpt"))


class RunLogger(TensorBoardLogger):
    """TensorBoard logging into a run folder ``SAVE_DIR/NAME``, in place of Lightning's
    ``SAVE_DIR/lightning_logs/version_N``.

    ``name`` fixes the folder (a resumed run's, ``--run_name``, ``RUN/test``); without it rank zero
    claims ``proposed`` (:func:`claim`) when the folder is first needed, after the process group is
    up. :attr:`created` says whether this process made the folder: a failed command removes only
    what it created (:meth:`discard_if_empty`).
    """

    def __init__(self, save_dir: str | Path, name: str | None = None, proposed: str = "run") -> None:
        super().__init__(save_dir=str(save_dir), name="", version=name)
        self.proposed = proposed
        self.created = False
        self._ensured = False

    @property
    def version(self) -> str:
        if self._version is None:
            if rank_zero_only.rank != 0:
                return PENDING
            self._version = claim(Path(self.save_dir), self.proposed).name
            self.created = True
        elif rank_zero_only.rank == 0 and not self._ensured:
            folder = Path(self.save_dir) / str(self._version)
            if not folder.exists():
                folder.mkdir(parents=True)
                self.created = True
        self._ensured = True
        return str(self._version)

    def discard_if_empty(self) -> bool:
        """Remove the run folder if this process created it and no checkpoint was written into it
        (rank zero; a failed command's leftovers). Whether it was removed."""
        if rank_zero_only.rank != 0 or not self.created or self._version is None:
            return False
        folder = Path(self.save_dir) / str(self._version)
        if not folder.is_dir() or holds_checkpoint(folder):
            return False
        if self._experiment is not None:
            self._experiment.close()
        shutil.rmtree(folder, ignore_errors=True)
        return True
