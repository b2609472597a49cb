"""How ``nerf-lightning data cache`` shows a build going: images done of the split's, images per second and
the time left, on one line of stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


def _clock_text(seconds: float) -> str:
    minutes, second = divmod(round(seconds), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02d}:{second:02d}" if hours else f"{minute}:{second:02d}"


class CacheProgress:
    """``(split, done, total)`` -> ``data cache: train 37/150 images, 4.2 images/s, 0:27 left`` on ``stream``.

    On a terminal the line is redrawn in place as each image is written and ends when the split's last
    is; elsewhere (a log file, a pipeline's stage) a line is written at most every ``every_s`` seconds,
    and for the last image. The rate counts the images this process prepared (a continued build's earlier
    ones left out), from the first.
    """

    def __init__(self, stream: TextIO | None = None, every_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.every_s = every_s
        self.clock = clock
        self._terminal = self.stream.isatty()
        self._start: tuple[str, int, float] | None = None  # split, images done, time at its first call
        self._shown = -float("inf")

    def __call__(self, split: str, done: int, total: int) -> None:
        now = self.clock()
        if self._start is None or self._start[0] != split:
            self._start, self._shown = (split, done, now), -float("inf")
        _, first, started = self._start
        last = done >= total
        if not (self._terminal or last or now - self._shown >= self.every_s):
            return
        self._shown = now
        line = f"data cache: {split} {done}/{total} images"
        made, spent = done - first, now - started
        if made > 0 and spent > 0:
            rate = made / spent
            line += f", {rate:.1f} images/s"
            line += f", {_clock_text(spent)} taken" if last else \
                f", {_clock_text((total - done) / rate)} left"
        if self._terminal:
            self.stream.write(f"\r\033[K{line}" + ("\n" if last else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
