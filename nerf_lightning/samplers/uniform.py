"""Stratified sampling with a fixed number of intervals per ray."""

from __future__ import annotations

import torch
from torch import nn

from nerf_lightning.core.types import DensityFn, PackedSamples, Rays
from nerf_lightning.samplers.base import Sampler
from nerf_lightning.samplers.intervals import stratified_edges
from nerf_lightning.samplers.standalone import UniformSteps


class Uniform(Sampler):
    """``num_samples`` intervals per ray covering ``[near, far]`` exactly.

    In evaluation the intervals are equal. In training (with ``jitter``) each inner edge moves
    to a random place within half an interval of its evaluation position, so the intervals
    stay sorted, still cover ``[near, far]``, and their midpoints vary from step to step.
    Rays that miss the scene get zero-length intervals.

    Args:
        num_samples: intervals per ray.
        jitter: move inner edges by up to half an interval at random during training.
    """

    def __init__(self, num_samples: int = 64, jitter: bool = True) -> None:
        super().__init__()
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        self.num_samples = num_samples
        self.jitter = jitter

    def forward(
        self, rays: Rays, density_fn: DensityFn | None = None, *, generator: torch.Generator | None = None
    ) -> PackedSamples:
        t_edges = stratified_edges(
            rays, self.num_samples, jitter=self.training and self.jitter, generator=generator
        )
        return PackedSamples.from_dense(t_edges)

    def standalone(self, field: nn.Module) -> UniformSteps:
        """Equal intervals, as in evaluation (:class:`~nerf_lightning.samplers.standalone.UniformSteps`)."""
        return UniformSteps(self.num_samples)
