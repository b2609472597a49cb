"""A bound on oneDNN's cache of compiled CPU kernels, set before the first one is built."""

from __future__ import annotations

import os

PRIMITIVE_CACHE_CAPACITY = 16
"""Kernels oneDNN keeps compiled (its default is 1024).

bf16 matrix products on a CPU go through oneDNN, which compiles a kernel per input shape and
caches it. Under ``SampleBudget`` nearly every training step has a new number of samples, so
the cache fills with kernels that are never reused, and with the default capacity resident memory
keeps growing through a ``bf16-mixed`` run; a small capacity bounds it. Evaluation renders
fixed-size chunks, whose few shapes a small cache still serves.
"""


def bound_primitive_cache() -> None:
    """Cap oneDNN's kernel cache unless the user chose a capacity (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``).

    oneDNN reads the variable when it builds its first kernel, so this must run before any
    bf16 (or other oneDNN) operation of the process.
    """
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(PRIMITIVE_CACHE_CAPACITY))
