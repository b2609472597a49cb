"""glibc's allocator told to keep freed memory mapped, set once per process by the Lightning commands."""

from __future__ import annotations

import ctypes
import sys

MMAP_THRESHOLD = 1 << 30
"""Blocks up to this size come from the heap instead of a mapping of their own."""

TRIM_THRESHOLD = (1 << 31) - 1
"""Free memory at the heap's top kept mapped, up to this size.

``mallopt`` takes a C int, and ctypes masks a larger Python int to its low 32 bits, so the value
must fit in 31 bits: ``1 << 34`` would become 0, a threshold that returns the heap's free top to the
OS after every free.
"""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # malloc.h


def keep_freed_memory() -> None:
    """Stop glibc from returning large blocks to the OS after every training step.

    Each step allocates and frees tensors of tens of MB; by default glibc maps and unmaps them
    each time, and writing to freshly mapped pages page-faults. Does nothing off Linux.
    """
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # another C library (musl)
        return
    libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
