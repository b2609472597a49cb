"""This process's memory as Linux reports it: the peak of its anonymous resident memory while a call
runs (sampled by a thread), and the file a tensor's memory is mapped from (``/proc/self/maps``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from torch import Tensor

T = TypeVar("T")
SAMPLE_SECONDS = 0.001


def rss_anon() -> int:
    """Bytes of anonymous resident memory of this process (``RssAnon``: heap and anonymous maps, not
    the page cache of mapped files)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no RssAnon line")


def peak_anon_growth(call: Callable[[], T]) -> tuple[T, int]:
    """``call()``'s result and how far anonymous resident memory rose above its value at the start while
    it ran (sampled every millisecond by a thread; the sampler runs whenever the call releases the GIL,
    as decoding, hashing, tensor operations and file writes do)."""
    start = rss_anon()
    peak = [start]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_anon())
            time.sleep(SAMPLE_SECONDS)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        result = call()
    finally:
        stop.set()
        sampler.join()
    return result, max(peak[0], rss_anon()) - start


def mapped_file(tensor: Tensor) -> Path | None:
    """The file the memory of ``tensor``'s first element is mapped from, ``None`` for anonymous memory."""
    address = tensor.data_ptr()
    with open("/proc/self/maps", encoding="utf-8") as maps:
        for line in maps:
            parts = line.split(maxsplit=5)
            low, high = (int(value, 16) for value in parts[0].split("-"))
            if low <= address < high:
                return Path(parts[5].strip()) if len(parts) == 6 and parts[5].startswith("/") else None
    return None
