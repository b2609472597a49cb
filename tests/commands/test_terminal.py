"""``fit`` as a person at a shell sees it: the command runs in a pseudo-terminal (its stdout and stderr
are a terminal, 100 columns wide), and what the terminal received is read back."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.helpers.runs import ONE_THREAD, RUN, short_run_args

COLUMNS, ROWS = 100, 30


def _run_in_a_terminal(args: list[str], timeout_s: float = 180) -> tuple[int, str]:
    """Run ``python -m nerf_lightning ARGS`` with a pseudo-terminal as stdin, stdout and stderr; its exit
    code and everything it wrote to the terminal (after the terminal's own translation: ``\\r\\n``)."""
    controller, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
    env = {**os.environ, **ONE_THREAD, "TERM": "xterm-256color", "COLUMNS": str(COLUMNS)}
    process = subprocess.Popen([sys.executable, "-m", "nerf_lightning", *args], stdin=terminal,
                               stdout=terminal, stderr=terminal, env=env, close_fds=True)
    os.close(terminal)
    received = bytearray()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 1.0)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the command's end of the terminal is closed
                break
            if not chunk:
                break
            received += chunk
        code = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
        os.close(controller)
    return code, received.decode("utf-8", errors="replace")


@pytest.mark.slow
def test_fit_in_a_terminal_redraws_one_bar_for_the_run_and_ends_with_the_summary(tiny_scene: Path,
                                                                                 tmp_path: Path) -> None:
    out = tmp_path / "runs"
    args = short_run_args(tiny_scene, out, "--trainer.enable_progress_bar", "true", steps=6)
    code, screen = _run_in_a_terminal(["fit", *args])
    assert code == 0, screen[-3000:]
    # One bar for the whole run, redrawn in place (carriage returns), reaching the run's last step.
    bars = [part for part in re.split(r"[\r\n]+", screen) if re.search(r"step \d+/6\b", part)]
    assert bars, screen[-3000:]
    assert any(re.search(r"step 6/6\b", bar) for bar in bars), bars
    assert re.search(r"\r[^\n]*step \d+/6", screen)  # drawn over itself, not line after line
    assert all(len(bar) <= COLUMNS for bar in bars)  # fits the terminal: never wraps onto a second line
    assert not any(re.search(r"=\d*$", bar) for bar in bars)  # a metric is shown whole or not at all
    assert "Epoch" not in screen  # Lightning's per-epoch bar is not shown
    # Lightning's message when the run stops is written above the bar, not glued to its text.
    assert re.search(r"\r *\r`Trainer.fit` stopped: `max_steps=6` reached.\r\n", screen), screen[-3000:]
    # The summary starts on a line of its own after the bar, and names the run folder's commands.
    run = out / RUN
    assert re.search(r"\r\nnerf-lightning: fit done: step 6, ", screen), screen[-3000:]
    assert f"checkpoint:    {run / 'checkpoints' / 'last.ckpt'}" in screen
    assert f"nerf-lightning test --ckpt_path {run}\r\n" in screen
