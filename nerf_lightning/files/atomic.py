"""Atomic writes: a file or folder is either its old self or completely the new one, never half written.

Every file the package writes goes through here. The recipe is the same for all of them:

1. the new content is written under a temporary name *in the target's folder* (``rename`` is only
   atomic within one file system, and the folder is the one place certain to be on the target's);
2. it is flushed and ``fsync``-ed (``fsync=True``, the default), so that the rename below cannot reach
   the disk before the data it names: after a crash the target is the old file or the new one, not an
   empty or torn file under the new name;
3. ``os.replace`` puts it in place (atomic on POSIX: a reader sees the old or the new file); with
   ``sync_dir=True`` the folder is ``fsync``-ed too, so the rename itself survives a power loss (wanted
   where a later step relies on the new file being there, e.g. checkpoints);
4. on *any* failure, ``KeyboardInterrupt`` included, the temporary file is removed and the target is
   left as it was. Only a process killed outright (``SIGKILL``, power loss) can leave a temporary file
   behind; its name (:func:`temporary_name`) says what it is, and :func:`is_temporary` recognises it.

New files get the usual permissions (``0o666`` less the umask), not ``mkstemp``'s private ``0o600``:
outputs may be shared. Forms: :func:`atomic_write` (a file object), :func:`atomic_path` (a path for a
writer that opens the file itself: ffmpeg, ``torch.jit.save``, ``os.link``), :class:`PendingFile` (the
same, for a writer whose opening and closing are separate calls, e.g. a video written frame by frame),
the one-call :func:`atomic_write_bytes`, :func:`atomic_write_text`, :func:`atomic_write_json` and
:func:`atomic_torch_save`, and :func:`atomic_folder` for a folder of files published at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

TEMPORARY_MARK = ".tmp-"
"""Part of every temporary name (``.NAME.tmp-PID-RANDOM.SUFFIX``); see :func:`is_temporary`."""
_NEW_FILE_MODE = 0o666  # less the umask, as open() creates files


class FolderExistsError(FileExistsError):
    """:func:`atomic_folder` found its target already there (another process published it first)."""


def temporary_name(target: Path, kind: str = "tmp") -> Path:
    """A fresh name beside ``target``: ``.{stem}.{kind}-{pid}-{random}{suffix}``.

    Hidden (leading dot) so listings and globs skip it; the suffix is kept because some writers pick
    the file type from it (ffmpeg); pid and randomness keep concurrent writers apart.
    """
    return target.with_name(f".{target.stem}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}{target.suffix}")


def is_temporary(name: str) -> bool:
    """Whether a file or folder name is one :func:`temporary_name` makes (a write in progress or one that
    died)."""
    return name.startswith(".") and TEMPORARY_MARK in name


def fsync_path(path: Path) -> None:
    """Flush a file's (or folder's) data and metadata to disk; opening read-only is enough on POSIX."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some file systems cannot fsync folders; the rename is done anyway
        fsync_path(folder)


class PendingFile:
    """A file written under a temporary name beside ``target``, published by :meth:`commit`.

    Creating one only picks the name (and creates the target's folder); the writer creates the file at
    :attr:`path`. Call :meth:`commit` when it is complete or :meth:`discard` to give it up; exactly one
    of them, once.

    Args:
        target: the file to replace (or create).
        fsync: flush the file to disk before the rename (see the module docstring).
        sync_dir: also ``fsync`` the folder after the rename.
    """

    def __init__(self, target: str | os.PathLike[str], *, fsync: bool = True, sync_dir: bool = False) -> None:
        self.target = Path(target)
        self.fsync, self.sync_dir = fsync, sync_dir
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.path = temporary_name(self.target)

    def commit(self) -> Path:
        """Flush (``fsync``), rename onto the target; returns the target. The temporary file is removed
        if this fails."""
        try:
            if self.fsync:
                fsync_path(self.path)
            os.replace(self.path, self.target)
        except BaseException:
            self.discard()
            raise
        if self.sync_dir:
            _sync_folder(self.target.parent)
        return self.target

    def discard(self) -> None:
        """Remove the temporary file, if any; the target is untouched."""
        with contextlib.suppress(OSError):
            self.path.unlink()


@contextmanager
def atomic_path(
    target: str | os.PathLike[str], *, fsync: bool = True, sync_dir: bool = False
) -> Iterator[Path]:
    """A temporary path beside ``target`` for the block to create the file at; renamed onto ``target``
    when the block ends normally, removed when it raises.

    >>> with atomic_path(out) as temporary:
    ...     torch.jit.save(module, str(temporary))
    """
    pending = PendingFile(target, fsync=fsync, sync_dir=sync_dir)
    try:
        yield pending.path
    except BaseException:
        pending.discard()
        raise
    pending.commit()


