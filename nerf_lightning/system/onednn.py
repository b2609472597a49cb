"""A bound on oneDNN's cache of compiled CPU kernels, set before the first one is built."""

from __future__ import annotations

import os

PRIMITIVE_CACHE_CAPACITY = 16
"""Kernels oneDNN keeps compiled (its default is 1024).

bf16 matrix products on a CPU go through oneDNN, which compiles a kernel per input shape and
caches it. Under ``SampleBudget`` nearly every training step has a new number of samples, so
the cache fills with kernels that are never reused: over 90 s of the demo in ``bf16-mixed``,
resident memory grew to 3.7 GB with the default capacity, and stayed near 1.6 GB with 16.
Evaluation renders fixed-size chunks, whose few shapes a small cache still serves.
"""


def bound_primitive_cache() -> None:
    """Cap oneDNN's kernel cache unless the user chose a capacity (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``).

    oneDNN reads the variable when it builds its first kernel, so this must run before any
    bf16 (or other oneDNN) operation of the process.
    """
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(PRIMITIVE_CACHE_CAPACITY))
