"""Wall time per stage of a training step, measured only when someone asks for it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` (a no-op on the CPU, where work is not queued)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


class StageTimer:
    """Accumulates wall seconds per named stage (``sampling``, ``field``, ``render``, ...).

    Disabled (the default) every ``stage`` is a no-op, so the hot loop pays nothing and never
    waits for the device. Enabled, each stage boundary synchronises the device so the time of
    a stage is the time its kernels took, not the time it took to queue them: that is the one
    place the training loop reads back from the device on purpose.
    """

    def __init__(self) -> None:
        self.enabled = False
        self.seconds: dict[str, float] = {}

    @contextmanager
    def stage(self, name: str, device: torch.device) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        synchronize(device)
        start = time.perf_counter()
        try:
            yield
        finally:
            synchronize(device)
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def pop(self) -> dict[str, float]:
        """The seconds accumulated since the last ``pop``, per stage; resets them."""
        seconds, self.seconds = self.seconds, {}
        return seconds
