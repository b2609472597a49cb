"""A real small file system for the tests of full disks: a tmpfs of a chosen size, mounted with
``mount(2)`` itself (no ``mount`` process: a test that uses one need not be ``slow``), and a way to fill
it to a chosen number of free bytes.

Mounting needs root (``CAP_SYS_ADMIN``); elsewhere the test is skipped, saying so.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

_MNT_DETACH = 2
PAGE = 4096
"""tmpfs counts space in pages."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)  # this process's own symbols, libc's among them


@contextmanager
def small_filesystem(folder: Path, size: int) -> Iterator[Path]:
    """``folder`` (created) with a tmpfs of ``size`` bytes mounted on it while the block runs; unmounted
    afterwards, whatever the block did. Skips the test when mounting is not permitted here."""
    folder.mkdir(parents=True, exist_ok=True)
    libc = _libc()
    if not hasattr(libc, "mount"):
        pytest.skip("no mount(2) on this system: the full-disk tests need a real small file system")
    if libc.mount(b"tmpfs", os.fsencode(folder), b"tmpfs", 0, f"size={size},mode=0755".encode()) != 0:
        problem = os.strerror(ctypes.get_errno())
        pytest.skip(f"cannot mount a {size}-byte tmpfs at {folder} ({problem}): needs root (CAP_SYS_ADMIN)")
    try:
        yield folder
    finally:
        if libc.umount2(os.fsencode(folder), 0) != 0:  # a file still open in it: detach it lazily
            libc.umount2(os.fsencode(folder), _MNT_DETACH)


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill ``folder``'s file system with one file until no more than ``leave`` bytes are free (to
    ``PAGE`` bytes); the file."""
    filler = folder / "filler"
    free = shutil.disk_usage(folder).free
    with open(filler, "ab") as handle:
        handle.write(b"\0" * (max(free - leave, 0) // PAGE * PAGE))
    return filler
