"""When the occupancy grid's early-termination pass pays: the decision and the probe rays that measure it.

The density pass is not free: a density query costs a good part of what a training
sample costs (hash-grid lookups dominate both). It pays only when it drops many
candidates, as in scenes with solid objects whose occupied interiors lie behind their
surfaces; in sparse scenes of thin shells it drops few. So at every grid update the
sampler marches ``PROBE_RAYS`` random rays through the box, measures the share of their
steps the pass drops (``early_stop_drop``, a buffer), and runs the pass in training and
evaluation only while that share is at least ``early_stop_min_drop``. Skipping it changes
no image: the samples it would have dropped carry (almost) no weight. Near that share the
pass costs about what it saves, yet every switch changes the samples per ray at once (by a
large share in a solid scene, throwing the sample budget off for a few steps), so the decision
has hysteresis: the pass starts when the share reaches ``early_stop_min_drop +
EARLY_STOP_BAND`` and stops when it falls below ``early_stop_min_drop - EARLY_STOP_BAND``
(``early_stop_active``, a buffer).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.core.types import Rays, SceneBox


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
