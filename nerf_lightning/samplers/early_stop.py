"""When the occupancy grid's early-termination pass pays: the decision and the probe rays that measure it.

The pass drops marching steps behind surfaces at the cost of one density query per step. The grid
measures, at each update, what share of the steps of random probe rays it would drop, and runs it
only while that share is high enough, with hysteresis (see ``OccupancyGrid``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.types import Rays, SceneBox


def early_stop_stays_active(active: bool, drop: float, min_drop: float, band: float) -> bool:
    """Whether the early-termination pass runs after measuring that it drops ``drop`` of the
    candidates: it starts at ``min_drop + band``, stops below ``min_drop - band``, and inside
    that band keeps its state (``min_drop <= 0``: it always runs)."""
    if min_drop <= 0.0:
        return True
    return drop >= (min_drop - band if active else min_drop + band)


def probe_rays(bounds: Tensor, count: int, generator: torch.Generator | None) -> Rays:
    """``count`` random rays through the box ``bounds [2, 3]`` from all directions (entering it at
    ``near``), drawn from ``generator``."""
    device = bounds.device
    lower, upper = bounds[0], bounds[1]
    center, radius = 0.5 * (lower + upper), 0.75 * float((upper - lower).norm())
    towards = torch.randn(count, 3, device=device, generator=generator)
    origins = center - radius * nn.functional.normalize(towards, dim=-1)
    targets = lower + (upper - lower) * torch.rand(count, 3, device=device, generator=generator)
    directions = nn.functional.normalize(targets - origins, dim=-1)
    near, far = SceneBox(lower, upper).intersect(origins, directions)
    return Rays(origins, directions, near.clamp(min=0.0), far)
