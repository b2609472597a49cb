"""How much of the machine a benchmark run did not get: CPU time that went to other processes, or to the
host's other tenants (a virtual machine's *steal* time), while the run was going.

The benchmarks train for a fixed wall-clock time, so a run that shared its cores makes fewer steps and
scores lower without the recipe being worse. Each run records this share beside its figures, so a
table says which of its rows were measured on a busy machine. Linux only (``/proc/stat``); elsewhere
nothing is recorded.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROC_STAT = Path("/proc/stat")


def _machine_ticks() -> tuple[int, int, int] | None:
    """``(busy, steal, total)`` clock ticks of all cores since boot, or ``None`` without ``/proc/stat``.
    Busy is user, nice, system, irq and softirq; guest time is already inside user and nice."""
    try:
        first = PROC_STAT.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) for v in first[1:9])
    busy = user + nice + system + irq + softirq
    return busy, steal, busy + idle + iowait + steal


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def cpu_shares() -> Iterator[dict[str, float]]:
    """Measure the ``with`` block: the dict it yields is filled on exit with ``others`` (the share of the
    machine's CPU time that processes other than this one's finished children used) and ``steal``
    (the share the hypervisor gave to other tenants), each in ``[0, 1]``; left empty without
    ``/proc/stat``. Run the measured work as a child process that has ended when the block ends."""
    shares: dict[str, float] = {}
    start, children_start = _machine_ticks(), _children_cpu_s()
    yield shares
    end = _machine_ticks()
    if start is None or end is None:
        return
    busy, steal, total = (b - a for a, b in zip(start, end, strict=True))
    if total <= 0:
        return
    ours = (_children_cpu_s() - children_start) * os.sysconf("SC_CLK_TCK")
    shares["others"] = round(min(max(busy - ours, 0.0) / total, 1.0), 3)
    shares["steal"] = round(steal / total, 3)
