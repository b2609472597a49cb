"""The rules every sampler output must follow (packed layout, intervals, sorting) and how a broken
rule is reported: the building blocks of :func:`nerf_lightning.testing.check_sampler`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import torch
from torch import Tensor

from nerf_lightning.core.types import DensityFn, PackedSamples, Rays
from nerf_lightning.rendering.packed import exclusive_sum_per_ray, first_sample_indices

RELATIVE_TOLERANCE = 1e-5
"""Slack of the interval rules, relative to the largest distance in the bundle."""
DEVICE_TOLERANCE = 1e-4
"""Largest difference between CPU and CUDA samples, relative to the largest distance."""


# ---------------------------------------------------------------------------------- reporting
class SamplerContractError(AssertionError):
    """A sampler broke a rule of the contract (raised by :func:`check_sampler`)."""


class Checker:
    """Formats failures as ``check_sampler(Name): rule 'x' broken <where>: <detail>``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.where = ""

    def message(self, rule: str, detail: str) -> str:
        where = f" {self.where}" if self.where else ""
        return f"check_sampler({self.name}): rule '{rule}' broken{where}: {detail}"

    def fail(self, rule: str, detail: str) -> NoReturn:
        raise SamplerContractError(self.message(rule, detail))

    @contextmanager
    def rule(self, rule: str) -> Iterator[None]:
        """Report any exception raised by sampler code inside the block as a break of ``rule``."""
        try:
            yield
        except SamplerContractError:
            raise
        except Exception as error:
            detail = f"raised {type(error).__name__}: {error}"
            raise SamplerContractError(self.message(rule, detail)) from error

    @contextmanager
    def context(self, where: str) -> Iterator[None]:
        previous, self.where = self.where, where
        try:
            yield
        finally:
            self.where = previous


def show(value: Tensor | float) -> str:
    return f"{float(value):.6g}"


def first_true(mask: Tensor) -> int | None:
    """Index of the first ``True`` of a 1-D mask, or ``None``."""
    hits = mask.nonzero()
    return int(hits[0, 0]) if hits.numel() else None


def scale(rays: Rays) -> float:
    """The largest distance among the rays that hit the box (at least 1)."""
    hit = rays.far > rays.near
    scale = 1.0
    if bool(hit.any()):
        scale = max(scale, float(rays.near[hit].abs().max()), float(rays.far[hit].abs().max()))
    return scale


