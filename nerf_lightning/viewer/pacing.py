"""How large and how often viewer frames are: measured, not guessed.

:class:`PixelBudget` learns the seconds a frame costs per pixel (render, colouring and JPEG
encoding together) and answers how many pixels fit a frame time; :class:`TimeShare` spaces frames
so that rendering takes at most a given share of the wall time. Together they keep training's
throughput while a browser watches: a frame of ``c`` seconds is followed by at least
``c (1 - share) / share`` seconds of training.
"""

from __future__ import annotations

import time


class PixelBudget:
    """Pixels per frame that fit a frame time, from an exponential average of measured frames.

    Args:
        min_pixels: never fewer (a frame this small is cheap on any device and still readable).
        initial_seconds_per_pixel: the guess before the first frame, on the slow side (a small CPU
            rendering the demo scene), so the first frame is small and quick; measured frames
            replace it.
        smoothing: weight of the newest frame.
    """

    def __init__(self, min_pixels: int = 24 * 24, initial_seconds_per_pixel: float = 1e-5,
                 smoothing: float = 0.5) -> None:
        self.min_pixels = min_pixels
        self.seconds_per_pixel = initial_seconds_per_pixel
        self.smoothing = smoothing

    def pixels(self, frame_seconds: float) -> int:
        """Pixels a frame of ``frame_seconds`` affords (at least ``min_pixels``)."""
        return max(self.min_pixels, int(frame_seconds / max(self.seconds_per_pixel, 1e-12)))

    def observe(self, pixels: int, seconds: float) -> None:
        """Learn from a frame of ``pixels`` pixels that took ``seconds``."""
        rate = seconds / max(pixels, 1)
        self.seconds_per_pixel = (1 - self.smoothing) * self.seconds_per_pixel + self.smoothing * rate


class TimeShare:
    """Allows work only while it keeps within ``share`` of the wall time.

    After work of ``c`` seconds the next is allowed ``c (1 - share) / share`` seconds later, so
    over any stretch the work takes at most ``share`` of the time (plus one frame).
    """

    def __init__(self, share: float, clock=time.perf_counter) -> None:
        if not 0.0 < share <= 1.0:
            raise ValueError(f"viewer: the rendering share must be in (0, 1], got {share}")
        self.share = share
        self.clock = clock
        self._next_allowed = 0.0

    def allowed(self) -> bool:
        """Whether work may start now."""
        return self.clock() >= self._next_allowed

    def spent(self, seconds: float) -> None:
        """Record work that just took ``seconds``."""
        self._next_allowed = self.clock() + seconds * (1.0 - self.share) / self.share
