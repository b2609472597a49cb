"""Subnormal floats flushed in every thread of a process whose entry point set it first."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nerf_lightning.core.subnormal import flush_subnormals, subnormals_flushed

# Prints the share of flushed products of a tensor split over two threads: 1.0 when every thread
# flushes, 0.5 when only the calling thread does, 0.0 when none does.
SHARE_FLUSHED = (
    "import torch\n"
    "torch.set_num_threads(2)\n"
    "x = torch.full((1 << 22,), 1e-30)\n"
    "print(float(((x * 1e-10) == 0).float().mean()))\n"
)


def _share_flushed(before: str) -> float:
    done = subprocess.run([sys.executable, "-c", before + SHARE_FLUSHED], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return float(done.stdout.strip().splitlines()[-1])


def test_the_test_session_flushes_as_the_script_does() -> None:
    flushed = subnormals_flushed()  # as tests/conftest.py left it, before this test sets anything
    if not flushed and not flush_subnormals():
        pytest.skip("torch cannot flush subnormals on this processor")
    assert flushed


@pytest.mark.slow
def test_the_script_flushes_before_any_thread_starts_and_its_threads_follow() -> None:
    """``console_main`` (the ``nerf-lightning`` script) sets the flag before running the command: here the
    command is the two-thread product itself."""
    entry = (
        "import nerf_lightning.cli as cli\n"
        "def main():\n"
        "    exec(SHARE_FLUSHED)\n"
        "    return 0\n"
        "cli.main = main\n"
        f"SHARE_FLUSHED = {SHARE_FLUSHED!r}\n"
        "cli.console_main()\n"
    )
    assert _share_flushed(entry + "raise SystemExit\n") == 1.0  # printed by console_main's command
    assert _share_flushed("") == 0.0  # a bare interpreter computes subnormals


@pytest.mark.slow
def test_set_after_the_threads_started_only_the_calling_thread_flushes() -> None:
    """Why the entry points set it first: threads that exist keep their own flag."""
    started = ("import torch\nfrom nerf_lightning.core.subnormal import flush_subnormals\n"
               "torch.set_num_threads(2)\n(torch.ones(1 << 22) * 2).sum()\nflush_subnormals()\n")
    assert 0.0 < _share_flushed(started) < 1.0
