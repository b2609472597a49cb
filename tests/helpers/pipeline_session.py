"""``nerf-lightning ARGS`` in a process of its own, in a session of its own, forked from the test's process.

For a command that a test kills with its whole process group (``KillAtStep(process_group=True)``: a
pipeline, its warm-start server and the fit it runs): the group must not hold the test runner, so the
command runs in a new session, as ``subprocess.run(..., start_new_session=True)`` would start it. A
fork of this process, which has imported the command layer and Lightning already, instead of a fresh
``python -m nerf_lightning`` spares an interpreter start and a Lightning import (seconds); what is
killed is still a separate process (its own pid and process group), ended by a real signal, whose exit
status is read back from the kernel.

The child runs :func:`nerf_lightning.cli.main` (what ``python -m nerf_lightning`` runs) with its
stdout and stderr on files, and ends with ``os._exit``, never returning into the test runner.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path


def _child(args: list[str], env: Mapping[str, str], stdout: Path, stderr: Path) -> None:
    """In the forked child: a new session, output on the files, ``main(args)``; never returns."""
    code = 1
    try:
        os.setsid()
        for fd, path in ((1, stdout), (2, stderr)):
            file = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(file, fd)
            os.close(file)
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 (ended by os._exit)
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.update(env)
        from nerf_lightning.cli import main

        code = main(list(args))
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code & 0xFF)


def main_in_new_session(args: Sequence[str], output: Path, *, env: Mapping[str, str] | None = None,
                        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``nerf-lightning ARGS`` in a forked child that leads a new session, ``env`` added to its
    environment: its exit status (negative: the signal that ended it) and what it printed (kept in
    ``output/stdout.txt`` and ``output/stderr.txt``). A child still running after ``timeout`` seconds
    is killed with its process group and :class:`subprocess.TimeoutExpired` raised."""
    output.mkdir(parents=True, exist_ok=True)
    stdout, stderr = output / "stdout.txt", output / "stderr.txt"
    command = [sys.executable, "-m", "nerf_lightning", *args]
    sys.stdout.flush()  # nothing buffered is printed twice
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(list(args), env or {}, stdout, stderr)
    timed_out = threading.Event()

    def kill_group() -> None:
        timed_out.set()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # the child leads its session's process group

    watchdog = threading.Timer(timeout, kill_group)
    watchdog.start()
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        watchdog.cancel()
    if timed_out.is_set():
        raise subprocess.TimeoutExpired(command, timeout, stdout.read_text(), stderr.read_text())
    return subprocess.CompletedProcess(command, os.waitstatus_to_exitcode(status), stdout.read_text(),
                                       stderr.read_text())
