"""sha256 of files, each file hashed once until it changes: a memo keyed by the file's ``stat``.

Every place the package hashes a file's content (dataset fingerprints, the image cache's check of an
entry's pixels) asks :class:`DigestMemo`. A file is hashed (streamed in 1 MiB chunks) the first time;
afterwards, as long as its ``stat`` shows the same **size, mtime_ns, ctime_ns, inode and device**, the
remembered digest is returned without reading it. Memos live in two places:

* in the process (always): a ``fit`` fingerprints the same files for the train and val splits and again
  for ``run.json``; they are read once;
* on disk, when a ``memo_dir`` is given (the image cache's folder, ``~/.cache/nerf-lightning`` or
  ``--data.cache_dir``): ``memo_dir/file-digests/<sha256 of the scope's path>.json``, one small JSON
  file per *scope* (a dataset folder, the cache folder), so that the next run reads nothing it hashed
  before. It is written atomically (only when something new was hashed) and merged with what another
  process wrote meanwhile; a memo that cannot be parsed, or is of another version or scope, is ignored
  and rewritten, a malformed entry is ignored, and a memo folder that cannot be written only costs the
  hashing next time. It never raises.

Correctness: the digest of a file whose content changed but whose stat did not would be wrong. This is
the trade-off make, rsync (without ``--checksum``) and git make, tightened the way git does it:

* ``ctime`` is part of the key. Editing a file changes its mtime; tools that *preserve* mtime (``cp
  -p``, ``rsync -t``, ``touch -d``, an editor restoring it) cannot set ctime, which the kernel sets to
  "now" on every write, chmod or rename. A new copy also gets a new inode.
* "Racy" files are never remembered: a file whose mtime or ctime is less than :data:`RACY_SECONDS`
  before the hashing started may still be written within the same timestamp tick (file system clocks
  are coarse: a few ms on ext4, 2 s on FAT), which would leave its stat unchanged; it is hashed again
  next time. A file whose stat changed while it was being read is not remembered either.

What remains undetected: content changed with the stat restored by something that can set ctime (a
clock set back, raw writes to the block device, a file system that fakes times), writes through a
shared memory map not yet reflected in mtime, and media corruption ("bit rot") after the file was
hashed. Ask for :func:`file_sha256` to hash unconditionally.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from pathlib import Path
from typing import Any, NamedTuple

from nerf_lightning.files.atomic import atomic_write_json

CHUNK_BYTES = 1 << 20
"""Files are read and hashed in chunks of this many bytes."""
RACY_SECONDS = 2.0
"""A file changed less than this long before it was hashed is not remembered (see the module docstring)."""
MEMO_FOLDER = "file-digests"
"""The memo files' folder inside ``memo_dir``."""
MEMO_FORMAT, MEMO_VERSION = "nerf-lightning file digests", 1
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_log = logging.getLogger(__name__)


class FileDigest(NamedTuple):
    """The content of a file: ``size`` in bytes and ``sha256`` hex digest."""

    size: int
    sha256: str


StatKey = tuple[int, int, int, int, int]
"""``(size, mtime_ns, ctime_ns, inode, device)``: a file is re-hashed when any of them differs."""


def stat_key(stat: os.stat_result) -> StatKey:
    return (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev)


def hash_file(path: str | os.PathLike[str], digest: Any, *, buffer: bytearray | None = None) -> int:
    """Feed the bytes of ``path`` into ``digest`` (a ``hashlib`` object) in 1 MiB chunks; returns the
    number of bytes."""
    buffer = buffer if buffer is not None else bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    total = 0
    with open(path, "rb", buffering=0) as file:
        while True:
            count = file.readinto(view)
            if not count:
                return total
            digest.update(view[:count])
            total += count


def file_sha256(path: str | os.PathLike[str], *, buffer: bytearray | None = None) -> FileDigest:
    """Size and sha256 of a file, read now (no memo)."""
    digest = hashlib.sha256()
    size = hash_file(path, digest, buffer=buffer)
    return FileDigest(size, digest.hexdigest())


_in_process: dict[str, tuple[StatKey, FileDigest]] = {}
"""Absolute path -> what it held when hashed, shared by every memo of this process."""


