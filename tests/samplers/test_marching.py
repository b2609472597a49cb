"""The occupancy grid's density pass: two passes that skip what lies behind a surface, same result."""

from __future__ import annotations

import torch

from nerf_lightning.core.types import PackedSamples, Rays
from nerf_lightning.samplers.occupancy.marching import (
    HEAD_STEPS,
    step_midpoints,
    useful_marched_steps,
    useful_steps,
)

STEPS_PER_RAY = 64


def _rays_and_steps(count: int) -> tuple[Rays, PackedSamples]:
    """Rays passing within 0.55 of the origin, each with 64 steps across the ball of radius 0.55: the
    occupied cells of a grid around a ball of radius 0.5, as marching leaves them."""
    generator = torch.Generator().manual_seed(0)
    directions = torch.nn.functional.normalize(torch.randn(count, 3, generator=generator), dim=-1)
    across = torch.linalg.cross(directions, torch.randn(count, 3, generator=generator))
    sideways = torch.nn.functional.normalize(across, dim=-1)
    miss = 0.55 * torch.rand(count, generator=generator)  # distance of each ray from the origin
    origins = -4.0 * directions + miss[:, None] * sideways
    half_chord = (0.55**2 - miss**2).sqrt()
    near, far = 4.0 - half_chord, 4.0 + half_chord
    fractions = torch.linspace(0.0, 1.0, STEPS_PER_RAY + 1)
    steps = PackedSamples.from_dense(near[:, None] + (far - near)[:, None] * fractions)
    return Rays(origins, directions, near, far), steps


def _density(points: torch.Tensor) -> torch.Tensor:
    """An opaque ball of radius 0.5."""
    return 300.0 * torch.sigmoid((0.5 - points.norm(dim=-1)) * 100.0)


def test_density_pass_keeps_what_one_pass_keeps_and_skips_steps_behind_surfaces() -> None:
    rays, samples = _rays_and_steps(512)
    args = (samples.t_starts, samples.t_ends, samples.ray_indices)
    midpoints = step_midpoints(rays.origins, rays.directions, *args[2:], *args[:2])
    expected = useful_steps(_density(midpoints), *args, len(rays), 1e-4, 0.0)

    queried = []

    def counting_density(points: torch.Tensor) -> torch.Tensor:
        queried.append(points.shape[0])
        return _density(points)

    kept = useful_marched_steps(counting_density, rays, samples.ray_indices, samples.t_starts,
                                samples.t_ends, 1e-4, 0.0)
    assert torch.equal(kept, expected)
    # the first pass queries every ray's head, the second the later steps of the rays still transparent
    optical_depth = (_density(midpoints) * samples.deltas).view(len(rays), STEPS_PER_RAY)
    transparent_rays = int((torch.exp(-optical_depth[:, :HEAD_STEPS].sum(dim=1)) > 1e-4).sum())
    assert queried == [len(rays) * HEAD_STEPS, transparent_rays * (STEPS_PER_RAY - HEAD_STEPS)]
    assert 0 < transparent_rays < len(rays) // 2, transparent_rays  # some rays need their later steps
