"""A command stopped by SIGTERM (a scheduler, ``timeout``, a closed terminal session) while it writes its
output: one line, exit code 143, and neither a partial output nor a temporary file left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.runs import ONE_THREAD


@pytest.mark.slow
def test_a_render_stopped_by_sigterm_leaves_nothing_partial(tiny_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "video"
    out.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "nerf_lightning", "render", "--ckpt_path", str(tiny_run), "--camera_path",
         "orbit", "--frames", "2000", "--out", str(out / "orbit.mp4")],
        env={**os.environ, **ONE_THREAD}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(out.iterdir()) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # until the video's temporary file is being written
    assert process.poll() is None, process.communicate()[1][-2000:]
    [writing] = list(out.iterdir())
    assert writing.name.startswith(".orbit") and writing.name != "orbit.mp4"
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    assert last == "nerf-lightning render: stopped by SIGTERM; nothing partial is left"
    assert list(out.iterdir()) == []
