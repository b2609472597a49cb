"""Owning the process-wide state a training's numbers depend on: for a test whose assertions are about
those numbers (a PSNR margin, say), and for a run in the test's process that must equal, bit for bit,
one in a fresh process (which starts from torch's defaults).

Which tests ran earlier in the same process must not decide such a test's outcome. The state that
does: torch's thread count (the MLPs' matrix products add in another order on another number of
threads: a 400-step fit's test PSNR moved by 0.1 dB between one and two threads), the
deterministic-algorithms flag and float32 matmul precision (other kernels), the default dtype, the
global random generators, and ``PL_GLOBAL_SEED``, from which a data module without a ``seed``
derives its ray streams. Each is whatever the last test (or Lightning run) in the process left.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator

import numpy as np
import torch

THREADS = 2
"""The thread count the tests' numbers were measured with (this project's two-core machine); fixed,
so that a machine with more cores gets the same numbers."""


@contextlib.contextmanager
def owned_numerics(seed: int = 0, threads: int = THREADS) -> Iterator[None]:
    """Within the block: ``threads`` threads, default (non-deterministic-mode) kernels, float32 at its
    highest matmul precision, and every global generator seeded with ``seed`` (as
    ``lightning.seed_everything`` does, ``PL_GLOBAL_SEED`` included). All restored afterwards."""
    saved_env = os.environ.get("PL_GLOBAL_SEED")
    saved = (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled(),
             torch.is_deterministic_algorithms_warn_only_enabled(), torch.get_float32_matmul_precision(),
             torch.get_default_dtype(), torch.random.get_rng_state(), random.getstate(),
             np.random.get_state())
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(False)
    torch.set_float32_matmul_precision("highest")
    torch.set_default_dtype(torch.float32)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ["PL_GLOBAL_SEED"] = str(seed)
    try:
        yield
    finally:
        threads_before, deterministic, warn_only, precision, dtype, torch_rng, python_rng, numpy_rng = saved
        torch.set_num_threads(threads_before)
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_float32_matmul_precision(precision)
        torch.set_default_dtype(dtype)
        torch.random.set_rng_state(torch_rng)
        random.setstate(python_rng)
        np.random.set_state(numpy_rng)
        if saved_env is None:
            os.environ.pop("PL_GLOBAL_SEED", None)
        else:
            os.environ["PL_GLOBAL_SEED"] = saved_env
