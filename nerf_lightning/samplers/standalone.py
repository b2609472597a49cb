"""Torch-only twins of the fixed-count built-in samplers, returned by their ``standalone()`` hooks.

A sampler's standalone module has one signature (:meth:`nerf_lightning.samplers.Sampler.standalone`):
``forward(origins [R, 3], directions [R, 3], near [R], far [R]) -> (t_starts [S], t_ends [S],
ray_indices [S])``, the packed samples of the sampler's evaluation mode. The classes here compute
them with the functions the training-side samplers call (``intervals.even_fractions``,
``intervals.interval_edges``, ``pdf.invert_cdf``, ``rendering.packed.render_weights``), so the two
sample alike by construction, and they compile with ``torch.export`` (any ``R``: ``S = R N``) and
``torch.jit.script``:

- :class:`UniformSteps` ≙ ``Uniform`` (equal intervals over ``[near, far]``);
- :class:`HierarchicalSteps` ≙ ``Hierarchical`` (coarse pass weighed by a density module, fine pass
  drawn from its weights);
- :class:`ProposalSteps` ≙ ``Proposal`` (proposal networks resampling level by level);
- :class:`DensityNetworkTwin` ≙ their ``DensityNetwork``; :class:`FieldDensity` wraps the exported
  field's ``density`` as a module (``Hierarchical`` without a network of its own).

``OccupancyGrid``'s twin, whose sample count depends on the data, lives next to its marching
function (:class:`nerf_lightning.samplers.occupancy.marching.OccupancyMarcher`).

:func:`pack_dense_edges`, :func:`dense_midpoints` and :func:`dense_weights` are public for plugin
authors, through :mod:`nerf_lightning.samplers.toolkit` (``docs/samplers.md``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.nn.contraction import positions_to_unit_cube  # compiled in
from nerf_lightning.nn.encodings import HashGridLookup
from nerf_lightning.rendering.packed import render_weights  # compiled in
from nerf_lightning.samplers.intervals import even_fractions, interval_edges  # compiled in
from nerf_lightning.samplers.pdf import DEFAULT_PADDING, invert_cdf, merge_edges  # compiled in
from nerf_lightning.samplers.spacing import box_exit_distance, spaced_distances  # compiled in

__all__ = [
    "DensityNetworkTwin",
    "FieldDensity",
    "HierarchicalSteps",
    "ProposalSteps",
    "UniformSteps",
    "dense_midpoints",
    "dense_weights",
    "pack_dense_edges",
]


def pack_dense_edges(edges: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``[R, N + 1]`` sorted edges per ray → ``(t_starts [R N], t_ends [R N], ray_indices [R N])``,
    the packing of ``PackedSamples.from_dense`` as a standalone sampler returns it.

    Pure torch: call it from a sampler's ``standalone()`` module (``torch.export`` and
    ``torch.jit.script`` both compile it).
    """
    num_rays = edges.shape[0]
    per_ray = edges.shape[1] - 1
    # arange + expand rather than repeat_interleave: the same indices, and a plain view for torch.export.
    ray_indices = torch.arange(num_rays, device=edges.device)[:, None].expand(num_rays, per_ray).reshape(-1)
    return edges[:, :-1].reshape(-1), edges[:, 1:].reshape(-1), ray_indices


