"""NeRF's coarse-to-fine importance sampling."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.core.types import DensityFn, PackedSamples, Rays, SceneBox
from nerf_lightning.nn.contraction import check_contraction, positions_to_unit_cube
from nerf_lightning.nn.encodings import HashGridEncoding
from nerf_lightning.nn.frozen import frozen_copy
from nerf_lightning.rendering.packed import render_weights
from nerf_lightning.samplers.base import Sampler
from nerf_lightning.samplers.intervals import dense_edges, stratified_edges
from nerf_lightning.samplers.pdf import interlevel_loss, merge_edges, sample_pdf
from nerf_lightning.samplers.standalone import DensityNetworkTwin, FieldDensity, HierarchicalSteps


class DensityNetwork(nn.Module):
    """A small hash-grid density network over the scene box, owned by a sampler.

    Args:
        num_levels, log2_hashmap_size, max_resolution: its hash grid.
        hidden_dim: width of its one hidden layer.
        contraction: how positions reach the grid (``nerf_lightning.nn.contraction``).
    """

    bounds: Tensor

    def __init__(
        self,
        num_levels: int = 5,
        log2_hashmap_size: int = 16,
        max_resolution: int = 128,
        hidden_dim: int = 16,
        contraction: str = "none",
    ) -> None:
        super().__init__()
        self.contraction = check_contraction(contraction)
        self.encoding = HashGridEncoding(num_levels, 2, log2_hashmap_size, 16, max_resolution)
        self.mlp = nn.Sequential(
            nn.Linear(self.encoding.output_dim, hidden_dim), nn.ReLU(inplace=True), nn.Linear(hidden_dim, 1)
        )
        self.register_buffer("bounds", SceneBox.cube(1.5).as_tensor())

    def forward(self, positions: Tensor) -> Tensor:
        """``[S]`` density at world ``positions [S, 3]``."""
        unit = positions_to_unit_cube(positions, self.bounds, self.contraction)
        return nn.functional.softplus(self.mlp(self.encoding(unit))[:, 0].float() - 1.0)  # fp32 in autocast

    def standalone(self) -> DensityNetworkTwin:
        """A torch-only copy for export (weights copied, on the CPU)."""
        return DensityNetworkTwin(self.encoding.standalone(), frozen_copy(self.mlp),
                                  self.bounds.detach().cpu(), self.contraction)


def dense_weights(density_fn: DensityFn, rays: Rays, edges: Tensor) -> Tensor:
    """``[R, N]`` rendering weights of the intervals ``edges [R, N + 1]`` under ``density_fn``."""
    samples = PackedSamples.from_dense(edges)
    density = density_fn(samples.positions(rays))
    weights, _ = render_weights(density, samples.deltas, samples.ray_indices, samples.num_rays)
    return weights.view(edges.shape[0], edges.shape[1] - 1)


class Hierarchical(Sampler):
    """Coarse stratified pass, inverse-CDF resampling of its weights, fine pass (Mildenhall et al.).

    The coarse pass puts ``num_coarse`` stratified intervals over ``[near, far]`` and weighs
    them with a density: the field's own (evaluated without gradient: the fine pass trains
    the field), or, with ``separate_coarse_network``, a small density network owned by the
    sampler and trained by the interlevel loss of mip-NeRF 360 to bound the fine weights.
    ``num_fine`` edges are then drawn from the coarse weights and merged with the coarse
    edges: every ray gets ``num_coarse + num_fine`` intervals covering ``[near, far]``.

    Args:
        num_coarse: intervals of the coarse pass.
        num_fine: edges drawn from the coarse weights.
        separate_coarse_network: weigh the coarse pass with a density network of the sampler's own.
        loss_weight: weight of the interlevel loss (``separate_coarse_network`` only).
    """

    def __init__(
        self,
        num_coarse: int = 32,
        num_fine: int = 64,
        separate_coarse_network: bool = False,
        loss_weight: float = 1.0,
    ) -> None:
        super().__init__()
        if num_coarse < 1 or num_fine < 1:
            raise ValueError(f"num_coarse and num_fine must be >= 1, got {num_coarse} and {num_fine}")
        self.num_coarse = num_coarse
        self.num_fine = num_fine
        self.loss_weight = loss_weight
        self.coarse_network = DensityNetwork() if separate_coarse_network else None
        self._coarse: tuple[Tensor, Tensor] | None = None  # (edges, weights) of the last training pass

    def set_scene_box(self, box: SceneBox) -> None:
        if self.coarse_network is not None:
            self.coarse_network.bounds.copy_(box.as_tensor())

    def forward(
        self, rays: Rays, density_fn: DensityFn | None = None, *, generator: torch.Generator | None = None
    ) -> PackedSamples:
        coarse_edges = stratified_edges(rays, self.num_coarse, jitter=self.training, generator=generator)
        if self.coarse_network is not None:
            coarse_weights = dense_weights(self.coarse_network, rays, coarse_edges)
        elif density_fn is not None:
            with torch.no_grad():
                coarse_weights = dense_weights(density_fn, rays, coarse_edges)
        else:
            coarse_weights = torch.ones_like(coarse_edges[:, 1:])
        # num_fine + 2 edges whose two ends repeat near and far: keep the num_fine inner ones.
        fine_edges = sample_pdf(
            coarse_edges, coarse_weights, self.num_fine + 1, jitter=self.training, generator=generator
        )
        edges = merge_edges(coarse_edges, fine_edges[:, 1:-1])  # [R, num_coarse + num_fine + 1]
        self._coarse = (
            (coarse_edges, coarse_weights) if self.training and self.coarse_network is not None else None
        )
        return PackedSamples.from_dense(edges)

    def standalone(self, field: nn.Module) -> HierarchicalSteps:
        """The evaluation passes, the coarse one weighed by the coarse network or by ``field``'s density."""
        density = self.coarse_network.standalone() if self.coarse_network is not None else FieldDensity(field)
        return HierarchicalSteps(self.num_coarse, self.num_fine, density)

    def auxiliary_loss(self, samples: PackedSamples, weights: Tensor) -> Tensor | None:
        if self._coarse is None:
            return None
        coarse_edges, coarse_weights = self._coarse
        self._coarse = None
        num_rays, per_ray = samples.num_rays, self.num_coarse + self.num_fine
        # samples may hold only the leading rays of the forward's batch (a step's sample ceiling).
        coarse_edges, coarse_weights = coarse_edges[:num_rays], coarse_weights[:num_rays]
        fine_edges = dense_edges(samples, per_ray)
        loss = interlevel_loss(fine_edges, weights.view(num_rays, per_ray), coarse_edges, coarse_weights)
        return self.loss_weight * loss
