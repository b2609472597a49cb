"""Checkpoint writing that a kill at any moment cannot corrupt, and checkpoint loading whose every
failure is one line naming the file.

Every command that reads a checkpoint (``fit --ckpt_path``, ``validate``, ``test``, ``predict``
through :class:`AtomicCheckpointIO` and ``NerfCLI``; ``render`` and ``export`` through
:mod:`nerf_lightning.runs.trained`) loads it with :func:`load_checkpoint_file`. A file that is
missing raises :class:`FileNotFoundError`; one that is truncated, corrupt, refused by
``weights_only`` loading or not a Lightning checkpoint raises :class:`CheckpointError`, whose message
is one line: the file, what was expected and, for a refused file, what a user who trusts it can do.
The file itself is only ever read.
"""

from __future__ import annotations

import os
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from nerf_lightning.core.errors import CheckpointError
from nerf_lightning.files import atomic_torch_save

TRUST_OPTION = "--weights_only false"
"""The option of the commands that load checkpoints which turns ``weights_only`` off."""

_MapLocation = str | torch.device | Callable[..., Any] | dict[str, str] | None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _unreadable_detail(error: BaseException) -> str:
    """The useful part of torch's message for a file it could not parse (first sentence, no advice)."""
    text = str(error)
    if "WeightsUnpickler error:" in text:  # the restricted unpickler met bytes that are no pickle opcode
        text = text.split("WeightsUnpickler error:", 1)[1].strip()
    text = re.sub(r"^\[enforce fail at [^\]]*\]\s*\.?\s*", "", text.strip())  # C++ location prefix
    first = text.splitlines()[0] if text else ""
    first = _one_line(first.split(". ", 1)[0].rstrip("."))
    if not isinstance(error, (RuntimeError, pickle.UnpicklingError)):  # EOFError, KeyError: name the type
        return f"{type(error).__name__}: {first}" if first else type(error).__name__
    return first or type(error).__name__


def _refused_global(error: BaseException) -> str | None:
    """The Python object a ``weights_only`` load refused (``posix.system``), or ``None`` when the error
    is not such a refusal (e.g. bytes that are no pickle at all, which the same loader also reports)."""
    if not isinstance(error, pickle.UnpicklingError):
        return None
    found = re.search(r"GLOBAL ([\w.]+)", str(error))
    return found.group(1) if found else None


def load_checkpoint_file(
    path: str | os.PathLike[str], map_location: _MapLocation = "cpu", weights_only: bool | None = True
) -> dict[str, Any]:
    """The Lightning checkpoint (a dict with a ``state_dict``) in the local file ``path``.

    Args:
        path: the checkpoint file; only read.
        map_location: as for :func:`torch.load`.
        weights_only: as for :func:`torch.load` (``None``: torch's default, ``True`` since 2.6):
            only tensors and plain values load, no pickled code runs.

    Raises:
        FileNotFoundError: there is no such file.
        CheckpointError: the file cannot be read, is truncated or corrupt, holds pickled objects that
            ``weights_only`` loading refuses, or is not a Lightning checkpoint. The message is one
            line naming the file and what was expected.
    """
    shown = os.fspath(path)
    file = Path(path)
    if file.is_dir():
        raise CheckpointError(f"{shown}: is a directory; expected a checkpoint file (RUN/checkpoints/*.ckpt)")
    if not file.exists():
        raise FileNotFoundError(f"{shown}: no such checkpoint")
    try:
        size = file.stat().st_size
        with open(file, "rb") as handle:
            checkpoint = torch.load(handle, map_location=map_location, weights_only=weights_only)
    except OSError as error:
        raise CheckpointError(f"{shown}: cannot read the checkpoint ({error.strerror or error})") from error
    except Exception as error:  # torch.load: zip, unpickling and weights_only errors alike
        refused = _refused_global(error)
        if refused is not None:
            trust = "" if weights_only is False else f"; if you trust the file, load it with {TRUST_OPTION}"
            raise CheckpointError(
                f"{shown}: refused by weights-only loading: expected only tensors and plain values, "
                f"found the pickled Python object {refused} (nothing in the file was run){trust}"
            ) from error
        found = ("the file is empty" if size == 0 else
                 f"the file ({size} bytes) is truncated or corrupt ({_unreadable_detail(error)})")
        raise CheckpointError(
            f"{shown}: not a readable checkpoint: expected a complete torch.save archive, but {found}"
        ) from error
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        if isinstance(checkpoint, dict):
            what = f"a dict with keys {', '.join(map(str, list(checkpoint)[:6]))}"
        else:
            what = f"a {type(checkpoint).__name__}"
        raise CheckpointError(
            f"{shown}: not a Lightning checkpoint: expected a dict with a 'state_dict', found {what}"
        )
    if "hyper_parameters" in checkpoint:
        checkpoint["hyper_parameters"] = _current_class_paths(checkpoint["hyper_parameters"])
    return checkpoint


MOVED_CLASSES = {
    "nerf_lightning.samplers.occupancy_grid.OccupancyGrid":
        "nerf_lightning.samplers.occupancy.grid.OccupancyGrid",
}
"""Class paths that checkpoints of earlier versions hold in their component specs, and where those
classes are defined now: a checkpoint keeps loading after a module moves."""


def _current_class_paths(value: Any) -> Any:
    """``value`` (hyperparameters: dicts, lists, plain values) with every moved ``class_path`` updated."""
    if isinstance(value, dict):
        updated = {key: _current_class_paths(item) for key, item in value.items()}
        path = updated.get("class_path")
        if isinstance(path, str) and path in MOVED_CLASSES:
            updated["class_path"] = MOVED_CLASSES[path]
        return type(value)(updated)
    if isinstance(value, list):
        return [_current_class_paths(item) for item in value]
    return value


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O whose saves are atomic and durable
    (:func:`~nerf_lightning.files.atomic_torch_save` with the folder ``fsync``-ed: a kill or power loss
    at any moment leaves the previous checkpoint loadable) and whose loads fail with a one-line
    :class:`CheckpointError` (see :func:`load_checkpoint_file`). Local files only.

    A save on a file system without room for the checkpoint's tensors is refused before anything is
    written, and one that fills the disk while writing removes its partial file; both raise
    :class:`~nerf_lightning.files.DiskFullError` (the checkpoint, the bytes it needs, the bytes free),
    which ends the fit (the command's exit code 4) with the previous checkpoint of that name intact:
    training does not go on when nothing can be saved."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | os.PathLike[str], storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO does not take storage_options")
        atomic_torch_save(checkpoint, path, sync_dir=True)

    def load_checkpoint(
        self,
        path: str | os.PathLike[str],
        map_location: _MapLocation = lambda storage, loc: storage,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        return load_checkpoint_file(path, map_location=map_location, weights_only=weights_only)