def dense_midpoints(origins: Tensor, directions: Tensor, edges: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(positions [R N, 3], deltas [R N], ray_indices [R N])`` of the intervals ``edges [R, N + 1]``
    of rays ``origins, directions [R, 3]`` (midpoints as ``PackedSamples.positions`` computes them)."""
    starts, ends, ray_indices = pack_dense_edges(edges)
    positions = origins[ray_indices] + directions[ray_indices] * (0.5 * (starts + ends))[:, None]
    return positions, ends - starts, ray_indices


def dense_weights(density: Tensor, deltas: Tensor, ray_indices: Tensor, edges: Tensor) -> Tensor:
    """``[R, N]`` rendering weights of the intervals ``edges [R, N + 1]`` given their ``density``,
    ``deltas`` and ``ray_indices`` (``[R N]`` each, from :func:`dense_midpoints`)."""
    num_rays = edges.shape[0]
    weights, _ = render_weights(density, deltas, ray_indices, num_rays)
    return weights.view(num_rays, edges.shape[1] - 1)  # explicit sizes: R may be 0


class UniformSteps(nn.Module):
    """``num_samples`` equal intervals per ray over ``[near, max(far, near)]``."""

    def __init__(self, num_samples: int) -> None:
        super().__init__()
        self.num_samples = int(num_samples)

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor,
                far: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        fractions = even_fractions(origins.shape[0], self.num_samples + 1, origins.device)
        return pack_dense_edges(interval_edges(near, far, fractions))


class FieldDensity(nn.Module):
    """``forward(positions [S, 3]) -> [S]``: the exported field's ``density`` (the field is shared)."""

    def __init__(self, field: nn.Module) -> None:
        super().__init__()
        self.field = field

    def forward(self, positions: Tensor) -> Tensor:
        return self.field.density(positions)


class DensityNetworkTwin(nn.Module):
    """A sampler's hash-grid density network: ``softplus(mlp(hash(unit position)) - 1)``.

    Args:
        encoder: the hash encoding.
        mlp: ``[S, L F] → [S, 1]``.
        bounds: ``[2, 3]`` the network's box.
        contraction: how positions reach the grid (``positions_to_unit_cube``).
    """

    def __init__(self, encoder: HashGridLookup, mlp: nn.Module, bounds: Tensor,
                 contraction: str = "none") -> None:
        super().__init__()
        self.encoder = encoder
        self.mlp = mlp
        self.register_buffer("bounds", bounds.detach().clone().float())
        self.contraction = contraction

    def forward(self, positions: Tensor) -> Tensor:
        """``[S]`` density at world ``positions [S, 3]``."""
        unit = positions_to_unit_cube(positions, self.bounds, self.contraction)
        return nn.functional.softplus(self.mlp(self.encoder(unit))[:, 0].float() - 1.0)


class HierarchicalSteps(nn.Module):
    """``num_coarse`` equal intervals weighed by ``density``, ``num_fine`` edges drawn from those
    weights at evenly spaced CDF positions, merged: ``num_coarse + num_fine`` intervals per ray.

    Args:
        num_coarse, num_fine: as ``Hierarchical``'s.
        density: ``forward(positions [S, 3]) -> [S]``: the coarse network or :class:`FieldDensity`.
    """

    def __init__(self, num_coarse: int, num_fine: int, density: nn.Module) -> None:
        super().__init__()
        self.num_coarse = int(num_coarse)
        self.num_fine = int(num_fine)
        self.density = density
        self.padding = DEFAULT_PADDING  # an attribute: TorchScript reads no module-level floats

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor,
                far: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        num_rays, device = origins.shape[0], origins.device
        coarse = interval_edges(near, far, even_fractions(num_rays, self.num_coarse + 1, device))
        positions, deltas, ray_indices = dense_midpoints(origins, directions, coarse)
        weights = dense_weights(self.density(positions), deltas, ray_indices, coarse)
        # num_fine + 2 edges whose two ends repeat near and far: the num_fine inner ones are new.
        u = even_fractions(num_rays, self.num_fine + 2, device)
        fine = invert_cdf(coarse, weights, u, self.padding)
        return pack_dense_edges(merge_edges(coarse, fine[:, 1:-1]))


class ProposalSteps(nn.Module):
    """``proposal_samples[0]`` evenly spaced intervals; each network weighs its level's intervals and
    the next level's are drawn from those weights; the last draw gives ``num_samples`` intervals per ray.

    Args:
        proposal_samples: intervals per level (one network each).
        num_samples: intervals of the last draw.
        networks: the proposal density networks (:class:`DensityNetworkTwin`).
        spacing: ``linear`` draws in distance; any other spacing of
            :mod:`~nerf_lightning.samplers.spacing` draws in its fractions.
        bounds: ``[2, 3]`` the scene box (``linear_disparity``'s pivot is where rays leave it).
    """

    def __init__(self, proposal_samples: list[int], num_samples: int, networks: nn.ModuleList,
                 spacing: str = "linear", bounds: Tensor | None = None) -> None:
        super().__init__()
        if len(proposal_samples) != len(networks):
            raise ValueError(f"networks must hold one network per proposal level, got {len(networks)} for "
                             f"{len(proposal_samples)} levels")
        self.first_count = int(proposal_samples[0])
        self.next_counts = [int(n) for n in proposal_samples[1:]] + [int(num_samples)]
        self.networks = networks
        self.padding = DEFAULT_PADDING  # an attribute: TorchScript reads no module-level floats
        self.spacing = spacing
        box = bounds if bounds is not None else torch.zeros(2, 3)
        self.register_buffer("bounds", box.detach().clone().float())

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor,
                far: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        num_rays, device = origins.shape[0], origins.device
        fractions = even_fractions(num_rays, self.first_count + 1, device)
        if self.spacing == "linear":
            edges = interval_edges(near, far, fractions)
            pivot = near
        else:
            pivot = box_exit_distance(origins, directions, self.bounds)
            edges = spaced_distances(fractions, near, far, pivot, self.spacing)
        for level, network in enumerate(self.networks):
            positions, deltas, ray_indices = dense_midpoints(origins, directions, edges)
            weights = dense_weights(network(positions), deltas, ray_indices, edges)
            u = even_fractions(num_rays, self.next_counts[level] + 1, device)
            if self.spacing == "linear":
                edges = invert_cdf(edges, weights, u, self.padding)
            else:
                fractions = invert_cdf(fractions, weights, u, self.padding)
                edges = spaced_distances(fractions, near, far, pivot, self.spacing)
        return pack_dense_edges(edges)
