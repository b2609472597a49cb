"""Full disks: a write that found no space left (``ENOSPC``) or hit the user's quota (``EDQUOT``) becomes
one :class:`DiskFullError`, whose message is one line naming the file, the bytes the write needed (when
known) and the bytes free on that file system (``shutil.disk_usage``).

Where it comes from:

* the atomic writers of :mod:`.atomic` raise it themselves, after removing their temporary file (the
  previous file of that name is untouched); :func:`atomic_torch_save` checks the free space first, so a
  checkpoint that cannot fit is refused before anything is written;
* :func:`find_disk_full` finds one in any other error (an ``OSError`` with either errno anywhere in its
  ``__cause__``/``__context__`` chain) for the command layer, which prints its line and exits with a
  code of its own (``nerf_lightning.commands.errors``). Such a writer (TensorBoard's event writer, a
  library writing a file itself) does not name its file in the error; the file is then the one the
  writer had open for writing closest to where the error was raised (:func:`_file_in_traceback`).

torch's zip writer reports ``ENOSPC`` as a ``RuntimeError`` (``unexpected pos``), keeping the ``OSError``
of a Python file object only as its ``__context__``, and none at all when it writes a path itself: a
``RuntimeError`` of a write on a file system with less than :data:`NEARLY_FULL` bytes free is therefore
taken for a full disk too (:func:`disk_full_errno`'s ``folder``).
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import traceback
from pathlib import Path
from types import TracebackType
from typing import Any

from nerf_lightning.files.naming import target_of_temporary

DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errnos of a write that found no room: no space left on the device, the user's quota exceeded."""
NEARLY_FULL = 1 << 20
"""Free bytes below which a write's ``RuntimeError`` is taken for a full disk: a write that failed for
lack of space leaves (almost) nothing free behind it."""
_PATH_NAMES = ("filename", "file_name", "path", "target")
_FRAMES_SEARCHED = 8


