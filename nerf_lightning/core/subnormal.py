"""Subnormal floats flushed to zero in every thread of a process, set before its first thread starts.

A hash table's row that no sample touched for a while gets a zero gradient, and Adam's moments of it
decay geometrically (the first by 0.9 per step: from ``1e-5`` below float32's smallest normal number,
about ``1.2e-38``, in some 700 steps); tiny gradients square to subnormals in the second moment at
once. Arithmetic on subnormal numbers takes many times longer on a x86 CPU, and most of a table's
rows lie out of reach of most steps' samples, so without flushing the optimizer step grows several
times slower as training goes on. Numbers that small move no parameter by anything float32 resolves.

The flag lives in each thread's floating-point control register and a new thread copies its
creator's, so it must be set before torch starts its intra-op worker threads (at the first parallel
operation): set later, the workers keep computing subnormals while the calling thread flushes them,
and a result would depend on which thread computed which part. Hence it is set first thing in each
entry point (the ``nerf-lightning`` script, ``python -m nerf_lightning``, the benchmarks' runs, the
test session), never from a model's hooks. A script that trains a model itself calls
:func:`flush_subnormals` before its first torch computation.
"""

from __future__ import annotations

import torch


def flush_subnormals() -> bool:
    """Flush subnormal float results and inputs to zero in this thread and every thread it starts from
    now on; whether the processor supports it (x86 with SSE3; elsewhere nothing changes)."""
    return bool(torch.set_flush_denormal(True))


def subnormals_flushed() -> bool:
    """Whether this thread flushes subnormals: one product (on the calling thread) that would be one."""
    return bool(torch.tensor(1e-30) * torch.tensor(1e-10) == 0)
