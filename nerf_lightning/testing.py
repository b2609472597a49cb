"""A kit for sampler authors: check any sampler against the contract of ``docs/samplers.md``.

Call :func:`check_sampler` from your plugin's tests::

    from nerf_lightning.testing import check_sampler

    def test_contract():
        check_sampler(MySampler())

It runs the sampler on a small fixed synthetic scene (a soft spherical shell of density inside
the cube ``[-1.5, 1.5]^3``, rays from a ring of cameras, a camera inside the box and three
rays that miss it) and raises ``AssertionError`` naming the first rule the sampler breaks,
for example::

    check_sampler(MySampler): rule 'sorted within each ray' broken in train mode (32-ray bundle):
    ray 3, its sample 5 (packed index 245) starts at t=0.71, before the previous sample of its
    ray, which starts at t=0.74

The sampler passed in is not modified: every check runs on deep copies of it, so its mode,
device, buffers and parameters are as before, and so is torch's global random state.

The scene is available to your own tests as :func:`synthetic_rays`,
:func:`synthetic_density` and :func:`synthetic_scene_box`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import torch
from torch import Tensor

from nerf_lightning.rendering.packed import exclusive_sum_per_ray, first_sample_indices
from nerf_lightning.samplers.base import Sampler
from nerf_lightning.types import DensityFn, PackedSamples, Rays, SceneBox

__all__ = [
    "SamplerContractError",
    "check_sampler",
    "synthetic_density",
    "synthetic_rays",
    "synthetic_scene_box",
]

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
RELATIVE_TOLERANCE = 1e-5
"""Slack of the interval rules, relative to the largest distance in the bundle."""
DEVICE_TOLERANCE = 1e-4
"""Largest difference between CPU and CUDA samples, relative to the largest distance."""


# ---------------------------------------------------------------------------- synthetic scene
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


# ---------------------------------------------------------------------------------- reporting
class SamplerContractError(AssertionError):
    """A sampler broke a rule of the contract (raised by :func:`check_sampler`)."""


class _Checker:
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


def _f(value: Tensor | float) -> str:
    return f"{float(value):.6g}"


def _first(mask: Tensor) -> int | None:
    """Index of the first ``True`` of a 1-D mask, or ``None``."""
    hits = mask.nonzero()
    return int(hits[0, 0]) if hits.numel() else None


def _scale(rays: Rays) -> float:
    """The largest distance among the rays that hit the box (at least 1)."""
    hit = rays.far > rays.near
    scale = 1.0
    if bool(hit.any()):
        scale = max(scale, float(rays.near[hit].abs().max()), float(rays.far[hit].abs().max()))
    return scale


# ------------------------------------------------------------------------------ output rules
def _check_samples(ck: _Checker, samples: Any, rays: Rays) -> PackedSamples:
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

    bad = _first((indices < 0) | (indices >= num_rays))
    if bad is not None:
        ck.fail("ray indices in range", f"ray_indices[{bad}]={int(indices[bad])} is outside [0, {num_rays})")
    bad = _first(indices[1:] < indices[:-1])
    if bad is not None:
        ck.fail("ray indices grouped", f"ray_indices[{bad + 1}]={int(indices[bad + 1])} follows "
                f"ray_indices[{bad}]={int(indices[bad])}: the samples of a ray must be contiguous and "
                "rays in increasing order")
    bad = _first(~(starts.isfinite() & ends.isfinite()))
    if bad is not None:
        ck.fail("finite interval bounds", f"sample {bad} of ray {int(indices[bad])} is "
                f"[{_f(starts[bad])}, {_f(ends[bad])}]")

    tol = RELATIVE_TOLERANCE * _scale(rays)
    first = first_sample_indices(indices, num_rays)
    within = torch.arange(len(samples), device=indices.device) - first[indices]  # index inside its ray

    def at(i: int) -> str:
        return f"ray {int(indices[i])}, its sample {int(within[i])} (packed index {i})"

    bad = _first(starts > ends + tol)
    if bad is not None:
        ck.fail("start not after end", f"{at(bad)} starts at t={_f(starts[bad])} after it ends at "
                f"t={_f(ends[bad])}")
    near, far = rays.near[indices].to(starts.dtype), rays.far[indices].to(starts.dtype)
    hit = far > near
    bad = _first(~hit & (ends - starts > tol))
    if bad is not None:
        ck.fail("missed rays get zero length", f"{at(bad)}: the ray misses the box (near={_f(near[bad])}, "
                f"far={_f(far[bad])}) but gets the interval [{_f(starts[bad])}, {_f(ends[bad])}]; give it "
                "no samples or zero-length intervals")
    bad = _first(hit & ((starts < near - tol) | (ends > far + tol)))
    if bad is not None:
        ck.fail("within near and far", f"{at(bad)} is [{_f(starts[bad])}, {_f(ends[bad])}], outside "
                f"[near, far] = [{_f(near[bad])}, {_f(far[bad])}]")
    same_ray = indices[1:] == indices[:-1]
    bad = _first(same_ray & (starts[1:] < starts[:-1] - tol))
    if bad is not None:
        ck.fail("sorted within each ray", f"{at(bad + 1)} starts at t={_f(starts[bad + 1])}, before the "
                f"previous sample of its ray, which starts at t={_f(starts[bad])}")
    bad = _first(same_ray & (starts[1:] < ends[:-1] - tol))
    if bad is not None:
        ck.fail("non-overlapping within each ray", f"{at(bad + 1)} starts at t={_f(starts[bad + 1])}, "
                f"before the previous sample of its ray ends at t={_f(ends[bad])}")
    return samples


def _difference(a: PackedSamples, b: PackedSamples, atol: float = 0.0) -> str | None:
    """Describe the first difference between two outputs, or ``None`` when they agree."""
    if a.num_rays != b.num_rays:
        return f"num_rays {a.num_rays} vs {b.num_rays}"
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} samples"
    b_indices = b.ray_indices.to(a.ray_indices.device)
    bad = _first(a.ray_indices != b_indices)
    if bad is not None:
        return f"ray_indices[{bad}] {int(a.ray_indices[bad])} vs {int(b_indices[bad])}"
    for name in ("t_starts", "t_ends"):
        x, y = getattr(a, name), getattr(b, name).to(device=a.t_starts.device, dtype=a.t_starts.dtype)
        bad = _first((x - y).abs() > atol) if atol > 0 else _first(x != y)
        if bad is not None:
            return f"{name}[{bad}] (ray {int(a.ray_indices[bad])}) {_f(x[bad])} vs {_f(y[bad])}"
    return None


def _rays_equal(a: Rays, b: Rays) -> bool:
    return all(torch.equal(x, y) for x, y in ((a.origins, b.origins), (a.directions, b.directions),
                                               (a.near, b.near), (a.far, b.far)))


def _clone_rays(rays: Rays) -> Rays:
    return Rays(rays.origins.clone(), rays.directions.clone(), rays.near.clone(), rays.far.clone())


def _rendering_weights(samples: PackedSamples, rays: Rays, density_fn: DensityFn) -> Tensor:
    """``[S]`` volume-rendering weights of the samples (differentiable in their ``t``)."""
    optical_depth = density_fn(samples.positions(rays)) * samples.deltas
    transmittance = torch.exp(-exclusive_sum_per_ray(optical_depth, samples.ray_indices, samples.num_rays))
    return transmittance * (1.0 - torch.exp(-optical_depth))


# ----------------------------------------------------------------------------------- the check
def check_sampler(sampler: Sampler, *, device: str | torch.device = "cpu", seed: int = 0) -> None:
    """Check a sampler against the sampler contract; raise ``AssertionError`` on the first broken rule.

    The message reads ``check_sampler(Name): rule '<rule>' broken <where>: <detail>``. The
    rules, in the order they are checked:

    - ``'is a Sampler'``, ``'constructible without arguments'``, ``'deep-copyable'``,
      ``'set_scene_box runs'``;
    - ``'update keeps buffers finite'``: ``update(step, density_fn, generator=...)`` for steps 0..3 runs and
      leaves every floating buffer and parameter finite;
    - in train mode (grad enabled) and eval mode (under ``torch.no_grad``), for the 32-ray
      synthetic bundle (with 3 rays that miss), an empty batch and a single ray:
      ``'forward runs'``, ``'empty batch'``, ``'single ray'``, ``'rays left unchanged'``,
      ``'returns PackedSamples'``, ``'num_rays equals the ray count'``, ``'flat tensors of equal
      length'``, ``'float intervals and int64 ray indices'``, ``'on the rays device'``,
      ``'ray indices in range'``, ``'ray indices grouped'`` (non-decreasing), ``'finite interval
      bounds'``, ``'start not after end'``, ``'missed rays get zero length'``, ``'within near and
      far'``, ``'sorted within each ray'``, ``'non-overlapping within each ray'`` (interval rules
      with a slack of ``1e-5`` times the largest distance);
    - ``'same samples for the same generator seed'`` (the global RNG seeded differently between
      the calls), ``'same samples for the same global seed'`` (``generator=None`` after equal
      ``torch.manual_seed``), ``'deterministic in eval mode'`` (any seed, same samples);
    - ``'state_dict round trip'``: a copy taken before ``update`` whose state tensors are
      perturbed, then given ``load_state_dict(state)``, has an equal state dict and gives the
      same samples in eval and in train mode for the same seed;
    - ``'cuda matches cpu'`` (only where CUDA is available): the sampler moved between CPU
      and CUDA gives, in eval mode, the same sample counts and values within ``1e-4`` times the
      largest distance;
    - ``'auxiliary loss is a finite scalar'`` and, for samplers with trainable parameters,
      ``'gradients reach the parameters'``: the auxiliary loss (or, when it is ``None``, the
      rendering through the samples) backpropagates a finite, not all-zero gradient to at
      least one parameter.

    Args:
        sampler: the sampler to check (not modified: the checks run on deep copies).
        device: where to run the checks; the sampler is moved there with ``.to(device)``.
        seed: seed of the generators used for the randomness checks.

    Raises:
        AssertionError: naming the first rule broken.
    """
    ck = _Checker(type(sampler).__name__)
    if not isinstance(sampler, Sampler):
        ck.fail("is a Sampler", f"{type(sampler).__qualname__} is not a subclass of "
                "nerf_lightning.samplers.Sampler")
    device = torch.device(device)
    fork_devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=fork_devices):
        _check(ck, sampler, device, seed)


def _check(ck: _Checker, sampler: Sampler, device: torch.device, seed: int) -> None:
    with ck.rule("constructible without arguments"):
        type(sampler)()
    try:
        work = copy.deepcopy(sampler)
    except Exception as error:
        detail = f"copy.deepcopy failed ({type(error).__name__}: {error}); pass a freshly constructed sampler"
        raise SamplerContractError(ck.message("deep-copyable", detail)) from error
    box = synthetic_scene_box()
    with ck.rule("set_scene_box runs"):
        work.set_scene_box(box)
        work.to(device)
    fresh = copy.deepcopy(work)  # as constructed: the target of the state_dict round trip
    rays = synthetic_rays(device)
    density_fn = synthetic_density

    def generator(value: int) -> torch.Generator:
        return torch.Generator(device=device).manual_seed(value)

    def forward(mode: str, batch: Rays, gen: torch.Generator | None, module: Sampler = work) -> PackedSamples:
        module.train(mode == "train")
        with torch.set_grad_enabled(mode == "train"):
            return module(batch, density_fn, generator=gen)

    # update: the first call of every training step
    work.train()
    for step in range(4):
        with ck.context(f"at update({step})"), ck.rule("update keeps buffers finite"):
            work.update(step, density_fn, generator=generator(seed + step))
        for name, tensor in [*work.named_buffers(), *work.named_parameters()]:
            if tensor.is_floating_point() and not bool(tensor.isfinite().all()):
                ck.fail("update keeps buffers finite", f"after update({step}), {name} has "
                        f"{int((~tensor.isfinite()).sum())} non-finite values")

    reference: dict[str, PackedSamples] = {}
    for mode in ("train", "eval"):
        with ck.context(f"in {mode} mode ({len(rays)}-ray bundle)"):
            before = _clone_rays(rays)
            with ck.rule("forward runs"):
                samples = forward(mode, rays, generator(seed))
            if not _rays_equal(rays, before):
                ck.fail("rays left unchanged", "forward modified the rays it was given in place")
            reference[mode] = _check_samples(ck, samples, rays)
        with ck.context(f"in {mode} mode (empty batch)"):
            empty = rays[:0]
            with ck.rule("empty batch"):
                samples = forward(mode, empty, generator(seed))
            if isinstance(samples, PackedSamples) and (samples.num_rays != 0 or len(samples) != 0):
                ck.fail("empty batch", f"0 rays gave num_rays={samples.num_rays} and {len(samples)} samples")
            _check_samples(ck, samples, empty)
        with ck.context(f"in {mode} mode (single ray)"):
            single = rays[:1]
            with ck.rule("single ray"):
                samples = forward(mode, single, generator(seed))
            _check_samples(ck, samples, single)

    # reproducibility
    for mode in ("train", "eval"):
        with ck.context(f"in {mode} mode"):
            outputs = []
            for global_seed in (seed + 1, seed + 2):
                torch.manual_seed(global_seed)
                with ck.rule("same samples for the same generator seed"):
                    outputs.append(forward(mode, rays, generator(seed)))
            difference = _difference(outputs[0], outputs[1])
            if difference is not None:
                ck.fail("same samples for the same generator seed", f"two calls with generators seeded "
                        f"{seed} differ: {difference}; draw every random number from `generator` (not from "
                        "torch's global RNG, Python's random or numpy)")
            outputs = []
            for _ in range(2):
                torch.manual_seed(seed)
                with ck.rule("same samples for the same global seed"):
                    outputs.append(forward(mode, rays, None))
            difference = _difference(outputs[0], outputs[1])
            if difference is not None:
                ck.fail("same samples for the same global seed", "two calls with generator=None after "
                        f"torch.manual_seed({seed}) differ: {difference}")
    with ck.context("in eval mode"):
        with ck.rule("deterministic in eval mode"):
            others = [forward("eval", rays, generator(seed + 1)), forward("eval", rays, None)]
        for other in others:
            difference = _difference(reference["eval"], other)
            if difference is not None:
                ck.fail("deterministic in eval mode", "different seeds gave different samples: "
                        f"{difference}; jitter only when self.training")

    # state_dict round trip: the copy taken before update() plays a freshly constructed sampler
    with ck.rule("state_dict round trip"):
        state = {key: value.detach().clone() for key, value in work.state_dict().items()}
        with torch.no_grad():
            for value in fresh.state_dict().values():  # shares storage with the copy's tensors
                if value.dtype == torch.bool:
                    value.logical_not_()
                elif value.is_floating_point():
                    value.mul_(0.5).add_(0.25)
                elif not value.is_complex():
                    value.add_(1)
        fresh.load_state_dict(state)
        loaded = fresh.state_dict()
    if set(loaded) != set(state):
        ck.fail("state_dict round trip",
                f"keys differ after load_state_dict: {sorted(set(loaded) ^ set(state))}")
    for key, value in state.items():
        if loaded[key].dtype != value.dtype or not torch.equal(loaded[key], value):
            ck.fail("state_dict round trip", f"'{key}' differs after load_state_dict")
    for mode in ("eval", "train"):
        torch.manual_seed(seed)
        with ck.rule("state_dict round trip"):
            expected = forward(mode, rays, generator(seed))
        torch.manual_seed(seed)
        with ck.rule("state_dict round trip"):
            restored = forward(mode, rays, generator(seed), module=fresh)
        difference = _difference(expected, restored)
        if difference is not None:
            ck.fail("state_dict round trip", f"in {mode} mode, a copy of the sampler given "
                    f"load_state_dict(sampler.state_dict()) samples differently: {difference}; is some state "
                    "kept outside registered (persistent) buffers and parameters?")

    # moving between devices
    other_device = torch.device("cuda") if device.type == "cpu" and torch.cuda.is_available() else None
    if device.type != "cpu":
        other_device = torch.device("cpu")
    if other_device is not None:
        with ck.context(f"on {other_device} (moved from {device})"):
            moved_rays = rays.to(other_device)
            with ck.rule("cuda matches cpu"):
                work.to(other_device)
                moved = forward("eval", moved_rays, torch.Generator(device=other_device).manual_seed(seed))
            _check_samples(ck, moved, moved_rays)
            difference = _difference(reference["eval"], moved, atol=DEVICE_TOLERANCE * _scale(rays))
            if difference is not None:
                ck.fail("cuda matches cpu",
                        f"eval samples on {device} and {other_device} differ: {difference}")
            work.to(device)

    # auxiliary loss and gradients
    with ck.context("in train mode"):
        parameters = [(name, p) for name, p in work.named_parameters() if p.requires_grad]
        for _, parameter in parameters:
            parameter.grad = None
        with ck.rule("auxiliary loss is a finite scalar"):
            samples = forward("train", rays, generator(seed))
            weights = _rendering_weights(samples, rays, density_fn)
            loss = work.auxiliary_loss(samples, weights)
        if loss is not None:
            if not isinstance(loss, Tensor) or loss.dim() != 0:
                shape = tuple(loss.shape) if isinstance(loss, Tensor) else type(loss).__name__
                ck.fail("auxiliary loss is a finite scalar", f"auxiliary_loss returned {shape}, expected a "
                        "0-dim tensor or None")
            if not bool(torch.isfinite(loss)):
                ck.fail("auxiliary loss is a finite scalar", f"auxiliary_loss returned {_f(loss)}")
        if not parameters:
            return
        names = ", ".join(name for name, _ in parameters[:4]) + (", ..." if len(parameters) > 4 else "")
        if loss is not None:
            if not loss.requires_grad:
                ck.fail("gradients reach the parameters", f"the sampler has trainable parameters ({names}) "
                        "but its auxiliary loss does not require grad (detached, or computed under no_grad?)")
            target, through = loss, "auxiliary_loss"
        else:
            target = (weights * samples.t_mids).sum()
            if not target.requires_grad:
                ck.fail("gradients reach the parameters", f"the sampler has trainable parameters ({names}) "
                        "but auxiliary_loss is None and its samples do not depend on them")
            through = "the rendering of its samples"
        with ck.rule("gradients reach the parameters"):
            target.backward()
        grads = [(name, p.grad) for name, p in parameters if p.grad is not None]
        for name, grad in grads:
            if not bool(grad.isfinite().all()):
                ck.fail("gradients reach the parameters", f"{through} gives {name} a non-finite gradient")
        if not any(bool((grad != 0).any()) for _, grad in grads):
            ck.fail("gradients reach the parameters", f"{through} gives no parameter ({names}) a non-zero "
                    "gradient")
        for _, parameter in parameters:
            parameter.grad = None