def memo_file(memo_dir: str | os.PathLike[str], scope: str | os.PathLike[str]) -> Path:
    """Where the on-disk memo of ``scope`` lives in ``memo_dir``."""
    name = hashlib.sha256(os.path.abspath(scope).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return Path(memo_dir) / MEMO_FOLDER / f"{name}.json"


def _parse_entries(raw: Any, scope: str) -> dict[str, tuple[StatKey, FileDigest]]:
    """The valid entries of a parsed memo file; anything malformed is left out (never raises)."""
    if not (isinstance(raw, dict) and raw.get("format") == MEMO_FORMAT and raw.get("version") == MEMO_VERSION
            and raw.get("scope") == scope and isinstance(raw.get("files"), dict)):
        return {}
    entries = {}
    for path, value in raw["files"].items():
        if (isinstance(value, list) and len(value) == 6
                and all(isinstance(v, int) and not isinstance(v, bool) for v in value[:5])
                and isinstance(value[5], str) and _SHA256_HEX.fullmatch(value[5])):
            key = (value[0], value[1], value[2], value[3], value[4])
            entries[path] = (key, FileDigest(value[0], value[5]))
    return entries


class DigestMemo:
    """sha256 of files, remembered by their stat (see the module docstring).

    Use as a context manager, which saves the on-disk memo at the end::

        with DigestMemo(cache_dir, scope=dataset_root) as memo:
            digests = [memo.digest(path) for path in files]

    Args:
        memo_dir: folder of the on-disk memos (the image cache's); ``None``: remember in this process
            only.
        scope: the folder the hashed files belong to; it names the memo file (a dataset's files share
            one), it does not restrict which files may be hashed.
    """

    def __init__(self, memo_dir: str | os.PathLike[str] | None, scope: str | os.PathLike[str]) -> None:
        self.scope = os.path.abspath(scope)
        self.path = None if memo_dir is None else memo_file(memo_dir, self.scope)
        self._dirty = False  # something to write; _read sets it for a memo file that must be replaced
        self._entries: dict[str, tuple[StatKey, FileDigest]] = self._read() if self.path else {}
        self._used: set[str] = set()
        self._buffer = bytearray(CHUNK_BYTES)
        self.hashed = 0
        """Files actually read by this memo (the others were remembered)."""

    def _read(self) -> dict[str, tuple[StatKey, FileDigest]]:
        assert self.path is not None
        try:
            raw = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:  # unreadable or corrupt: ignored, rewritten on save
            _log.info("file digest memo %s ignored (%s)", self.path, error)
            self._dirty = True
            return {}
        entries = _parse_entries(raw, self.scope)
        if not entries and raw != {"format": MEMO_FORMAT, "version": MEMO_VERSION, "scope": self.scope,
                                   "files": {}}:
            self._dirty = True  # another version, or nothing usable: replace it
        return entries

    def digest(self, path: str | os.PathLike[str]) -> FileDigest:
        """Size and sha256 of the file at ``path``: remembered while its stat is unchanged, else read.

        Raises:
            OSError: the file cannot be read (as ``open`` raises it).
        """
        key_path = os.path.abspath(path)
        before = stat_key(os.stat(key_path))
        self._used.add(key_path)
        for remembered in (_in_process.get(key_path), self._entries.get(key_path)):
            if remembered is not None and remembered[0] == before:
                self._remember(key_path, remembered)
                return remembered[1]
        started = time.time_ns()
        found = file_sha256(key_path, buffer=self._buffer)
        self.hashed += 1
        after = os.stat(key_path)
        racy = started - max(after.st_mtime_ns, after.st_ctime_ns) < RACY_SECONDS * 1e9
        if stat_key(after) == before and found.size == before[0] and not racy:
            self._remember(key_path, (before, found))
        return found

    def _remember(self, key_path: str, entry: tuple[StatKey, FileDigest]) -> None:
        _in_process[key_path] = entry
        if self.path is not None and self._entries.get(key_path) != entry:
            self._entries[key_path] = entry
            self._dirty = True

    def save(self) -> None:
        """Write the on-disk memo if anything new was remembered: merged with the file as it is now (another
        process may have added entries), entries of files that are gone or changed dropped. Failures are
        logged, never raised."""
        if self.path is None or not self._dirty:
            return
        merged = {**self._read(), **self._entries}
        kept = {}
        for path, (key, found) in merged.items():
            if path not in self._used:
                try:
                    if stat_key(os.stat(path)) != key:
                        continue
                except OSError:
                    continue
            kept[path] = [*key, found.sha256]
        document = {"format": MEMO_FORMAT, "version": MEMO_VERSION, "scope": self.scope, "files": kept}
        try:
            # No fsync: a memo lost or torn by a crash is ignored and rebuilt, it costs hashing only.
            atomic_write_json(document, self.path, indent=None, fsync=False)
            self._dirty = False
        except OSError as error:
            _log.info("file digest memo %s not written (%s)", self.path, error)

    def __enter__(self) -> DigestMemo:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.save()


def forget_in_process() -> None:
    """Drop what this process remembers (tests; the on-disk memos are untouched)."""
    _in_process.clear()
