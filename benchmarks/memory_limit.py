"""A memory cgroup to run a benchmark's child process in, and dropping files from the page cache.

:func:`memory_cgroup` makes a cgroup whose memory limit holds everything the processes in it charge: their
anonymous memory and the page cache they bring in (a page of a file is charged to the cgroup of the
process that first reads it into memory, and a memory map's pages count as that file's page cache). With
the limit reached the kernel reclaims the group's own clean file pages first (a memory map's pages are
reread from disk when touched again) and kills a process of the group only when anonymous memory alone
does not fit. So a child whose anonymous memory fits, reading a memory-mapped file larger than what is
left, runs with that file partly on disk.

The cgroup v2 controller is used where it is enabled on the unified hierarchy (``memory.max``), else the
v1 memory hierarchy (``memory.limit_in_bytes``). Making one needs root (or a delegated subtree) and a
writable hierarchy; :func:`cgroup_unavailable` says why it cannot be made, so a benchmark can skip its
limited runs with that reason. The group is removed when the ``with`` block ends, whatever happens: a
process still in it then (a child that outlived an interrupted benchmark, or one of its own children) is
killed first, since only an empty group can be removed and a group left behind keeps its limit and its
charged pages.

A page already in the page cache stays charged to the cgroup that read it, so reading it again from
inside the limited group charges nothing and is not limited: :func:`drop_page_cache` first evicts the
files' clean pages (``posix_fadvise(DONTNEED)`` after an ``fsync``), so the limited child reads them
from disk and they count against its limit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

MOUNTS = Path("/proc/self/mounts")


@dataclass(frozen=True)
class Hierarchy:
    """Where memory cgroups can be made: the folder new groups go into, and the limit file's name."""

    root: Path
    version: int
    limit_file: str


def _mounts() -> list[tuple[str, str, list[str]]]:
    """``(mount point, type, options)`` of every mount (nothing where ``/proc`` cannot be read)."""
    try:
        lines = MOUNTS.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 4:
            found.append((parts[1].replace("\\040", " "), parts[2], parts[3].split(",")))
    return found


def find_hierarchy() -> tuple[Hierarchy | None, str]:
    """The memory cgroup hierarchy to use, or ``None`` and why there is none.

    v2 first: a ``cgroup2`` mount whose root lists ``memory`` in ``cgroup.subtree_control`` (its children
    get the controller), or in ``cgroup.controllers`` where it can be enabled by writing
    ``+memory`` to ``cgroup.subtree_control`` (as root; done here, a no-op when it is enabled already).
    Else a v1 ``cgroup`` mount with the ``memory`` option. A hierarchy that is read-only or not
    writable by this process is no use.
    """
    if os.geteuid() != 0:
        return None, "not root (making a memory cgroup needs root)"
    reasons = []
    for point, kind, options in _mounts():
        root = Path(point)
        if kind == "cgroup2":
            try:
                controllers = (root / "cgroup.controllers").read_text().split()
                enabled = (root / "cgroup.subtree_control").read_text().split()
            except OSError as error:
                reasons.append(f"cgroup v2 at {root}: {error}")
                continue
            if "memory" not in controllers:
                reasons.append(f"cgroup v2 at {root}: no memory controller (controllers: "
                               f"{' '.join(controllers) or 'none'})")
                continue
            if "ro" in options or not os.access(root, os.W_OK):
                reasons.append(f"cgroup v2 at {root}: not writable")
                continue
            if "memory" not in enabled:
                try:
                    (root / "cgroup.subtree_control").write_text("+memory")
                except OSError as error:
                    reasons.append(f"cgroup v2 at {root}: cannot enable the memory controller: {error}")
                    continue
            return Hierarchy(root, 2, "memory.max"), ""
    for point, kind, options in _mounts():
        if kind == "cgroup" and "memory" in options:
            root = Path(point)
            if "ro" in options or not os.access(root, os.W_OK):
                reasons.append(f"cgroup v1 memory at {root}: not writable")
                continue
            return Hierarchy(root, 1, "memory.limit_in_bytes"), ""
    return None, "; ".join(reasons) or "no memory cgroup hierarchy is mounted"


def cgroup_unavailable() -> str | None:
    """Why no memory cgroup can be made here (``None``: one can)."""
    hierarchy, reason = find_hierarchy()
    return None if hierarchy is not None else reason