# ------------------------------------------------------------------------------ output rules
def check_samples(ck: Checker, samples: Any, rays: Rays) -> PackedSamples:
    """Check the structural and interval rules of one forward output."""
    if not isinstance(samples, PackedSamples):
        ck.fail("returns PackedSamples", f"forward returned {type(samples).__name__}")
    num_rays = len(rays)
    if not isinstance(samples.num_rays, int) or samples.num_rays != num_rays:
        ck.fail("num_rays equals the ray count", f"num_rays={samples.num_rays!r} for {num_rays} rays")
    tensors = {"t_starts": samples.t_starts, "t_ends": samples.t_ends, "ray_indices": samples.ray_indices}
    for name, tensor in tensors.items():
        if not isinstance(tensor, Tensor) or tensor.dim() != 1:
            shape = tuple(tensor.shape) if isinstance(tensor, Tensor) else type(tensor).__name__
            ck.fail("flat tensors of equal length", f"{name} is {shape}, expected a 1-D tensor [S]")
    starts, ends, indices = samples.t_starts, samples.t_ends, samples.ray_indices
    if not starts.shape == ends.shape == indices.shape:
        ck.fail("flat tensors of equal length", f"t_starts {tuple(starts.shape)}, "
                f"t_ends {tuple(ends.shape)}, ray_indices {tuple(indices.shape)}")
    if not starts.is_floating_point() or ends.dtype != starts.dtype or indices.dtype != torch.int64:
        ck.fail("float intervals and int64 ray indices",
                f"t_starts {starts.dtype}, t_ends {ends.dtype}, ray_indices {indices.dtype}")
    for name, tensor in tensors.items():
        if tensor.device != rays.device:
            ck.fail("on the rays device", f"{name} is on {tensor.device}, the rays on {rays.device}")
    if len(samples) == 0:
        return samples

    bad = first_true((indices < 0) | (indices >= num_rays))
    if bad is not None:
        ck.fail("ray indices in range", f"ray_indices[{bad}]={int(indices[bad])} is outside [0, {num_rays})")
    bad = first_true(indices[1:] < indices[:-1])
    if bad is not None:
        ck.fail("ray indices grouped", f"ray_indices[{bad + 1}]={int(indices[bad + 1])} follows "
                f"ray_indices[{bad}]={int(indices[bad])}: the samples of a ray must be contiguous and "
                "rays in increasing order")
    bad = first_true(~(starts.isfinite() & ends.isfinite()))
    if bad is not None:
        ck.fail("finite interval bounds", f"sample {bad} of ray {int(indices[bad])} is "
                f"[{show(starts[bad])}, {show(ends[bad])}]")

    tol = RELATIVE_TOLERANCE * scale(rays)
    first = first_sample_indices(indices, num_rays)
    within = torch.arange(len(samples), device=indices.device) - first[indices]  # index inside its ray

    def at(i: int) -> str:
        return f"ray {int(indices[i])}, its sample {int(within[i])} (packed index {i})"

    bad = first_true(starts > ends + tol)
    if bad is not None:
        ck.fail("start not after end", f"{at(bad)} starts at t={show(starts[bad])} after it ends at "
                f"t={show(ends[bad])}")
    near, far = rays.near[indices].to(starts.dtype), rays.far[indices].to(starts.dtype)
    hit = far > near
    bad = first_true(~hit & (ends - starts > tol))
    if bad is not None:
        ck.fail("missed rays get zero length", f"{at(bad)}: the ray misses the box (near={show(near[bad])}, "
                f"far={show(far[bad])}) but gets the interval [{show(starts[bad])}, {show(ends[bad])}]; "
                "give it no samples or zero-length intervals")
    bad = first_true(hit & ((starts < near - tol) | (ends > far + tol)))
    if bad is not None:
        ck.fail("within near and far", f"{at(bad)} is [{show(starts[bad])}, {show(ends[bad])}], outside "
                f"[near, far] = [{show(near[bad])}, {show(far[bad])}]")
    same_ray = indices[1:] == indices[:-1]
    bad = first_true(same_ray & (starts[1:] < starts[:-1] - tol))
    if bad is not None:
        ck.fail("sorted within each ray", f"{at(bad + 1)} starts at t={show(starts[bad + 1])}, before the "
                f"previous sample of its ray, which starts at t={show(starts[bad])}")
    bad = first_true(same_ray & (starts[1:] < ends[:-1] - tol))
    if bad is not None:
        ck.fail("non-overlapping within each ray", f"{at(bad + 1)} starts at t={show(starts[bad + 1])}, "
                f"before the previous sample of its ray ends at t={show(ends[bad])}")
    return samples


def samples_difference(a: PackedSamples, b: PackedSamples, atol: float = 0.0) -> str | None:
    """Describe the first difference between two outputs, or ``None`` when they agree."""
    if a.num_rays != b.num_rays:
        return f"num_rays {a.num_rays} vs {b.num_rays}"
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} samples"
    b_indices = b.ray_indices.to(a.ray_indices.device)
    bad = first_true(a.ray_indices != b_indices)
    if bad is not None:
        return f"ray_indices[{bad}] {int(a.ray_indices[bad])} vs {int(b_indices[bad])}"
    for name in ("t_starts", "t_ends"):
        x, y = getattr(a, name), getattr(b, name).to(device=a.t_starts.device, dtype=a.t_starts.dtype)
        bad = first_true((x - y).abs() > atol) if atol > 0 else first_true(x != y)
        if bad is not None:
            return f"{name}[{bad}] (ray {int(a.ray_indices[bad])}) {show(x[bad])} vs {show(y[bad])}"
    return None


def rays_equal(a: Rays, b: Rays) -> bool:
    return all(torch.equal(x, y) for x, y in ((a.origins, b.origins), (a.directions, b.directions),
                                               (a.near, b.near), (a.far, b.far)))


def clone_rays(rays: Rays) -> Rays:
    return Rays(rays.origins.clone(), rays.directions.clone(), rays.near.clone(), rays.far.clone())


def rendering_weights(samples: PackedSamples, rays: Rays, density_fn: DensityFn) -> Tensor:
    """``[S]`` volume-rendering weights of the samples (differentiable in their ``t``)."""
    optical_depth = density_fn(samples.positions(rays)) * samples.deltas
    transmittance = torch.exp(-exclusive_sum_per_ray(optical_depth, samples.ray_indices, samples.num_rays))
    return transmittance * (1.0 - torch.exp(-optical_depth))
