"""Exceptions that :mod:`nerf_lightning.commands.errors` turns into one line and an exit code, defined
apart from the Lightning-based modules that raise them: reporting them must not import Lightning,
which the commands beside Lightning's (``data validate``, ``data cache``...) otherwise never load.

The first two stay importable from where they are raised (:mod:`nerf_lightning.system.module`,
:mod:`nerf_lightning.runs.checkpoint_io`).
"""

from __future__ import annotations


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; the run stops before the step is applied."""


class CheckpointError(Exception):
    """A checkpoint file cannot be used; the message is one line naming the file."""


class FrameMismatchError(ValueError):
    """A checkpoint was trained in another training frame (``data.normalise``) than the data module
    would give it: its field is meaningless there. The message is one line."""


class RankLostError(RuntimeError):
    """A process of a data-parallel run is gone (killed, crashed, its machine lost); the message is one
    line naming it and how to resume."""
