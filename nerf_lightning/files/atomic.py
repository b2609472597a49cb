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
   A failure because the disk (or the user's quota) is full is raised as
   :class:`~nerf_lightning.files.space.DiskFullError`, one line naming the target, the bytes needed and
   the bytes free once the temporary file is gone; :func:`atomic_torch_save` checks the free space first.

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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from nerf_lightning.files.naming import TEMPORARY_MARK, is_temporary, temporary_name
from nerf_lightning.files.space import DiskFullError, disk_full_errno, free_bytes
from nerf_lightning.files.space import check_space as _check_space

__all__ = ["TEMPORARY_MARK", "DiskFullError", "FolderExistsError", "PendingFile", "atomic_folder",
           "atomic_path", "atomic_torch_save", "atomic_write", "atomic_write_bytes", "atomic_write_json",
           "atomic_write_text", "fsync_path", "is_temporary", "temporary_name", "torch_save_size"]

_NEW_FILE_MODE = 0o666  # less the umask, as open() creates files


class FolderExistsError(FileExistsError):
    """:func:`atomic_folder` found its target already there (another process published it first)."""


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
    :attr:`path`. Call :meth:`commit` when it is complete or :meth:`discard` (or :meth:`discard_after`
    an error) to give it up; exactly one of them, once.

    Args:
        target: the file to replace (or create).
        fsync: flush the file to disk before the rename (see the module docstring).
        sync_dir: also ``fsync`` the folder after the rename.
        size: the bytes the new file takes, when known: named by the :class:`DiskFullError` of a full disk.
        size_exact: ``size`` is exact; otherwise a lower bound (e.g. the tensors of a ``torch.save``).
    """

    def __init__(self, target: str | os.PathLike[str], *, fsync: bool = True, sync_dir: bool = False,
                 size: int | None = None, size_exact: bool = True) -> None:
        self.target = Path(target)
        self.fsync, self.sync_dir = fsync, sync_dir
        self.size, self.size_exact = size, size_exact
        self.target.parent.mkdir(parents=True, exist_ok=True)
        self.path = temporary_name(self.target)

    def commit(self) -> Path:
        """Flush (``fsync``), rename onto the target; returns the target. The temporary file is removed
        if this fails (:meth:`discard_after`)."""
        try:
            if self.fsync:
                fsync_path(self.path)
            os.replace(self.path, self.target)
        except BaseException as error:
            full = self.discard_after(error)
            if full is None:
                raise
            raise full from error
        if self.sync_dir:
            _sync_folder(self.target.parent)
        return self.target

    def discard(self) -> None:
        """Remove the temporary file, if any; the target is untouched."""
        with contextlib.suppress(OSError):
            self.path.unlink()

    def discard_after(self, error: BaseException) -> DiskFullError | None:
        """:meth:`discard`, after the write failed with ``error``; the :class:`DiskFullError` to raise in
        its place when the disk (or quota) was full, naming the target, the bytes needed (:attr:`size`,
        else more than what was written) and the bytes free once the temporary file is gone."""
        code = disk_full_errno(error, self.target.parent)
        written = _bytes_in(self.path) if code is not None else 0
        self.discard()
        if code is None:
            return None
        needed, exact = self.size, self.size_exact
        if needed is None or (not exact and written > needed):
            needed, exact = (written or None), False
        return DiskFullError(self.target, code=code, needed=needed, needed_exact=exact,
                             free=free_bytes(self.target.parent))


def _bytes_in(path: Path) -> int:
    """The size of a file, or of every file under a folder; 0 when it is gone."""
    try:
        if not path.is_dir():
            return path.stat().st_size
        return sum(each.stat().st_size for each in path.rglob("*") if each.is_file())
    except OSError:
        return 0


@contextmanager
def atomic_path(
    target: str | os.PathLike[str], *, fsync: bool = True, sync_dir: bool = False, size: int | None = None
) -> Iterator[Path]:
    """A temporary path beside ``target`` for the block to create the file at; renamed onto ``target``
    when the block ends normally, removed when it raises (a full disk raised as :class:`DiskFullError`,
    ``size``: the bytes the file takes, when known).

    >>> with atomic_path(out) as temporary:
    ...     torch.jit.save(module, str(temporary))
    """
    pending = PendingFile(target, fsync=fsync, sync_dir=sync_dir, size=size)
    try:
        yield pending.path
    except BaseException as error:
        full = pending.discard_after(error)
        if full is None:
            raise
        raise full from error
    pending.commit()


@contextmanager
def atomic_write(
    target: str | os.PathLike[str],
    mode: str = "wb",
    *,
    encoding: str | None = None,
    fsync: bool = True,
    sync_dir: bool = False,
    size: int | None = None,
    size_exact: bool = True,
) -> Iterator[IO[Any]]:
    """A file object on a new temporary file beside ``target`` (``mode`` ``"wb"`` or ``"w"``); closed,
    flushed and renamed onto ``target`` when the block ends normally, removed when it raises (a full disk
    raised as :class:`DiskFullError`; ``size``, ``size_exact``: as for :class:`PendingFile`).

    >>> with atomic_write(path) as handle:
    ...     np.savez(handle, **arrays)
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"mode must be 'wb' or 'w', got {mode!r}")
    # fsync'd here, on the open descriptor
    pending = PendingFile(target, fsync=False, sync_dir=sync_dir, size=size, size_exact=size_exact)
    try:
        descriptor = os.open(pending.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _NEW_FILE_MODE)
        if mode == "w" and encoding is None:
            encoding = "utf-8"
        with os.fdopen(descriptor, mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            if fsync:
                os.fsync(handle.fileno())
    except BaseException as error:
        full = pending.discard_after(error)
        if full is None:
            raise
        raise full from error
    pending.commit()


def atomic_write_bytes(data: bytes, target: str | os.PathLike[str], **options: bool) -> Path:
    """Write ``data`` to ``target`` atomically (``options``: ``fsync``, ``sync_dir``); returns the path."""
    with atomic_write(target, "wb", size=len(data), **options) as handle:
        handle.write(data)
    return Path(target)


def atomic_write_text(
    text: str, target: str | os.PathLike[str], *, encoding: str = "utf-8", **options: bool
) -> Path:
    """Write ``text`` to ``target`` atomically (``options``: ``fsync``, ``sync_dir``); returns the path."""
    return atomic_write_bytes(text.encode(encoding), target, **options)


def atomic_write_json(
    value: Any, target: str | os.PathLike[str], *, indent: int | None = 2, **options: bool
) -> Path:
    """``value`` as JSON (objects JSON cannot hold as their ``str``), newline-terminated, written
    atomically; returns the path. The text is made before the file is touched, so a value that cannot be
    serialised leaves no trace."""
    return atomic_write_text(json.dumps(value, indent=indent, default=str) + "\n", target, **options)


def torch_save_size(obj: Any) -> int:
    """The bytes of the tensor storages in ``obj`` (nested in dicts, lists and tuples; each storage once):
    a lower bound of the size of its ``torch.save`` file, which holds every storage whole plus the
    pickled rest. Cheap: no tensor is read."""
    import torch

    seen: set[tuple[int, int]] = set()
    total = 0
    pending: list[Any] = [obj]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)
        elif isinstance(value, torch.Tensor):
            try:
                storage = value.untyped_storage()
                key = (storage.data_ptr(), storage.nbytes())
            except (RuntimeError, NotImplementedError):  # sparse, nested, meta...: not counted
                continue
            if key not in seen:
                seen.add(key)
                total += key[1]
    return total


