"""Subnormal floats flushed to zero in every thread of a process, set before its first thread starts.

A hash table's row that no sample touched for a while gets a zero gradient, and Adam's moments of it
decay geometrically (the first by 0.9 per step: from ``1e-5`` below float32's smallest normal number,
about ``1.2e-38``, in some 700 steps); tiny gradients square to subnormals in the second moment at
once. Arithmetic on subnormal numbers takes many times longer on a x86 CPU, and most of a table's
rows lie out of reach of most steps' samples, so without flushing the optimizer step grows slower as
more moments become subnormal. Numbers that small move no parameter by anything float32 resolves.

The flag lives in each thread's floating-point control register and a new thread copies its
creator's, so it must be set before torch starts its intra-op worker threads (at the first parallel
operation): set later, the workers keep computing subnormals while the calling thread flushes them,
and a result would depend on which thread computed which part. Hence it is set first thing in each
entry point (the ``nerf-lightning`` script, ``python -m nerf_lightning``, ``python -m
nerf_lightning.demo``, the benchmarks' training runs, the test session and the processes its
distributed tests launch), never from a model's hooks. Data-parallel ranks started by Lightning's
subprocess launcher run the same command line, so they set it too; ranks of ``ddp_spawn`` (not used by
the shipped configs) start from Python's multiprocessing and do not. A script that trains a model itself calls
:func:`flush_subnormals` before its first torch computation.
"""

from __future__ import annotations

import torch


def flush_subnormals() -> bool:
    """Flush subnormal float results and inputs to zero in this thread and every thread it starts from
    now on; whether torch supports it on this processor (where it does not, nothing changes)."""
    return bool(torch.set_flush_denormal(True))


def subnormals_flushed() -> bool:
    """Whether this thread flushes subnormals: one product (on the calling thread) that would be one."""
    return bool(torch.tensor(1e-30) * torch.tensor(1e-10) == 0)
