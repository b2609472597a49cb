"""One training batch computed ahead on a background thread, served only when it is exactly the batch asked.

Why: on the CPU the training pixels are a memory map of the image cache, so gathering a batch's pixels may
read pages from disk. Computed on the training thread, that read stalls the step; computed on another
thread while the step runs, it does not. The rules:

* **One deep.** At most one batch is computed ahead, by one worker thread that lives only while it has
  work. :meth:`Prefetcher.schedule` while another job waits to start replaces that job; a job already
  running always finishes (a Python thread cannot be stopped safely), and its result is kept only until
  the next request.
* **Served only on an equal key.** A job is scheduled under a key that names everything its result
  depends on (for a ray batch: its position, rays per batch, device, seed, rank and a version of the
  mutable state it reads, such as the error map). :meth:`Prefetcher.request` takes the prefetched result
  only when its key equals the request's; otherwise the result is dropped and the request computes on
  the calling thread. With compute functions that are functions of their key (every batch seeds its own
  generator from its position and reads no global random state) a batch is therefore the same, bit for
  bit, whether it was prefetched or not, and prefetching never reorders randomness: it only moves work
  to another thread.
* **Jobs only read.** A compute function must only read state that the calling thread does not change
  while a job may run. The owner of that state calls :meth:`Prefetcher.discard` before changing it
  (discard waits for a running job) and bumps the version in its keys after.
* **Nothing is hidden.** An exception raised by a job is raised on the calling thread, with the
  worker's traceback and a note saying where it came from, by the next :meth:`~Prefetcher.request`,
  :meth:`~Prefetcher.discard` or :meth:`~Prefetcher.close`, whichever key the job was for: a failed read
  is never silently recomputed. (:meth:`~Prefetcher.schedule` does not raise it, nor schedule anything
  until it was raised.)
* **Waits are measured.** Every request records in :attr:`Prefetcher.last_wait_s` the seconds the
  caller was blocked: waiting for the job of its key to finish, or computing the result itself on a
  miss. Only the host clock is read: no device synchronisation is added.

Which device prefetches is the owner's rule (``NerfDataModule``: only where the pixel store lives in
host memory; on an accelerator the store is in device memory already and a batch is a few kernel
launches, which another thread would not speed up).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class _Job(Generic[K, V]):
    key: K
    compute: Callable[[], V]


@dataclass(frozen=True)
class _Done(Generic[K, V]):
    key: K
    result: V


class Prefetcher(Generic[K, V]):
    """A one-deep background computation of the next result, served only under an equal key.

    Thread-safe between one calling thread (the training loop) and the worker thread it starts.

    Args:
        name: the worker thread's name (seen in stack dumps and profilers).
    """

    def __init__(self, name: str = "batch-prefetch") -> None:
        self.name = name
        self._lock = threading.Condition()
        self._pending: _Job[K, V] | None = None  # scheduled, not started
        self._running: _Job[K, V] | None = None
        self._done: _Done[K, V] | None = None  # the latest finished result, until a request or discard
        self._error: BaseException | None = None  # the first exception of a job, until raised
        self._thread: threading.Thread | None = None
        self.last_wait_s: float | None = None
        """Seconds the latest :meth:`request` blocked its caller (``None`` before the first)."""
        self.hits = 0
        """Requests served from a prefetched result."""
        self.misses = 0
        """Requests computed on the calling thread."""

    # ----------------------------------------------------------------- the caller's side
    def schedule(self, key: K, compute: Callable[[], V]) -> None:
        """Compute ``compute()`` for ``key`` on the worker thread, unless a job for ``key`` is waiting,
        running or done already. Replaces a job that has not started; never blocks."""
        with self._lock:
            if self._error is not None or self._holds(key):
                return
            self._pending = _Job(key, compute)
            if self._done is not None:  # another key's result: never served now, free its memory
                self._done = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self.name, daemon=True)
                self._thread.start()
            self._lock.notify_all()

    def request(self, key: K, compute: Callable[[], V]) -> V:
        """The result for ``key``: the prefetched one when a job for ``key`` was scheduled (waiting for
        it to finish if need be), else ``compute()`` on the calling thread. Records the wait in
        :attr:`last_wait_s`; raises the exception of any job that failed."""
        start = time.perf_counter()
        try:
            with self._lock:
                self._raise_error()
                hit = self._holds(key)
                if hit:
                    while (self._done is None or self._done.key != key) and self._error is None:
                        self._lock.wait()
                    self._raise_error()
                    assert self._done is not None
                    result = self._done.result
                    self._done = None
                else:  # the key changed: what was prefetched is not this batch
                    self._pending = self._done = None
            if hit:
                self.hits += 1
                return result
            self.misses += 1
            return compute()
        finally:
            self.last_wait_s = time.perf_counter() - start

    def discard(self) -> None:
        """Drop every prefetched or scheduled result and wait until no job runs: the state jobs read may
        then change. Raises the exception of any job that failed."""
        with self._lock:
            self._pending = None
            while self._running is not None:
                self._lock.wait()
            self._done = None
            self._raise_error()

    def close(self) -> None:
        """Discard everything and wait for the worker thread to end (at the end of a fit, or when the
        state jobs read is replaced). The prefetcher may be used again after. Raises the exception of
        any job that failed."""
        with self._lock:
            self._pending = None
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._lock:
            self._done = None
            self._raise_error()

    def __getstate__(self) -> dict[str, str]:
        """Copied or pickled (a data module sent to another process) as an idle prefetcher: a thread, a lock
        and a batch made ahead belong to this process."""
        return {"name": self.name}

    def __setstate__(self, state: dict[str, str]) -> None:
        self.__init__(state["name"])  # type: ignore[misc]

    @property
    def busy(self) -> bool:
        """Whether a job is waiting or running."""
        with self._lock:
            return self._pending is not None or self._running is not None

    # ----------------------------------------------------------------------- internals
    def _holds(self, key: K) -> bool:
        """Whether a job for ``key`` is waiting, running or done (under the lock)."""
        entries = (self._pending, self._running, self._done)
        return any(entry is not None and entry.key == key for entry in entries)

    def _raise_error(self) -> None:
        """Raise the stored exception of a job, once (under the lock)."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _work(self) -> None:
        while True:
            with self._lock:
                job = self._pending
                if job is None:  # no work left: the thread ends, the next schedule starts another
                    self._thread = None
                    self._lock.notify_all()
                    return
                self._pending, self._running = None, job
            try:
                result = job.compute()
            except BaseException as error:  # raised on the calling thread, never here
                error.add_note(f"(raised on the {self.name!r} thread computing {job.key!r})")
                with self._lock:
                    self._running = None
                    if self._error is None:
                        self._error = error
                    self._lock.notify_all()
                continue
            with self._lock:
                self._running = None
                self._done = _Done(job.key, result)
                self._lock.notify_all()