class MemoryCgroup:
    """A memory cgroup made by :func:`memory_cgroup`: its folder, its limit, what it recorded."""

    def __init__(self, hierarchy: Hierarchy, path: Path, limit_bytes: int | None) -> None:
        self.hierarchy, self.path, self.limit_bytes = hierarchy, path, limit_bytes

    def join(self) -> None:
        """Put the calling process into the group (for ``Popen(preexec_fn=group.join)``: the child joins
        before it runs the command, so everything it reads is charged here)."""
        fd = os.open(self.path / "cgroup.procs", os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)

    def usage(self) -> int | None:
        """Bytes the group charges now (v1 ``memory.usage_in_bytes``, v2 ``memory.current``)."""
        text = self._read("memory.usage_in_bytes" if self.hierarchy.version == 1 else "memory.current")
        return int(text) if text else None

    def set_limit(self, limit_bytes: int) -> bool:
        """Change the limit (the kernel reclaims the group's file pages to get under a lower one); whether
        it took (a limit below what the group cannot give back is refused)."""
        try:
            (self.path / self.hierarchy.limit_file).write_text(str(int(limit_bytes)))
        except OSError:
            return False
        self.limit_bytes = int(limit_bytes)
        return True

    def file_bytes(self) -> int | None:
        """Bytes of page cache the group charges now (``memory.stat``: v1 ``cache``, v2 ``file``)."""
        key = "cache" if self.hierarchy.version == 1 else "file"
        for line in (self._read("memory.stat") or "").splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
        return None

    def reset_peak(self) -> bool:
        """Start the group's peak afresh from what it charges now (v1: ``0`` to
        ``memory.max_usage_in_bytes``); whether that is possible (not on v2 here)."""
        if self.hierarchy.version != 1:
            return False
        try:
            (self.path / "memory.max_usage_in_bytes").write_text("0")
        except OSError:
            return False
        return True

    def _read(self, name: str) -> str | None:
        try:
            return (self.path / name).read_text()
        except OSError:
            return None

    def report(self) -> dict[str, int | None]:
        """The group's peak charged bytes and how often the limit was hit (``None`` where the kernel does
        not say): v1 ``memory.max_usage_in_bytes`` and ``memory.failcnt``; v2 ``memory.peak`` and the
        ``max`` count of ``memory.events``."""
        if self.hierarchy.version == 1:
            peak, hits = self._read("memory.max_usage_in_bytes"), self._read("memory.failcnt")
        else:
            peak, events = self._read("memory.peak"), self._read("memory.events") or ""
            hits = next((line.split()[1] for line in events.splitlines() if line.startswith("max ")), None)
        return {"peak_bytes": int(peak) if peak else None, "limit_hits": int(hits) if hits else None}


def _end_processes(path: Path, timeout_s: float = 10.0) -> None:
    """SIGKILL every process in the group (never this one) until none is left or ``timeout_s`` passed:
    a process forked by one being killed may join the group after the first reading."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pids = [int(pid) for pid in (path / "cgroup.procs").read_text().split()]
        except OSError:
            return
        pids = [pid for pid in pids if pid != os.getpid()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _remove(path: Path, timeout_s: float = 10.0) -> None:
    """``rmdir`` the group, retrying while the kernel still counts exiting processes in it."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int | None, name: str) -> Iterator[MemoryCgroup]:
    """A new memory cgroup ``name`` (made unique with this process's id) limited to ``limit_bytes``
    (``None``: no limit, a group only to measure what its processes charge), removed when the block ends
    (any process still in it is killed first).

    Raises:
        RuntimeError: no memory cgroup can be made here (:func:`cgroup_unavailable`'s reason).
    """
    hierarchy, reason = find_hierarchy()
    if hierarchy is None:
        raise RuntimeError(reason)
    path = hierarchy.root / f"{name}-{os.getpid()}"
    path.mkdir()
    try:
        if hierarchy.version == 2:  # no swapping either, so the limit is on memory alone
            with contextlib.suppress(OSError):
                (path / "memory.swap.max").write_text("0")
        if limit_bytes is not None:
            (path / hierarchy.limit_file).write_text(str(int(limit_bytes)))
        yield MemoryCgroup(hierarchy, path, limit_bytes)
    finally:
        _end_processes(path)
        _remove(path)


def drop_page_cache(files: Iterable[Path]) -> int:
    """Evict ``files``' pages from the page cache (written back first: dirty pages cannot be dropped);
    the bytes of the files advised. Pages a running process maps stay; this is advice the kernel may
    ignore, so a benchmark reports what its limited group actually charged (:meth:`MemoryCgroup.report`).
    """
    advised = 0
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            advised += os.fstat(fd).st_size
        finally:
            os.close(fd)
    return advised
