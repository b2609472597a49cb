"""Stratified sampling with a fixed number of intervals per ray."""

from __future__ import annotations

import torch

from nerf_lightning.samplers.base import Sampler
from nerf_lightning.types import DensityFn, PackedSamples, Rays


class Uniform(Sampler):
    """``num_samples`` intervals per ray covering ``[near, far]``.

    The ``num_samples + 1`` interval edges lie one in each of ``num_samples + 1`` equal strata
    of ``[near, far]``: at a random place in its stratum in training (jitter), at its centre
    in evaluation. The first interval starts at the first edge and the last ends at the last.
    Rays that miss the scene get zero-length intervals.

    Args:
        num_samples: intervals per ray.
        jitter: randomise edges within their strata during training.
    """

    def __init__(self, num_samples: int = 64, jitter: bool = True) -> None:
        super().__init__()
        if num_samples < 1:
            raise ValueError(f"Uniform: num_samples must be >= 1, got {num_samples}")
        self.num_samples = num_samples
        self.jitter = jitter

    def forward(self, rays: Rays, density_fn: DensityFn | None = None, *,
                generator: torch.Generator | None = None) -> PackedSamples:
        num_rays, num_edges = len(rays), self.num_samples + 1
        device = rays.device
        if self.training and self.jitter:
            offsets = torch.rand(num_rays, num_edges, device=device, generator=generator)
        else:
            offsets = torch.full((num_rays, num_edges), 0.5, device=device)
        fractions = (torch.arange(num_edges, device=device) + offsets) / num_edges
        near = rays.near[:, None]
        far = torch.maximum(rays.far, rays.near)[:, None]
        t_edges = near + (far - near) * fractions
        return PackedSamples.from_dense(t_edges)