def atomic_torch_save(obj: Any, target: str | os.PathLike[str], *, check_space: bool = True,
                      **options: bool) -> Path:
    """``torch.save`` to ``target`` atomically (``options``: ``fsync``, ``sync_dir``); returns the path.

    A process killed at any moment leaves the previous file loadable (``tests/runs/test_runs.py`` kills one
    mid-save). With ``check_space``, a file system with less room than the tensors of ``obj``
    (:func:`torch_save_size`) is refused before anything is written; a disk that fills during the write
    is a :class:`DiskFullError` all the same (torch's own ``RuntimeError`` for it is recognised).
    """
    import torch  # here, so that the rest of this module stays importable without torch's start-up cost

    size = torch_save_size(obj)
    if check_space:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        _check_space(target, size, exact=False)
    with atomic_write(target, "wb", size=size, size_exact=False, **options) as handle:
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
    target: str | os.PathLike[str], *, replace: bool = False, fsync: bool = True, size: int | None = None,
    size_exact: bool = True,
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
        size: the bytes of the folder's files, when known: named by the :class:`DiskFullError` of a full
            disk (else more than what was written).
        size_exact: ``size`` is exact; otherwise a lower bound.

    Raises:
        FolderExistsError: ``target`` exists and ``replace`` is false.
        DiskFullError: the disk (or quota) was full; the folder is deleted, ``target`` is as it was.
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
    except BaseException as error:
        code = disk_full_errno(error, target.parent)
        if code is None:
            raise
        written = _bytes_in(temporary)
        shutil.rmtree(temporary, ignore_errors=True)
        needed, exact = size, size_exact
        if needed is None or (not exact and written > needed):
            needed, exact = (written or None), False
        raise DiskFullError(target, code=code, needed=needed, needed_exact=exact,
                            free=free_bytes(target.parent)) from error
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
