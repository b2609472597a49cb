"""A progress bar per stage of ``data process``, on stderr, only where someone watches it.

tqdm (already a dependency, Lightning's progress bar uses it) draws the bars. They are shown only when
stderr is a terminal: in a log file (the pipeline's stage logs, CI) a bar is a stream of carriage
returns that buries the command's own lines, and the stage lines on stdout already say what ran.
pycolmap's steps report no progress of their own (except mapping, one call per registered photo), so
their bar shows the elapsed time, refreshed by a small thread, so that a long step visibly lives.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

from tqdm import tqdm

REFRESH_S = 0.5


def show_progress(enabled: bool | None) -> bool:
    """``enabled``, or when ``None`` whether stderr is a terminal."""
    if enabled is not None:
        return enabled
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


class StageBar:
    """One stage's bar: :meth:`advance` by items; a no-op when hidden."""

    def __init__(self, bar: tqdm | None, total: int | None) -> None:
        self._bar = bar
        self._total = total
        self._count = 0

    def advance(self, count: int = 1) -> None:
        """Count ``count`` more items (never past the total: mapping may retry a photo)."""
        if self._bar is None:
            return
        if self._total is not None:
            count = min(count, self._total - self._count)
        if count > 0:
            self._count += count
            self._bar.update(count)


@contextlib.contextmanager
def stage_bar(name: str, total: int | None = None, *, unit: str = "photo",
              enabled: bool | None = None) -> Iterator[StageBar]:
    """A bar for stage ``name`` over ``total`` items (``None``: elapsed time only), removed when the
    stage ends (the stage's own line follows on stdout)."""
    if not show_progress(enabled):
        yield StageBar(None, total)
        return
    bar_format = "{desc}: {elapsed}" if total is None else None
    bar = tqdm(total=total, desc=name, unit=unit, file=sys.stderr, leave=False, dynamic_ncols=True,
               bar_format=bar_format)
    stop = threading.Event()

    def tick() -> None:  # tqdm redraws only on updates; a pycolmap step has none for minutes
        while not stop.wait(REFRESH_S):
            bar.refresh()

    ticker = threading.Thread(target=tick, name=f"progress-{name}", daemon=True)
    ticker.start()
    try:
        yield StageBar(bar, total)
    finally:
        stop.set()
        ticker.join()
        bar.close()