def free_bytes(path: str | os.PathLike[str]) -> int | None:
    """Bytes free (to this user) on the file system of ``path`` or of its nearest existing folder;
    ``None`` when none can be asked."""
    place = Path(os.path.abspath(path))
    for candidate in (place, *place.parents):
        try:
            return shutil.disk_usage(candidate).free
        except OSError:
            continue
    return None


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    exponent = min((count.bit_length() - 1) // 10, 4)  # 1 for KiB ... 4 for TiB
    return f"{count / 1024 ** exponent:.1f} {'KMGT'[exponent - 1]}iB ({count:,} bytes)"


class DiskFullError(OSError):
    """A write found no space left on its file system (``ENOSPC``) or exceeded the user's quota
    (``EDQUOT``). ``str()`` is one line: the file, the bytes needed, the bytes free, what was kept.

    Attributes:
        path: the file (or folder) being written, under its final name; ``None`` when unknown.
        needed: the bytes the write needed: exact when ``needed_exact``, else a lower bound (the tensors
            of a checkpoint, what was written before the disk filled); ``None`` when unknown.
        free: the bytes free on the file system of ``path`` after the write was given up.
        kept: the writer was atomic: any previous file of that name is as it was, nothing partial is left.
    """

    def __init__(self, path: str | os.PathLike[str] | None, *, code: int = errno.ENOSPC,
                 needed: int | None = None, needed_exact: bool = True, free: int | None = None,
                 kept: bool = True) -> None:
        super().__init__(code, os.strerror(code), None if path is None else os.fspath(path))
        self.path = None if path is None else Path(path)
        self.needed, self.needed_exact, self.free, self.kept = needed, needed_exact, free, kept

    def __reduce__(self) -> tuple[Any, ...]:  # OSError's pickles its args, which this __init__ does not take
        return (_restore, (self.path, self.errno, self.needed, self.needed_exact, self.free, self.kept))

    def __str__(self) -> str:
        what = "disk quota exceeded" if self.errno == errno.EDQUOT else "no space left on device"
        line = f"{self.path}: {what}" if self.path is not None else f"{what} (the error names no file)"
        sizes = []
        if self.needed is not None:
            sizes.append(f"writing it needs {'' if self.needed_exact else 'more than '}{_size(self.needed)}")
        if self.free is not None:
            quota = " (the quota may allow less)" if self.errno == errno.EDQUOT else ""
            sizes.append(f"{_size(self.free)} free there{quota}")
        if sizes:
            line += ": " + ", ".join(sizes)
        if self.kept:
            line += "; any previous file of that name is kept and no partial file is left"
        return line


def _restore(path: Path | None, code: int, needed: int | None, needed_exact: bool, free: int | None,
             kept: bool) -> DiskFullError:
    return DiskFullError(path, code=code, needed=needed, needed_exact=needed_exact, free=free, kept=kept)


def error_chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it was raised from or while handling, outermost first, as a traceback
    shows them (a context that ``raise ... from None`` hid is left out)."""
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and all(current is not seen for seen in found):
        found.append(current)
        hidden = current.__suppress_context__ and current.__cause__ is None
        current = current.__cause__ if current.__cause__ is not None or hidden else current.__context__
    return found


def disk_full_errno(error: BaseException, folder: str | os.PathLike[str] | None = None) -> int | None:
    """``ENOSPC`` or ``EDQUOT`` when ``error`` (an ``Exception``: an interrupt never is) is a write
    that found no room: an ``OSError`` with that errno in its chain, or, given the ``folder`` written
    to, a ``RuntimeError`` while less than :data:`NEARLY_FULL` bytes are free there (torch's zip writer:
    the module docstring says why). ``None`` otherwise."""
    if not isinstance(error, Exception):
        return None
    for each in error_chain(error):
        if isinstance(each, OSError) and each.errno in DISK_FULL_ERRNOS:
            return each.errno
    if folder is not None and isinstance(error, RuntimeError):
        free = free_bytes(folder)
        if free is not None and free < NEARLY_FULL:
            return errno.ENOSPC
    return None


def check_space(path: str | os.PathLike[str], needed: int, *, exact: bool = True) -> None:
    """Raise :class:`DiskFullError` (nothing written) when the file system of ``path`` has fewer than
    ``needed`` bytes free: a write that cannot fit is refused before it starts. The file is written
    beside the old one before replacing it, so the old one's size does not count as free."""
    free = free_bytes(path)
    if free is not None and free < needed:
        raise DiskFullError(path, needed=needed, needed_exact=exact, free=free)


def _named(value: object) -> str | None:
    """A path from a variable's value: a path-like, or the name of a file object open for writing."""
    if isinstance(value, (str, bytes, os.PathLike)):
        return os.fsdecode(value) if value else None
    if isinstance(value, io.IOBase):
        name, mode = getattr(value, "name", None), getattr(value, "mode", "")
        if isinstance(name, (str, bytes)) and isinstance(mode, str) and any(m in mode for m in "wax+"):
            return os.fsdecode(name)
    return None


def _file_in_traceback(traceback_: TracebackType | None) -> Path | None:
    """The file an error without a filename was writing: in the innermost frames of its traceback, a file
    object open for writing, else a variable named like a path (``filename``, ``path``...). TensorBoard's
    event writer, Pillow and ``shutil`` each hold their open file there."""
    frames = [frame for frame, _ in traceback.walk_tb(traceback_)][::-1][:_FRAMES_SEARCHED]
    for frame in frames:
        for value in frame.f_locals.values():
            if isinstance(value, io.IOBase) and (name := _named(value)):
                return Path(name)
    for frame in frames:
        for key in _PATH_NAMES:
            if key in frame.f_locals and (name := _named(frame.f_locals[key])):
                return Path(name)
    return None


def find_disk_full(error: BaseException) -> DiskFullError | None:
    """The :class:`DiskFullError` behind ``error`` (itself, or in its cause/context chain), or one made
    from the innermost ``OSError`` of the chain with errno ``ENOSPC``/``EDQUOT``, naming the file from the
    error or its traceback (module docstring); ``None`` when ``error`` is not about a full disk. Of
    several, the innermost: the write that failed first (e.g. a checkpoint, before the failed run's
    record could not be written either)."""
    if not isinstance(error, Exception):
        return None
    chain = error_chain(error)
    for each in reversed(chain):
        if isinstance(each, DiskFullError):
            return each
    for each in reversed(chain):
        if isinstance(each, OSError) and each.errno in DISK_FULL_ERRNOS:
            named = _named(each.filename) if each.filename is not None else None
            path = Path(named) if named else _file_in_traceback(each.__traceback__)
            if path is not None:
                path = target_of_temporary(path)
            free = free_bytes(path) if path is not None else None
            return DiskFullError(path, code=each.errno, free=free, kept=False)
    return None
