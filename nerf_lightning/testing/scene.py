"""The kit's synthetic scene: a soft spherical shell of density in a cube, and a fixed bundle of rays
around and through it (some start inside the box, some miss it). :func:`~nerf_lightning.testing.
check_sampler` runs every sampler on it; sampler authors may use it in their own tests.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.core.types import Rays, SceneBox

SCENE_HALF_SIZE = 1.5
"""Half the side of the synthetic scene box (world units)."""
MIN_NEAR = 0.05
"""Near plane of the synthetic rays, as the data pipeline clamps ``near`` (world units)."""
NUM_RAYS = 32
"""Rays in the synthetic bundle: 28 from a ring of cameras, 1 from inside the box, 3 that miss."""
MISSED_RAYS = (3, 12, 25)
"""Positions of the rays that miss the box in the synthetic bundle."""
INSIDE_RAY = 7
"""Position of the ray whose origin lies inside the box (``near`` is the near plane)."""


def synthetic_scene_box() -> SceneBox:
    """The cube ``[-1.5, 1.5]^3`` that bounds the synthetic scene."""
    return SceneBox.cube(SCENE_HALF_SIZE)


def synthetic_density(positions: Tensor) -> Tensor:
    """A soft spherical shell of radius 0.5: ``50 * exp(-(|x| - 0.5)^2 / 0.01)``.

    Args:
        positions: ``[S, 3]`` world positions.

    Returns:
        ``[S]`` non-negative density (differentiable in ``positions``).
    """
    radius = positions.norm(dim=-1)
    return 50.0 * torch.exp(-((radius - 0.5) ** 2) / 0.01)


class SyntheticField(nn.Module):
    """The synthetic scene as an exported field's module: what ``standalone(field)`` receives in the kit.

    ``density(positions [S, 3]) -> [S]`` is :func:`synthetic_density`; ``forward(positions,
    directions)`` returns it with a constant grey ``rgb [S, 3]``.
    """

    def density(self, positions: Tensor) -> Tensor:
        return synthetic_density(positions)

    def forward(self, positions: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        density = synthetic_density(positions)
        return density, torch.full((positions.shape[0], 3), 0.5, dtype=density.dtype, device=density.device)


def synthetic_field() -> SyntheticField:
    """The synthetic scene as a torch-only field module (:class:`SyntheticField`), to hand to a sampler's
    ``standalone(field)`` in your own tests."""
    return SyntheticField()


def synthetic_rays(device: str | torch.device = "cpu") -> Rays:
    """A fixed bundle of ``R = 32`` unit-direction rays through :func:`synthetic_scene_box`.

    28 rays start on a ring of radius 3 around the box (heights in ``[-0.5, 0.5]``) and aim at
    random points inside the box, one ray starts inside the box (its ``near`` is the near
    plane 0.05) and three rays miss the box (``far <= near``: one passes just above it, one
    runs parallel to a face outside it, one has the box behind it). ``near``/``far`` come from
    ``SceneBox.intersect`` with ``near`` clamped to 0.05, as the data pipeline does.

    Returns:
        ``Rays`` with origins ``[32, 3]``, directions ``[32, 3]``, near ``[32]``, far ``[32]``.
    """
    gen = torch.Generator().manual_seed(20240611)
    num_ring = NUM_RAYS - len(MISSED_RAYS) - 1
    angle = 2.0 * torch.pi * (torch.arange(num_ring) + 0.3 * torch.rand(num_ring, generator=gen)) / num_ring
    height = torch.rand(num_ring, generator=gen) - 0.5
    ring_origins = torch.stack([3.0 * angle.cos(), 3.0 * angle.sin(), height], dim=-1)
    targets = (torch.rand(num_ring, 3, generator=gen) - 0.5) * 1.6
    ring_directions = targets - ring_origins
    special_origins = {
        INSIDE_RAY: ([0.2, -0.1, 0.3], [1.0, 0.5, -0.2]),  # starts inside the box
        MISSED_RAYS[0]: ([3.0, 0.0, 1.6], [-1.0, 0.0, 0.0]),  # passes just above the box
        MISSED_RAYS[1]: ([0.0, 3.0, 0.0], [1.0, 0.0, 0.0]),  # parallel to a face, outside
        MISSED_RAYS[2]: ([3.0, 3.0, 3.0], [1.0, 1.0, 1.0]),  # the box is behind the origin
    }
    origins, directions, ring = [], [], 0
    for index in range(NUM_RAYS):
        if index in special_origins:
            origin, direction = special_origins[index]
            origins.append(torch.tensor(origin))
            directions.append(torch.tensor(direction))
        else:
            origins.append(ring_origins[ring])
            directions.append(ring_directions[ring])
            ring += 1
    origins_t = torch.stack(origins)
    directions_t = torch.stack(directions)
    directions_t = directions_t / directions_t.norm(dim=-1, keepdim=True)
    entry, exit_ = synthetic_scene_box().intersect(origins_t, directions_t)
    rays = Rays(origins=origins_t, directions=directions_t, near=entry.clamp_min(MIN_NEAR), far=exit_)
    return rays.to(device)