@contextmanager
def atomic_write(
    target: str | os.PathLike[str],
    mode: str = "wb",
    *,
    encoding: str | None = None,
    fsync: bool = True,
    sync_dir: bool = False,
) -> Iterator[IO[Any]]:
    """A file object on a new temporary file beside ``target`` (``mode`` ``"wb"`` or ``"w"``); closed,
    flushed and renamed onto ``target`` when the block ends normally, removed when it raises.

    >>> with atomic_write(path) as handle:
    ...     np.savez(handle, **arrays)
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
    pending = PendingFile(target, fsync=False, sync_dir=sync_dir)  # fsync'd here, on the open descriptor
    try:
        descriptor = os.open(pending.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _NEW_FILE_MODE)
        if mode == "w" and encoding is None:
            encoding = "utf-8"
        with os.fdopen(descriptor, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
    except BaseException:
        pending.discard()
        raise
    pending.commit()


def atomic_write_bytes(data: bytes, target: str | os.PathLike[str], **options: bool) -> Path:
    """Write ``data`` to ``target`` atomically (``options``: ``fsync``, ``sync_dir``); returns the path."""
    with atomic_write(target, "wb", **options) as handle:
        handle.write(data)
    return Path(target)


def atomic_write_text(
    text: str, target: str | os.PathLike[str], *, encoding: str = "utf-8", **options: bool
) -> Path:
    """Write ``text`` to ``target`` atomically (``options``: ``fsync``, ``sync_dir``); returns the path."""
    with atomic_write(target, "w", encoding=encoding, **options) as handle:
        handle.write(text)
    return Path(target)


def atomic_write_json(
    value: Any, target: str | os.PathLike[str], *, indent: int | None = 2, **options: bool
) -> Path:
    """``value`` as JSON (objects JSON cannot hold as their ``str``), newline-terminated, written
    atomically; returns the path. The text is made before the file is touched, so a value that cannot be
    serialised leaves no trace."""
    return atomic_write_text(json.dumps(value, indent=indent, default=str) + "\n", target, **options)


def atomic_torch_save(obj: Any, target: str | os.PathLike[str], **options: bool) -> Path:
    """``torch.save`` to ``target`` atomically (``options``: ``fsync``, ``sync_dir``); returns the path.

    A process killed at any moment leaves the previous file loadable (``tests/runs/test_runs.py`` kills one
    mid-save).
    """
    import torch  # here, so that the rest of this module stays importable without torch's start-up cost

    with atomic_write(target, "wb", **options) as handle:
        torch.save(obj, handle)
    return Path(target)


def _fsync_tree(folder: Path) -> None:
    """``fsync`` every file and folder under ``folder`` (itself last), so a rename of it publishes data
    that is on disk."""
    for parent, folders, files in os.walk(folder, topdown=False):
        for name in files:
            fsync_path(Path(parent, name))
        for name in folders:
            _sync_folder(Path(parent, name))
    _sync_folder(folder)


@contextmanager
def atomic_folder(
    target: str | os.PathLike[str], *, replace: bool = False, fsync: bool = True
) -> Iterator[Path]:
    """A new empty folder beside ``target`` for the block to fill; renamed to ``target`` when the block
    ends normally, deleted (with everything in it) when it raises.

    Args:
        target: the folder to publish.
        replace: an existing ``target`` is replaced: moved aside, the new folder renamed into place, the
            old one deleted (put back if the rename fails). Otherwise an existing non-empty ``target`` is
            kept and :class:`FolderExistsError` raised after this folder is deleted: whoever published
            first wins (e.g. two processes building the same cache entry).
        fsync: flush every file of the folder to disk before the rename.

    Raises:
        FolderExistsError: ``target`` exists and ``replace`` is false.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_name(target)
    temporary.mkdir()  # the umask's permissions, unlike mkdtemp's 0o700: caches and scenes may be shared
    old: Path | None = None
    try:
        yield temporary
        if fsync:
            _fsync_tree(temporary)
        if replace and target.exists():
            old = temporary_name(target, "old")
            os.replace(target, old)
        try:
            os.rename(temporary, target)
        except OSError as error:
            if old is not None:
                os.replace(old, target)  # put the previous folder back
                old = None
            if not replace and target.is_dir():
                raise FolderExistsError(f"{target}: already exists; this copy was discarded") from error
            raise
        if fsync:
            _sync_folder(target.parent)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
