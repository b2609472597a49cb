"""Command processes that start warm: ``python -m MODULE ARGV`` forked from a server that imported once.

A pipeline stage or a sweep trial runs as a process of its own, so a crash, a kill or a leak ends with
that process and the caller records it. A fresh interpreter pays for its imports (torch, Lightning) on
every start, which is most of the cost of a short stage or trial. :class:`WarmStarter` keeps one
*server* process per caller: it imports the ``preload`` modules once, then forks one child per request.
Each child is a real process (its own pid, signals, exit code, memory) that runs ``MODULE`` as
``python -m`` would (``runpy``: ``sys.argv``, ``__main__``), with the caller's open file as its
stdout and stderr. NumPy's global random state, which a fresh interpreter seeds from the operating
system, is seeded again in each child (Python's ``random`` does so itself), and it ends as the
command-line script does (:func:`end_process`).

Rules that keep a warm child equal to a cold one:
- The server is started with the environment of the first request; a request with another environment
  (a library may read a variable at import, e.g. OpenMP's thread count) starts cold instead.
- The server imports only; it never computes, so no thread pool or accelerator context exists to be
  inherited by a fork.
- The server ignores SIGINT (a Ctrl-C in the terminal reaches the child, in the same process group,
  which handles it as a fresh process would) and ends when its caller closes the connection.
- The child takes SIGINT as a fresh interpreter started by the caller would: ignored where the caller
  ignores it (a shell starts a background job so, and its children inherit that), else Python's
  ``KeyboardInterrupt``. So a Ctrl-C that the caller does not see does not stop its child either.
- If the server cannot be started or has died, requests start cold: the warm path only saves time.

Usage: ``with WarmStarter("nerf_lightning", preload=[...]) as starter: process = starter.start(argv,
output, env)``; ``process`` has :class:`subprocess.Popen`'s ``pid``, ``returncode``, ``poll``, ``wait``,
``send_signal``, ``terminate`` and ``kill``.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import IO, Any, NoReturn, Protocol

_MESSAGE = 1 << 20


class ChildProcess(Protocol):
    """What a caller uses of a started command: :class:`subprocess.Popen`'s names and meanings (a
    negative ``returncode`` is the signal that ended it)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class WarmProcess:
    """A child forked by the server; its exit status comes back from the server, which reaps it."""

    def __init__(self, starter: WarmStarter, pid: int, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self._starter = starter

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._starter._status(self.pid, timeout=0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._starter._status(self.pid, timeout=timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmStarter:
    """Starts ``python -m MODULE ARGV`` as warm children of one server (see the module docstring).

    One child runs at a time (a pipeline's stages and a sweep worker's trials run in order); starting
    another while one runs starts it cold."""

    def __init__(self, module: str, preload: Sequence[str] = ()) -> None:
        self.module = module
        self.preload = list(preload)
        self._server: subprocess.Popen[bytes] | None = None
        self._socket: socket.socket | None = None
        self._env: dict[str, str] | None = None
        self._running: WarmProcess | None = None

    def __enter__(self) -> WarmStarter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, argv: Sequence[str], output: IO[bytes], env: Mapping[str, str]) -> ChildProcess:
        """``python -m MODULE ARGV`` with stdout and stderr on ``output`` (an open file: the child writes
        through the same file description, as :class:`subprocess.Popen` would) and stdin on /dev/null."""
        args = [sys.executable, "-m", self.module, *argv]
        env = dict(env)
        if self._running is None and self._connected(env):
            with open(os.devnull, "rb") as stdin:
                try:
                    assert self._socket is not None
                    request = {"argv": list(argv), "env": env,
                               "ignore_sigint": signal.getsignal(signal.SIGINT) is signal.SIG_IGN}
                    socket.send_fds(self._socket, [json.dumps(request).encode()],
                                    [stdin.fileno(), output.fileno()])
                    reply = self._receive(timeout=None)  # the server answers or ends
                except OSError:
                    reply = None
            if reply is not None and "pid" in reply:
                self._running = WarmProcess(self, int(reply["pid"]), args)
                return self._running
            self._drop()
        output.flush()
        return subprocess.Popen(args, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env)

    def close(self) -> None:
        """End the server (a running child goes on to its end; nobody waits for it here)."""
        self._drop()

    # ------------------------------------------------------------------ the caller's side
    def _connected(self, env: dict[str, str]) -> bool:
        if self._server is not None and self._server.poll() is not None:
            self._drop()
        if self._server is None and self._env is None:  # the first request decides the environment
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                self._server = subprocess.Popen(
                    [sys.executable, "-m", __name__, str(theirs.fileno()), self.module, *self.preload],
                    pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    env=env)
            except OSError:
                ours.close()
                return False
            finally:
                theirs.close()
            self._socket, self._env = ours, env
        return self._server is not None and self._env == env

    def _receive(self, timeout: float | None) -> dict[str, Any] | None:
        """The server's next message; None when nothing came within ``timeout`` seconds."""
        assert self._socket is not None
        ready, _, _ = select.select([self._socket], [], [], timeout)
        if not ready:
            return None
        message = self._socket.recv(_MESSAGE)
        if not message:
            raise ConnectionResetError("the warm-start server ended")
        return json.loads(message)

    def _status(self, pid: int, timeout: float | None) -> int | None:
        """The exit status of the running child once the server has reaped it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                reply = self._receive(left)
            except OSError:  # the server died (killed with its process group): the child with it, or lost
                reply = {"pid": pid, "code": _reap_lost(pid)}
            if reply is None:
                return None
            if reply.get("pid") == pid and "code" in reply:
                self._running = None
                return int(reply["code"])

    def _drop(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._server is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._server.wait(timeout=5 if self._running is None else 0.1)
            self._server = None
        self._running = None


def _reap_lost(pid: int) -> int:
    """The server is gone before reporting ``pid``: wait until the orphan ends (it is no child of ours to
    reap), then report it as killed, since its exit status went with the server."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -signal.SIGKILL
        time.sleep(0.1)


# ---------------------------------------------------------------------- the server's side
def _child(module: str, argv: list[str], env: dict[str, str], ignore_sigint: bool, stdin: int,
           output: int) -> NoReturn:
    """In the forked child: become ``python -m MODULE ARGV``, then end with its exit code. SIGINT is
    ignored when the caller ignores it (``ignore_sigint``), as a fresh interpreter would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint else signal.default_int_handler)
    os.dup2(stdin, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(stdin)
    os.close(output)
    os.environ.clear()
    os.environ.update(env)
    numpy_random = sys.modules.get("numpy.random")  # Python's ``random`` reseeds itself after a fork
    if numpy_random is not None:
        numpy_random.seed()
    sys.argv = [module, *argv]  # runpy puts the module's file first, as ``-m`` does
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        code = 1
    if code < 0:  # end as the signal would have ended a fresh interpreter
        _finish()
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    end_process(code)


def _finish() -> None:
    """What an interpreter does at its end before tearing itself down: wait for the threads that are
    not daemons, run the ``atexit`` handlers, flush stdout and stderr."""
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def end_process(code: int) -> NoReturn:
    """End this process with exit code ``code`` as the interpreter would, less its teardown.

    Non-daemon threads are waited for, ``atexit`` handlers run (they close what must be closed: log
    handlers, ``weakref.finalize`` clean-ups, a process group) and stdout and stderr are flushed; then
    ``os._exit`` skips the deallocation of every module and object, which after training with torch and
    Lightning loaded is seconds of garbage collection in which nothing is written. The command-line
    script and every warm-started child end this way."""
    _finish()
    os._exit(code & 0xFF)


def serve(connection: int, module: str, preload: Sequence[str]) -> None:
    """The server's loop: import ``preload``, then for each request fork a child, report its pid and, once
    it has ended, its exit status (a negative number for a signal)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for name in preload:
        with contextlib.suppress(Exception):  # the child meets the same error, and reports it
            importlib.import_module(name)
    link = socket.socket(fileno=connection)
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(link, _MESSAGE, 2)
        except OSError:
            return
        if not message:
            return  # the caller closed the connection
        request = json.loads(message)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            link.close()
            _child(module, request["argv"], request["env"], bool(request.get("ignore_sigint")), *fds)
        for fd in fds:
            os.close(fd)
        try:
            link.send(json.dumps({"pid": pid}).encode())
            _, status = os.waitpid(pid, 0)
            link.send(json.dumps({"pid": pid, "code": os.waitstatus_to_exitcode(status)}).encode())
        except OSError:
            return


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2], sys.argv[3:])
    end_process(0)  # its caller waits for it: without the teardown of the modules it preloaded
