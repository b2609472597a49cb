"""Pure functions over packed samples (flat per-sample tensors plus ray indices).

No Python loops over rays and no host synchronisation: every function works for any number
of samples per ray, including rays with none. ``S`` is the number of samples, ``R`` of rays.

Gathers that carry gradients use ``index_select``, whose backward (``index_add_``) adds in index
order however many CPU threads run, so training stays bitwise repeatable; the backward of
advanced indexing (``x[idx]``) adds from several threads at once above the parallel grain.
"""

from __future__ import annotations

import torch
from torch import Tensor


def first_sample_indices(ray_indices: Tensor, num_rays: int) -> Tensor:
    """``[R]`` index of the first sample of each ray (rays without samples get the next ray's).

    Args:
        ray_indices: ``[S]`` sorted int64 ray index of each sample.
        num_rays: ``R``.
    """
    counts = torch.zeros(num_rays, dtype=torch.long, device=ray_indices.device)
    counts.index_add_(0, ray_indices, torch.ones_like(ray_indices))
    return torch.cumsum(counts, dim=0) - counts


def exclusive_sum_per_ray(values: Tensor, ray_indices: Tensor, num_rays: int) -> Tensor:
    """Sum of the preceding samples' ``values`` within the same ray, ``[S]``.

    The global running sum is taken in float64 so that subtracting the start of each ray
    loses no precision even for millions of samples.

    Args:
        values: ``[S]`` per-sample values.
        ray_indices: ``[S]`` sorted int64 ray index of each sample.
        num_rays: ``R``.
    """
    values64 = values.double()
    exclusive = torch.cumsum(values64, dim=0) - values64
    # One zero past the end gives every ray a valid start, also a ray without samples (its first
    # index is S) and an empty batch: no branch on S, which torch.export (where S may be a
    # data-dependent size) could not trace.
    padded = torch.cat([exclusive, exclusive.new_zeros(1)])
    ray_start = padded.index_select(0, first_sample_indices(ray_indices, num_rays))  # [R]
    return (exclusive - ray_start.index_select(0, ray_indices)).to(values.dtype)


def accumulate_along_rays(weights: Tensor, ray_indices: Tensor, num_rays: int,
                          values: Tensor | None = None) -> Tensor:
    """Per-ray weighted sums.

    Args:
        weights: ``[S]`` per-sample weights.
        ray_indices: ``[S]`` int64 ray index of each sample.
        num_rays: ``R``.
        values: ``[S, C]`` values to weight, or ``None`` to sum the weights themselves.

    Returns:
        ``[R, C]`` (or ``[R]`` when ``values`` is ``None``).
    """
    if values is None:
        out = torch.zeros(num_rays, dtype=weights.dtype, device=weights.device)
        return out.index_add(0, ray_indices, weights)
    out = torch.zeros(num_rays, values.shape[-1], dtype=values.dtype, device=values.device)
    return out.index_add(0, ray_indices, weights[:, None] * values)


def render_weights(densities: Tensor, deltas: Tensor, ray_indices: Tensor,
                   num_rays: int) -> tuple[Tensor, Tensor]:
    """Volume-rendering weights of packed samples.

    ``w_i = T_i (1 - exp(-sigma_i delta_i))`` with transmittance ``T_i = exp(-sum_{j<i}
    sigma_j delta_j)`` over the earlier samples of the same ray.

    Args:
        densities: ``[S]`` non-negative densities (1/world unit).
        deltas: ``[S]`` interval lengths (world units).
        ray_indices: ``[S]`` sorted int64 ray index of each sample.
        num_rays: ``R``.

    Returns:
        ``(weights [S], transmittance [S])``, both float32.
    """
    optical_depth = (densities * deltas).float()
    transmittance = torch.exp(-exclusive_sum_per_ray(optical_depth, ray_indices, num_rays))
    alphas = 1.0 - torch.exp(-optical_depth)
    return transmittance * alphas, transmittance


def leading_rays_within(ray_indices: Tensor, num_rays: int, max_samples: int) -> int:
    """How many leading rays have at most ``max_samples`` samples together (at least one ray).

    A host read of two indices when the samples exceed ``max_samples``, none otherwise: meant
    for a hard ceiling that rarely binds.

    Args:
        ray_indices: ``[S]`` sorted int64 ray index of each sample.
        num_rays: ``R``.
        max_samples: the ceiling.

    Returns:
        ``R'`` in ``[1, R]``: the samples of rays ``[0, R')`` number at most ``max_samples``
        (or belong to ray 0 alone, which is kept whatever its count).
    """
    if ray_indices.shape[0] <= max_samples:
        return num_rays
    return max(1, int(ray_indices[max_samples]))
