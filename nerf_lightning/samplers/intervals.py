"""Interval layouts along rays shared by fixed-count samplers.

Shapes: ``R`` rays, ``N`` intervals per ray (``N + 1`` edges).
"""

from __future__ import annotations

import torch
from torch import Tensor

from nerf_lightning.core.types import PackedSamples, Rays


def stratified_fractions(
    num_rays: int,
    num_edges: int,
    *,
    jitter: bool,
    device: torch.device,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``[R, num_edges]`` sorted positions in ``[0, 1]``: evenly spaced from 0 to 1, inner ones
    moved by up to half a spacing at random when ``jitter``.

    Eager only: ``torch.jit.script`` refuses the keyword-only ``generator`` ("keyword-only arguments
    with defaults"), so a ``standalone()`` module cannot call it. Its evaluation layout (``jitter``
    false) is :func:`even_fractions`, which scripts and traces: call that from the module.
    """
    if not (jitter and num_edges > 2):
        return even_fractions(num_rays, num_edges, device)
    positions = torch.arange(num_edges, device=device, dtype=torch.float32).expand(num_rays, -1)
    shift = torch.rand(num_rays, num_edges, device=device, generator=generator) - 0.5
    shift[:, 0] = 0.0
    shift[:, -1] = 0.0
    return (positions + shift) / max(num_edges - 1, 1)


def even_fractions(num_rays: int, num_edges: int, device: torch.device) -> Tensor:
    """``[R, num_edges]`` float32 positions evenly spaced from 0 to 1 (the evaluation layout).

    Pure torch, so the exported samplers (``samplers/standalone.py``) compute evaluation edges with
    this very function.
    """
    positions = torch.arange(num_edges, device=device, dtype=torch.float32).expand(num_rays, -1)
    return positions / max(num_edges - 1, 1)


def interval_edges(near: Tensor, far: Tensor, fractions: Tensor) -> Tensor:
    """``[R, K]`` edges at ``fractions [R, K]`` of ``[near, max(far, near)]`` (``near, far [R]``).

    Pure torch, shared by training-side and exported samplers.
    """
    lo = near[:, None]
    hi = torch.maximum(far, near)[:, None]
    return lo + (hi - lo) * fractions.to(lo.dtype)


def stratified_edges(
    rays: Rays, num_intervals: int, *, jitter: bool, generator: torch.Generator | None = None
) -> Tensor:
    """``[R, N + 1]`` edges of ``N`` equal intervals over ``[near, far]`` (inner edges jittered
    by up to half an interval when ``jitter``); rays with ``far <= near`` get all edges at ``near``.

    Eager only, as :func:`stratified_fractions`; in a ``standalone()`` module:
    ``interval_edges(near, far, even_fractions(R, N + 1, device))``.
    """
    fractions = stratified_fractions(
        len(rays), num_intervals + 1, jitter=jitter, device=rays.device, generator=generator
    )
    return interval_edges(rays.near, rays.far, fractions)


def dense_edges(samples: PackedSamples, per_ray: int) -> Tensor:
    """``[R, per_ray + 1]`` edges of packed samples that have exactly ``per_ray`` contiguous
    intervals per ray (as :meth:`PackedSamples.from_dense` makes them)."""
    num_rays = samples.num_rays
    starts = samples.t_starts.view(num_rays, per_ray)
    return torch.cat([starts, samples.t_ends.view(num_rays, per_ray)[:, -1:]], dim=-1)
