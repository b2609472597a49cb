"""Spacing functions: how evenly spaced fractions ``s`` in ``[0, 1]`` become distances ``t`` along a ray.

A sampler that draws its first intervals evenly in ``s`` and resamples in ``s`` places them evenly
in whatever the spacing makes even (mip-NeRF 360's ``s``-space):

- ``linear``: even in ``t`` over ``[near, far]``: bounded scenes;
- ``disparity``: even in ``1 / t``: forward-facing captures, whose content thins out with depth;
- ``linear_disparity``: even in ``t`` up to a per-ray pivot, the distance where the ray leaves the
  scene box, then even in ``1 / t`` out to ``far``, with the two halves of ``s`` split between them
  (nerfacto's piecewise sampler, with the box instead of a unit sphere): unbounded scenes,
  whose box holds the content at full resolution and whose background thins out beyond it.

Each spacing maps ``t`` through a monotone ``g`` (``t``, ``1 / t``, or ``t / (2 p)`` below the pivot
``p`` and ``1 - p / (2 t)`` above it) and sets ``s = (g(t) - g(near)) / (g(far) - g(near))``.

Shapes: ``R`` rays, ``K`` positions per ray. Pure torch: the exported samplers call these very
functions (``torch.export`` traces them, ``torch.jit.script`` compiles them).
"""

from __future__ import annotations

import torch
from torch import Tensor

SPACINGS = ("linear", "disparity", "linear_disparity")
"""The accepted values of a ``spacing`` option."""



def box_exit_distance(origins: Tensor, directions: Tensor, bounds: Tensor) -> Tensor:
    """``[R]`` distance at which each ray leaves the box ``bounds [2, 3]`` (slab test); for rays
    that miss it, the exit of the slab that is left first (a distance near the box anyway).

    ``origins, directions [R, 3]``.
    """
    safe = torch.where(directions.abs() < 1e-9, torch.full_like(directions, 1e-9), directions)
    t0 = (bounds[0] - origins) / safe
    t1 = (bounds[1] - origins) / safe
    return torch.maximum(t0, t1).amin(dim=-1)


# 1e-6 below keeps 1 / t finite (a literal each time: TorchScript reads no module-level floats).


def _forward_map(t: Tensor, pivot: Tensor, spacing: str) -> Tensor:
    """``g(t)`` for ``t [R, K]`` and ``pivot [R, 1]``."""
    if spacing == "disparity":
        return 1.0 / t.clamp_min(1e-6)
    return torch.where(t < pivot, t / (2.0 * pivot), 1.0 - pivot / (2.0 * t.clamp_min(1e-6)))


def _inverse_map(g: Tensor, pivot: Tensor, spacing: str) -> Tensor:
    """``t = g^-1(g)`` for ``g [R, K]`` and ``pivot [R, 1]``."""
    if spacing == "disparity":
        return 1.0 / g.clamp_min(1e-12)
    near_part = 2.0 * g * pivot
    far_part = pivot / (2.0 * (1.0 - g).clamp_min(1e-12))
    return torch.where(g < 0.5, near_part, far_part)


def spaced_distances(fractions: Tensor, near: Tensor, far: Tensor, pivot: Tensor, spacing: str) -> Tensor:
    """``[R, K]`` distances at ``fractions [R, K]`` in ``[0, 1]`` of each ray's ``[near, far]``
    (``near, far, pivot [R]``; ``pivot`` is used by ``linear_disparity`` only; ``K >= 2``).

    ``fractions`` are sorted edges from 0 to 1 (as samplers draw them): the first distance is
    ``near`` and the last ``far`` exactly, and rays with ``far <= near`` get every distance at ``near``.
    """
    near_, far_ = near[:, None], torch.maximum(far, near)[:, None]
    if spacing == "linear":
        return near_ + (far_ - near_) * fractions
    pivot_ = pivot.clamp_min(1e-6)[:, None]
    g_near = _forward_map(near_.clamp_min(1e-6), pivot_, spacing)
    g_far = _forward_map(far_.clamp_min(1e-6), pivot_, spacing)
    t = _inverse_map(g_near + (g_far - g_near) * fractions, pivot_, spacing)
    t = torch.minimum(torch.maximum(t, near_), far_)
    return torch.cat([near_, t[:, 1:-1], far_], dim=-1)
