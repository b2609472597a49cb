"""The share of the machine a benchmark run did not get (``benchmarks.host_cpu``), measured on real
processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.host_cpu import PROC_STAT, cpu_shares

SPIN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end:\n    pass\n"


@pytest.mark.slow
@pytest.mark.skipif(not Path(PROC_STAT).exists(), reason="no /proc/stat (not Linux)")
def test_a_process_competing_with_the_run_counts_as_others() -> None:
    """One process spinning beside the measured run the whole time takes about one core's worth of the
    machine; the run's own CPU time (a finished child) is not counted in it. Other load on the machine
    can only add to ``others``, so the bound holds on a busy machine too."""
    competitor = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=3.0)])
    try:
        with cpu_shares() as shares:
            subprocess.run([sys.executable, "-c", SPIN.format(seconds=1.5)], check=True)
    finally:
        competitor.wait()
    cores = os.cpu_count() or 1
    assert shares["others"] >= 0.6 / cores
    assert 0.0 <= shares["steal"] <= 1.0 and shares["others"] <= 1.0
