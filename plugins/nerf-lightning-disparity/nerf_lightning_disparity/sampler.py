"""The ``Disparity`` sampler: interval edges linear in disparity ``1/t`` (LLFF's "lindisp")."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.samplers import Sampler
from nerf_lightning.samplers.toolkit import pack_dense_edges
from nerf_lightning.types import DensityFn, PackedSamples, Rays


def disparity_edges(near: Tensor, far: Tensor, u: Tensor, min_near: float) -> Tensor:
    """``[R, N + 1]`` edges at disparity fractions ``u [R, N + 1]`` of each ray's ``[near, far]`` (``[R]``).

    ``near`` is raised to ``min_near`` first. Rays that miss (``far <= near``) get all edges at
    ``near``, rays that end before ``min_near`` all at ``far``. Plain torch, so the sampler and its
    exported twin (:class:`DisparitySteps`) compute their edges with this one function.
    """
    clamped = near.clamp_min(min_near)
    hit = far > clamped
    # Placeholders keep 1/t finite on the rays that are replaced below.
    lo = torch.where(hit, clamped, torch.ones_like(clamped))[:, None]
    hi = torch.where(hit, far, torch.full_like(far, 2.0))[:, None]
    edges = 1.0 / (1.0 / lo + (1.0 / hi - 1.0 / lo) * u)
    edges = torch.minimum(torch.maximum(edges, lo), hi)  # rounding must not leave [near, far]
    edges[:, 0] = lo[:, 0]
    edges[:, -1] = hi[:, 0]
    # Misses sit at near; rays that end before min_near at their far end (inside [near, far]).
    empty_at = torch.where(far > near, far, near)
    return torch.where(hit[:, None], edges, empty_at[:, None].expand_as(edges))


class DisparitySteps(nn.Module):
    """``Disparity`` in evaluation mode, torch only (what :meth:`Disparity.standalone` returns):
    ``forward(origins [R, 3], directions [R, 3], near [R], far [R])`` → ``(t_starts, t_ends,
    ray_indices)``, ``num_samples`` intervals per ray."""

    def __init__(self, num_samples: int, min_near: float) -> None:
        super().__init__()
        self.num_samples = int(num_samples)
        self.min_near = float(min_near)

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor,
                far: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        num_edges = self.num_samples + 1
        u = torch.arange(num_edges, device=near.device, dtype=near.dtype).expand(near.shape[0], -1)
        return pack_dense_edges(disparity_edges(near, far, u / self.num_samples, self.min_near))


class Disparity(Sampler):
    """``num_samples`` intervals per ray whose edges are evenly spaced in disparity ``1/t``.

    With ``u_i = i / num_samples`` the edges of a ray are

        t_i = 1 / (1/near + (1/far - 1/near) * u_i),    i = 0 .. num_samples,

    so the intervals are short close to the camera and grow as ``t^2`` with distance: most
    samples go where a pixel covers little of the scene, and a far range that is large (or
    that ends at a far plane a long way off) costs few samples. This is the usual choice for
    forward-facing captures and unbounded scenes (LLFF's and mip-NeRF 360's "lindisp").

    ``near`` is raised to ``min_near`` first, since ``1/t`` is unbounded at ``t = 0``. In
    training (with ``jitter``) every inner edge moves by up to half a step in ``u`` at random,
    so the edges stay sorted and still span ``[near, far]`` exactly. Rays that miss the scene
    (``far <= near``) get zero-length intervals at ``near``; rays that end before ``min_near``
    get zero-length intervals at ``far``.

    Args:
        num_samples: intervals per ray.
        jitter: move inner edges by up to half a step in disparity at random during training.
        min_near: smallest distance sampled (world units), > 0.
    """

    def __init__(self, num_samples: int = 64, jitter: bool = True, min_near: float = 0.05) -> None:
        super().__init__()
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if not min_near > 0.0:
            raise ValueError(f"min_near must be > 0, got {min_near}")
        self.num_samples = num_samples
        self.jitter = jitter
        self.min_near = min_near

    def fractions(self, num_rays: int, device: torch.device, dtype: torch.dtype,
                  generator: torch.Generator | None = None) -> Tensor:
        """``[R, N + 1]`` edge positions ``u`` in ``[0, 1]``, sorted; jittered in training.

        Args:
            num_rays: ``R``.
            device: device of the result.
            dtype: floating dtype of the result.
            generator: source of the jitter (``None``: torch's default generator).
        """
        num_edges = self.num_samples + 1
        u = torch.arange(num_edges, device=device, dtype=dtype).expand(num_rays, -1)
        if self.training and self.jitter:
            shift = torch.rand(num_rays, num_edges, device=device, dtype=dtype, generator=generator) - 0.5
            shift[:, 0] = 0.0
            shift[:, -1] = 0.0
            u = u + shift
        return u / self.num_samples

    def edges(self, rays: Rays, generator: torch.Generator | None = None) -> Tensor:
        """``[R, N + 1]`` sorted interval edges along each of the ``R`` rays.

        Args:
            rays: ``R`` rays with ``near``/``far`` ``[R]``.
            generator: source of the jitter.
        """
        u = self.fractions(len(rays), rays.device, rays.near.dtype, generator)
        return disparity_edges(rays.near, rays.far, u, self.min_near)

    def forward(self, rays: Rays, density_fn: DensityFn | None = None, *,
                generator: torch.Generator | None = None) -> PackedSamples:
        """Place ``num_samples`` intervals on each ray.

        Args:
            rays: ``R`` rays; origins and directions ``[R, 3]``, near and far ``[R]``.
            density_fn: not used.
            generator: source of the jitter in training.

        Returns:
            ``PackedSamples`` with ``S = R * num_samples`` intervals, ``num_samples`` per ray.
        """
        return PackedSamples.from_dense(self.edges(rays, generator))

    def standalone(self, field: nn.Module) -> DisparitySteps:
        """The evaluation edges as a torch-only module, for ``nerf-lightning export`` (``field`` is
        not needed: the edges depend on ``near`` and ``far`` alone)."""
        return DisparitySteps(self.num_samples, self.min_near)
