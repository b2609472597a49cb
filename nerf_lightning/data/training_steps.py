"""The training loader: the batch positions of an epoch, resumable mid-epoch the way Lightning expects."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader


class TrainingSteps(DataLoader):
    """A ``DataLoader`` over an epoch's batch positions ``0 .. len(dataset) - 1`` (``dataset`` is a
    ``range``) that resumes where a checkpoint left it.

    The rays of a step do not depend on what this loader yields: the data module draws them from the
    fit loop's global batch position, which the checkpoint restores. What a resumed epoch needs from
    the loader is its length: as many batches as the interrupted epoch had left. Lightning asks every
    training loader for that through ``state_dict`` / ``load_state_dict`` (a loader without them is
    restarted from its first batch, with a warning that the results may be unreliable); here the state
    is the number of this epoch's batches handed out, and the next iteration after
    :meth:`load_state_dict` starts after them. An epoch that had ended starts anew.

    Lightning fetches nothing ahead from a loader whose length it knows (this one), so a checkpoint
    written at the end of batch ``k`` of an epoch records ``k + 1`` batches handed out: the position
    the fit loop continues from.

    Args:
        dataset: the epoch's batch positions, ``range(steps_per_epoch)``.
        **kwargs: the ``DataLoader``'s (``batch_size=None`` unless given: each position is a batch).
    """

    def __init__(self, dataset: range, **kwargs: Any) -> None:
        kwargs.setdefault("batch_size", None)
        super().__init__(dataset, **kwargs)
        self._handed_out = 0
        self._resume_at = 0

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # a generator, as DataLoader's iterators
        start, self._resume_at = self._resume_at, 0
        if start >= len(self):  # the saved epoch had ended: this one starts at its first batch
            start = 0
        iterator = super().__iter__()
        for _ in range(start):
            next(iterator)
        self._handed_out = start
        for batch in iterator:
            self._handed_out += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        """``{"epoch_position": batches of the current epoch handed out}``."""
        return {"epoch_position": self._handed_out}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """The next iteration starts at ``state_dict["epoch_position"]`` (from the first batch when that
        is the end of an epoch)."""
        self._resume_at = int(state_dict.get("epoch_position", 0))
