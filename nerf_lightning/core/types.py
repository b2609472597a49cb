"""Shared data types that flow between stages: rays, packed samples, scene box.

These are the only types that samplers and fields know about. Every tensor is
on the same device; shapes are given in the docstrings with ``R`` the number of
rays and ``S`` the total number of samples over all rays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

DensityFn = Callable[[Tensor], Tensor]
"""Maps world positions ``[S, 3]`` to non-negative volume density ``[S]`` (1/world unit)."""


@dataclass(frozen=True)
class Rays:
    """A bundle of rays in world space.

    Attributes:
        origins: ``[R, 3]`` ray origins (world units).
        directions: ``[R, 3]`` unit-length ray directions, so that ``t`` is a distance.
        near: ``[R]`` distance along the ray where sampling starts.
        far: ``[R]`` distance along the ray where sampling stops; ``far <= near`` marks a
            ray that misses the scene box (samplers give it no samples or empty intervals).
    """

    origins: Tensor
    directions: Tensor
    near: Tensor
    far: Tensor

    def __len__(self) -> int:
        return self.origins.shape[0]

    def __getitem__(self, index: slice | Tensor) -> Rays:
        return Rays(*(getattr(self, f.name)[index] for f in fields(self)))

    def to(self, device: torch.device | str) -> Rays:
        return Rays(*(getattr(self, f.name).to(device) for f in fields(self)))

    @property
    def device(self) -> torch.device:
        return self.origins.device


@dataclass(frozen=True)
class PackedSamples:
    """Intervals along rays, packed into flat tensors (any number of samples per ray).

    Samples of one ray are contiguous, rays appear in increasing ``ray_indices`` order and
    the intervals of one ray are sorted and do not overlap: ``t_starts[i] <= t_ends[i] <=
    t_starts[i + 1]`` whenever samples ``i`` and ``i + 1`` belong to the same ray. Zero-length
    intervals are allowed (a fixed-count sampler gives them to rays that miss the scene) and
    contribute nothing to rendering.

    Attributes:
        t_starts: ``[S]`` interval starts (distance along the ray).
        t_ends: ``[S]`` interval ends.
        ray_indices: ``[S]`` int64 index of the ray each sample belongs to, in ``[0, R)``.
        num_rays: ``R``, the number of rays in the bundle the samples were drawn for
            (rays may have zero samples).
    """

    t_starts: Tensor
    t_ends: Tensor
    ray_indices: Tensor
    num_rays: int

    def __len__(self) -> int:
        return self.t_starts.shape[0]

    @property
    def t_mids(self) -> Tensor:
        """``[S]`` interval midpoints."""
        return 0.5 * (self.t_starts + self.t_ends)

    @property
    def deltas(self) -> Tensor:
        """``[S]`` interval lengths."""
        return self.t_ends - self.t_starts

    def positions(self, rays: Rays) -> Tensor:
        """``[S, 3]`` world positions of the interval midpoints."""
        return rays.origins[self.ray_indices] + rays.directions[self.ray_indices] * self.t_mids[:, None]

    def directions(self, rays: Rays) -> Tensor:
        """``[S, 3]`` direction of the ray of each sample."""
        return rays.directions[self.ray_indices]

    def samples_per_ray(self) -> Tensor:
        """``[R]`` number of samples of each ray (no host synchronisation)."""
        counts = torch.zeros(self.num_rays, dtype=torch.long, device=self.t_starts.device)
        return counts.index_add_(0, self.ray_indices, torch.ones_like(self.ray_indices))

    def leading_rays(self, num_rays: int) -> PackedSamples:
        """The samples of rays ``[0, num_rays)`` only (a host read of one index)."""
        end = int(torch.searchsorted(self.ray_indices, num_rays)) if num_rays < self.num_rays else len(self)
        return PackedSamples(self.t_starts[:end], self.t_ends[:end], self.ray_indices[:end], num_rays)

    def detach(self) -> PackedSamples:
        return replace(self, t_starts=self.t_starts.detach(), t_ends=self.t_ends.detach())

    @staticmethod
    def from_dense(t_edges: Tensor) -> PackedSamples:
        """Pack per-ray sorted interval edges ``[R, N + 1]`` into ``R * N`` samples."""
        num_rays, num_edges = t_edges.shape
        per_ray = num_edges - 1
        ray_indices = torch.arange(num_rays, device=t_edges.device).repeat_interleave(per_ray)
        return PackedSamples(
            t_starts=t_edges[:, :-1].reshape(-1),
            t_ends=t_edges[:, 1:].reshape(-1),
            ray_indices=ray_indices,
            num_rays=num_rays,
        )

    @staticmethod
    def from_counts(t_starts: Tensor, t_ends: Tensor, counts: Tensor) -> PackedSamples:
        """Pack intervals listed ray after ray, given how many each ray has.

        For samplers with a variable number of samples per ray: only the ray indices are
        built, the intervals are used as given.

        Args:
            t_starts: ``[S]`` interval starts: the ``counts[0]`` intervals of ray 0 (sorted
                along it), then the ``counts[1]`` of ray 1, and so on.
            t_ends: ``[S]`` interval ends, in the same order.
            counts: ``[R]`` integer number of intervals of each ray (zeros allowed); they must
                sum to ``S``.

        Returns:
            ``PackedSamples`` with ``S`` samples for ``R`` rays, ``ray_indices [S]`` int64.

        Nothing is checked (this runs in the training loop) and nothing is read back to the
        host: ``S`` is taken from the shape of ``t_starts`` and passed to
        ``torch.repeat_interleave`` as ``output_size`` (without it, on CUDA it would wait for
        the sum of ``counts``).
        """
        num_rays = counts.shape[0]
        ray_indices = torch.repeat_interleave(torch.arange(num_rays, device=counts.device), counts,
                                              output_size=t_starts.shape[0])
        return PackedSamples(t_starts=t_starts, t_ends=t_ends, ray_indices=ray_indices, num_rays=num_rays)

    @staticmethod
    def from_edges(t_edges: Tensor, counts: Tensor) -> PackedSamples:
        """Pack per-ray edge lists laid end to end, ray after ray.

        Ray ``r`` has ``counts[r]`` intervals and therefore ``counts[r] + 1`` sorted edges (a
        ray without intervals still has its one edge): with ``counts = [2, 0, 1]`` the edges
        are ``[a0, a1, a2, b0, c0, c1]`` and the intervals ``[a0, a1], [a1, a2], [c0, c1]``.
        ``from_edges(e.reshape(-1), torch.full((R,), N))`` equals ``from_dense(e)`` for
        ``e [R, N + 1]``.

        Args:
            t_edges: ``[S + R]`` edges, ``counts[r] + 1`` for each ray ``r`` in ray order.
            counts: ``[R]`` integer number of intervals of each ray (zeros allowed).

        Returns:
            ``PackedSamples`` with ``S = len(t_edges) - R`` samples for ``R`` rays.

        As :meth:`from_counts`: nothing is checked and nothing is read back to the host
        (``S`` follows from the shapes).
        """
        num_rays = counts.shape[0]
        num_samples = t_edges.shape[0] - num_rays
        ray_indices = torch.repeat_interleave(torch.arange(num_rays, device=counts.device), counts,
                                              output_size=num_samples)
        # Sample j starts at edge j + (its ray index): each earlier ray has one edge more than intervals.
        first_edge = torch.arange(num_samples, device=t_edges.device) + ray_indices
        # index_select keeps learned edges' gradients bitwise repeatable (see rendering/packed.py).
        return PackedSamples(t_starts=t_edges.index_select(0, first_edge),
                             t_ends=t_edges.index_select(0, first_edge + 1),
                             ray_indices=ray_indices, num_rays=num_rays)


@dataclass(frozen=True)
class SceneBox:
    """Axis-aligned box that bounds the content of a scene (world units).

    Attributes:
        lower: ``[3]`` minimum corner.
        upper: ``[3]`` maximum corner.
    """

    lower: Tensor
    upper: Tensor

    @staticmethod
    def cube(half_size: float, center: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> SceneBox:
        c = torch.tensor(center, dtype=torch.float32)
        return SceneBox(c - half_size, c + half_size)

    def as_tensor(self) -> Tensor:
        """``[2, 3]`` rows ``lower`` and ``upper``."""
        return torch.stack([self.lower, self.upper])

    @staticmethod
    def from_tensor(bounds: Tensor) -> SceneBox:
        return SceneBox(bounds[0], bounds[1])

    def intersect(self, origins: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        """Entry and exit distances ``([R], [R])`` of rays through the box (slab test).

        Rays that miss the box get ``exit <= entry``.
        """
        lower = self.lower.to(origins)
        upper = self.upper.to(origins)
        safe = torch.where(directions.abs() < 1e-9, torch.full_like(directions, 1e-9), directions)
        inv = 1.0 / safe
        t0 = (lower - origins) * inv
        t1 = (upper - origins) * inv
        entry = torch.minimum(t0, t1).amax(dim=-1)
        exit_ = torch.maximum(t0, t1).amin(dim=-1)
        return entry, exit_
