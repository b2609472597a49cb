"""Proposal-network sampling with PDF resampling across levels (mip-NeRF 360, nerfacto)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.core.types import DensityFn, PackedSamples, Rays, SceneBox
from nerf_lightning.nn.contraction import check_contraction
from nerf_lightning.samplers.base import Sampler
from nerf_lightning.samplers.hierarchical import DensityNetwork, dense_weights
from nerf_lightning.samplers.intervals import dense_edges, interval_edges, stratified_fractions
from nerf_lightning.samplers.pdf import distortion_loss, interlevel_loss, sample_pdf
from nerf_lightning.samplers.spacing import SPACINGS, box_exit_distance, spaced_distances
from nerf_lightning.samplers.standalone import ProposalSteps


class Proposal(Sampler):
    """Small proposal density networks decide, level by level, where the field is sampled.

    Level 0 places ``proposal_samples[0]`` stratified intervals over ``[near, far]``, even under
    the ``spacing`` function; each proposal network weighs its level's intervals and the next
    level's intervals are drawn from those weights (inverse-CDF resampling, in the spacing's
    fractions: piecewise constant in ``1 / t`` beyond the box, say, not in ``t``); the last draw
    gives the ``num_samples`` intervals the field is evaluated at. The proposal networks are
    owned by the sampler and trained only by the interlevel (histogram) loss, which asks each
    proposal's weights to bound the field's final weights from above.

    Args:
        proposal_samples: intervals at each proposal level (one network per entry).
        num_samples: intervals given to the field.
        proposal_max_resolution: finest hash-grid resolution of each proposal network.
        loss_weight: weight of the interlevel loss.
        spacing: ``linear`` (even in distance: bounded scenes), ``disparity`` (even in
            ``1 / t``: forward-facing captures) or ``linear_disparity`` (even in distance until
            the ray leaves the scene box, even in ``1 / t`` beyond: unbounded scenes, with rays
            that run past the box); see :mod:`nerf_lightning.samplers.spacing`.
        contraction: how the proposal networks see positions; give it the field's contraction
            (``none``, ``l2``, ``linf``; :mod:`nerf_lightning.nn.contraction`).
        anneal_steps: over the first this many training steps, the proposal weights are raised to
            a power rising from 0 to 1 before resampling (nerfacto's annealing, slope 10): early
            samples spread along the whole ray while the proposal networks know nothing yet, so
            the field is not starved of the surface it has yet to find. ``0`` turns it off.
        distortion_loss_weight: weight of mip-NeRF 360's distortion loss on the field's final
            weights, measured in the spacing's fractions: it pulls each ray's weight into one
            compact interval, which removes the semi-transparent clouds a field otherwise leaves
            in front of views it cannot explain. ``0`` turns it off.
        distortion_loss_start: the training step (the one ``update`` is given: the trainer's global
            step, which a resumed run continues) from which the distortion loss counts (``0``: from
            the first): the field can take its coarse shape before each ray's weight is
            pulled together.
    """

    def __init__(
        self,
        proposal_samples: tuple[int, ...] = (64, 32),
        num_samples: int = 32,
        proposal_max_resolution: tuple[int, ...] = (128, 256),
        loss_weight: float = 1.0,
        spacing: str = "linear",
        contraction: str = "none",
        anneal_steps: int = 0,
        distortion_loss_weight: float = 0.0,
        distortion_loss_start: int = 0,
    ) -> None:
        super().__init__()
        if spacing not in SPACINGS:
            raise ValueError(f"spacing must be one of {', '.join(SPACINGS)}, got {spacing!r}")
        check_contraction(contraction)
        if len(proposal_samples) != len(proposal_max_resolution) or not proposal_samples:
            raise ValueError(f"proposal_samples and proposal_max_resolution must have one entry per level "
                             f"(at least one), got {list(proposal_samples)} and "
                             f"{list(proposal_max_resolution)}")
        if min(proposal_samples) < 1 or num_samples < 1:
            raise ValueError(f"proposal_samples and num_samples must be >= 1, got {list(proposal_samples)} "
                             f"and {num_samples}")
        self.proposal_samples = tuple(proposal_samples)
        self.num_samples = num_samples
        self.loss_weight = loss_weight
        self.spacing = spacing
        self.networks = nn.ModuleList(DensityNetwork(max_resolution=res, contraction=contraction)
                                      for res in proposal_max_resolution)
        self.anneal_steps = anneal_steps
        self.distortion_loss_weight = distortion_loss_weight
        if distortion_loss_start < 0:
            raise ValueError(f"distortion_loss_start must be >= 0, got {distortion_loss_start}")
        self.distortion_loss_start = distortion_loss_start
        # whether this step counts the loss: update sets it; until then, as at step 0
        self._distorting = distortion_loss_start == 0
        self._anneal = 1.0  # the power of the proposal weights at this step (update sets it)
        self._levels: list[tuple[Tensor, Tensor]] = []  # (edges, weights) per level, last training pass
        self._final_fractions: Tensor | None = None  # [R, N + 1] of the last training pass (distortion)

    def set_scene_box(self, box: SceneBox) -> None:
        for network in self.networks:
            network.bounds.copy_(box.as_tensor())

    def update(self, step: int, density_fn: DensityFn, *, generator: torch.Generator | None = None) -> None:
        self._distorting = step >= self.distortion_loss_start
        if self.anneal_steps > 0:
            progress = min(step / self.anneal_steps, 1.0)
            self._anneal = 10.0 * progress / (9.0 * progress + 1.0)  # nerfacto's bias(x, slope=10)

    def forward(
        self, rays: Rays, density_fn: DensityFn | None = None, *, generator: torch.Generator | None = None
    ) -> PackedSamples:
        fractions = stratified_fractions(len(rays), self.proposal_samples[0] + 1, jitter=self.training,
                                         device=rays.device, generator=generator)
        linear = self.spacing == "linear"
        bounds = self.networks[0].bounds
        pivot = rays.near if linear else box_exit_distance(rays.origins, rays.directions, bounds)

        def distances(fractions: Tensor) -> Tensor:
            if linear:
                return interval_edges(rays.near, rays.far, fractions)
            return spaced_distances(fractions, rays.near, rays.far, pivot, self.spacing)

        edges = distances(fractions)
        levels: list[tuple[Tensor, Tensor]] = []
        next_counts = [*self.proposal_samples[1:], self.num_samples]
        for network, next_count in zip(self.networks, next_counts, strict=True):
            with torch.set_grad_enabled(self.training and torch.is_grad_enabled()):
                weights = dense_weights(network, rays, edges)
            levels.append((edges, weights))
            if self.training and self._anneal < 1.0:
                weights = weights.detach().clamp_min(0.0) ** self._anneal
            if linear:  # resampled in distance itself (bitwise as before spacings existed)
                edges = sample_pdf(edges, weights, next_count, jitter=self.training, generator=generator)
            else:
                fractions = sample_pdf(fractions, weights, next_count, jitter=self.training,
                                       generator=generator)
                edges = distances(fractions)
        self._levels = levels if self.training else []
        if self.training and self.distortion_loss_weight > 0 and self._distorting:
            span = (rays.far - rays.near).clamp_min(1e-12)[:, None]
            self._final_fractions = fractions if not linear else (edges - rays.near[:, None]) / span
        return PackedSamples.from_dense(edges)

    def standalone(self, field: nn.Module) -> ProposalSteps:
        """The evaluation levels with copies of the proposal networks (``field`` is not needed)."""
        networks = nn.ModuleList(network.standalone() for network in self.networks)
        return ProposalSteps(list(self.proposal_samples), self.num_samples, networks, self.spacing,
                             self.networks[0].bounds.detach().cpu())

    def auxiliary_loss(self, samples: PackedSamples, weights: Tensor) -> Tensor | None:
        if not self._levels:
            return None
        num_rays, per_ray = samples.num_rays, self.num_samples
        final_edges = dense_edges(samples, per_ray)
        final_weights = weights.view(num_rays, per_ray)
        # samples may hold only the leading rays of the forward's batch (a step's sample ceiling).
        loss = self.loss_weight * sum(
            interlevel_loss(final_edges, final_weights, edges[:num_rays], level_weights[:num_rays])
            for edges, level_weights in self._levels
        )
        self._levels = []
        if self._final_fractions is not None:
            fractions, self._final_fractions = self._final_fractions[:num_rays], None
            loss = loss + self.distortion_loss_weight * distortion_loss(fractions.detach(), final_weights)
        return loss
