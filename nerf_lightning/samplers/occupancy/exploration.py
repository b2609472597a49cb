"""The occupancy grid's starvation guard: random marching steps for training rays that got none.

A ray whose cells are all unoccupied gets no samples and so no gradient, so the field could never
grow density there and the grid never recover (a known failure of occupancy-grid training). Such
rays, and rays whose every step the density pass dropped (possible only with an ``alpha_threshold``
above 0), receive a few steps of their own marching lattice at random places along them.

Shapes: ``R`` rays, ``S`` marched steps, ``E`` exploration steps per ray.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nerf_lightning.samplers.occupancy.stepping import step_distance, step_number


@dataclass(frozen=True)
class StepLattice:
    """The rays' marching steps, as :func:`~nerf_lightning.samplers.occupancy.marching.march_occupied_steps`
    lays them out.

    Attributes:
        origin: ``[R]`` where each ray's step ``0`` begins
            (:func:`~nerf_lightning.samplers.occupancy.stepping.lattice_origin`): a distance for fixed
            steps, a step number for growing ones (``numbered``).
        step_size, cone_angle: the smallest step and how steps grow with distance.
    """

    origin: Tensor
    step_size: float
    cone_angle: float

    @property
    def numbered(self) -> bool:
        """Whether ``origin`` is a step number (steps grow with distance)."""
        return self.cone_angle > 0.0

    def reach(self, near: Tensor, far: Tensor) -> Tensor:
        """``[R]`` steps that fit between ``near`` and ``far`` (at least 1)."""
        if self.numbered:
            span = step_number(far, self.step_size, self.cone_angle) - step_number(
                near, self.step_size, self.cone_angle)
            return span.clamp(min=1.0)
        return ((far - near) / self.step_size).clamp(min=1.0)

    def bounds(self, picks: Tensor) -> tuple[Tensor, Tensor]:
        """Unclipped ``(begins, ends) [R, E]`` of the steps numbered ``picks [R, E]`` (int64)."""
        origin, step = self.origin[:, None], self.step_size
        if self.numbered:
            return (step_distance(origin + picks, step, self.cone_angle),
                    step_distance(origin + (picks + 1), step, self.cone_angle))
        return origin + picks * step, origin + (picks + 1) * step


def explore_starving(
    ray_index: Tensor, starts: Tensor, ends: Tensor, near: Tensor, far: Tensor, lattice: StepLattice,
    count: int, max_step: int, generator: torch.Generator | None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Add ``count`` distinct random lattice steps to each ray that has no sample.

    Args:
        ray_index, starts, ends: ``[S]`` the marched steps, grouped by ray and ordered along it.
        near, far: ``[R]`` each ray's marching interval (``far <= near``: a ray that misses).
        lattice: the rays' marching steps.
        count: ``E``, the steps added to a starving ray (fewer when picks coincide).
        max_step: the last step number of the lattice.
        generator: the source of the random picks.

    Returns:
        The merged ``ray_index, starts, ends`` (still grouped by ray and ordered along it).
    """
    num_rays, device = near.shape[0], near.device
    kept_per_ray = torch.zeros(num_rays, dtype=torch.long, device=device)
    kept_per_ray.index_add_(0, ray_index, torch.ones_like(ray_index))
    starving = (kept_per_ray == 0) & (far > near)
    fraction = torch.rand(num_rays, count, device=device, generator=generator)
    reach = lattice.reach(near, far)  # steps that fit inside the ray
    picks = (fraction * reach[:, None]).long().clamp_max(max_step).sort(dim=1).values
    distinct = torch.ones_like(picks, dtype=torch.bool)
    distinct[:, 1:] = picks[:, 1:] != picks[:, :-1]
    begins, finishes = lattice.bounds(picks)
    extra_starts = begins.maximum(near[:, None])
    extra_ends = finishes.minimum(far[:, None])
    chosen = starving[:, None] & distinct & (extra_ends > extra_starts)
    extra_rays = torch.arange(num_rays, device=device)[:, None].expand_as(picks)[chosen]
    merged_rays = torch.cat([ray_index, extra_rays])
    order = torch.sort(merged_rays, stable=True).indices  # starving rays had no other samples
    return (
        merged_rays[order],
        torch.cat([starts, extra_starts[chosen]])[order],
        torch.cat([ends, extra_ends[chosen]])[order],
    )
