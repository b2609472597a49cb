"""Where the dataset checks shared by the loaders and ``nerf-lightning data validate`` send what they find.

The loaders and the validator run the same check functions (each raises one :class:`DatasetError`),
through a :class:`Problems`:

* strict (the loaders, the default): :meth:`Problems.check` lets the first error propagate
  unchanged, so loading stops at the first problem;
* collect (the validator): :meth:`Problems.check` records the error and returns ``None``; the caller
  leaves out what the failed check covered (the rest of the file, or one frame) and carries on, so
  every problem is found in one pass. An error whose message was already recorded (a top-level field
  that every frame reads, a file read for several splits) is recorded once.

Either way the message is the one the check raised, so the validator reports exactly what the
loader would.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from nerf_lightning.scenes.errors import DatasetError

P = ParamSpec("P")
T = TypeVar("T")


class Problems:
    """Raise (strict) or collect (``collect=True``) the :class:`DatasetError` s of dataset checks.

    Attributes:
        collect: whether errors are collected rather than raised.
        errors: collected errors, each distinct message once, in the order found.
        warnings: collected warnings (things a loader accepts but skips), each distinct message once.
    """

    def __init__(self, *, collect: bool = False) -> None:
        self.collect = collect
        self.errors: list[DatasetError] = []
        self.warnings: list[DatasetError] = []
        self._seen: set[str] = set()

    def check(self, check: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T | None:
        """``check(*args, **kwargs)``; in collect mode a :class:`DatasetError` is recorded and ``None``
        returned instead (so checks used here must not return ``None`` themselves)."""
        if not self.collect:
            return check(*args, **kwargs)
        try:
            return check(*args, **kwargs)
        except DatasetError as error:
            self.report(error)
            return None

    def report(self, error: DatasetError) -> None:
        """Raise ``error`` (strict) or record it unless the same message was recorded (collect)."""
        if not self.collect:
            raise error
        if str(error) not in self._seen:
            self._seen.add(str(error))
            self.errors.append(error)

    def warn(self, details: list[DatasetError], summary: str, *, stacklevel: int = 2) -> None:
        """Something loading accepts but skips: one ``UserWarning`` with ``summary`` (strict), or each
        of ``details`` as a one-line warning (collect). ``stacklevel`` counts from the caller."""
        if not self.collect:
            warnings.warn(summary, UserWarning, stacklevel=stacklevel + 1)
            return
        for detail in details:
            if str(detail) not in self._seen:
                self._seen.add(str(detail))
                self.warnings.append(detail)
