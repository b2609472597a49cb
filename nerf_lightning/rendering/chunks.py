"""Evaluate a function of per-sample tensors in fixed-size pieces along the first dimension."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch
from torch import Tensor

Output = TypeVar("Output", Tensor, tuple[Tensor, ...])


def map_chunks(fn: Callable[..., Output], *inputs: Tensor, chunk_size: int) -> Output:
    """``fn(*inputs)``, computed on at most ``chunk_size`` rows at a time and concatenated.

    Meant for queries without gradient (whole-image rendering): a hash-grid field on ``S``
    samples builds transient tensors of ``S x levels x corners``; in pieces they stay small
    enough to be reused by the allocator and to stay in cache, which on a CPU renders whole images
    faster than one call per ray chunk.

    Args:
        fn: maps ``[N, ...]`` tensors to a ``[N, ...]`` tensor or a tuple of them; rows must
            be independent of each other.
        inputs: tensors with the same first dimension ``N``.
        chunk_size: rows per call (``N`` or more: one call).

    Returns:
        What ``fn(*inputs)`` returns, rows in order.
    """
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    total = inputs[0].shape[0]
    if total <= chunk_size:
        return fn(*inputs)
    pieces = [fn(*(x[start : start + chunk_size] for x in inputs)) for start in range(0, total, chunk_size)]
    if isinstance(pieces[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*pieces, strict=True))  # type: ignore[return-value]
    return torch.cat(pieces)  # type: ignore[arg-type]
