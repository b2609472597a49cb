""":func:`check_sampler`: every rule of the sampler contract, checked in order on the synthetic scene."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from nerf_lightning.core.types import PackedSamples, Rays
from nerf_lightning.samplers.base import Sampler
from nerf_lightning.testing.rules import (
    DEVICE_TOLERANCE,
    RELATIVE_TOLERANCE,
    Checker,
    SamplerContractError,
    check_samples,
    clone_rays,
    rays_equal,
    rendering_weights,
    samples_difference,
    scale,
    show,
)
from nerf_lightning.testing.scene import (
    SyntheticField,
    synthetic_density,
    synthetic_rays,
    synthetic_scene_box,
)

OUTPUT_RULES = (
    "returns PackedSamples", "num_rays equals the ray count", "flat tensors of equal length",
    "float intervals and int64 ray indices", "on the rays device", "ray indices in range",
    "ray indices grouped", "finite interval bounds", "start not after end", "missed rays get zero length",
    "within near and far", "sorted within each ray", "non-overlapping within each ray",
)
"""The rules of one output (:func:`~nerf_lightning.testing.rules.check_samples`), in the order checked."""
STANDALONE_RULES = (
    "standalone() builds a module", "standalone() keeps its own copies", "standalone() runs",
    "standalone() returns three tensors", "standalone() matches eval forward",
)
"""The rules of the export hook, checked when ``standalone(field)`` returns a module."""
RULES = (
    "is a Sampler", "constructible without arguments", "deep-copyable", "set_scene_box runs",
    "update keeps buffers finite", "forward runs", "rays left unchanged", *OUTPUT_RULES, "empty batch",
    "single ray", "same samples for the same generator seed", "same samples for the same global seed",
    "deterministic in eval mode", *STANDALONE_RULES, "state_dict round trip", "cuda matches cpu",
    "auxiliary loss is a finite scalar", "gradients reach the parameters",
)
"""Every rule :func:`check_sampler` knows, in the order it checks them."""


@dataclass(frozen=True)
class SamplerReport:
    """What :func:`check_sampler` checked on a sampler that passed; ``str()`` of it is one line, e.g.::

        check_sampler(Uniform): 32 rules hold on cpu; standalone() gives UniformSteps, the eval samples
        bitwise; not checked: 'cuda matches cpu' (no CUDA device), 'gradients reach the parameters'
        (no trainable parameters)

    Attributes:
        name: the sampler's class name.
        device: where the checks ran.
        rules: the rules checked (all of :data:`RULES` but the skipped ones), in order.
        skipped: ``(rule, why)`` of each rule that did not apply.
        standalone: the class name of the module ``standalone(field)`` returned, ``None`` when it
            returned ``None`` (the sampler is not exportable).
        standalone_bitwise: whether that module's samples equal the eval-mode ``forward``'s bit for
            bit (``False``: within the kit's tolerance); ``None`` without a module.
    """

    name: str
    device: str
    rules: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]
    standalone: str | None
    standalone_bitwise: bool | None

    def __str__(self) -> str:
        if self.standalone is None:
            hook = "standalone() returns None (not exportable)"
        else:
            how = "bitwise" if self.standalone_bitwise else (
                f"within {RELATIVE_TOLERANCE:g} times the largest distance")
            hook = f"standalone() gives {self.standalone}, the eval samples {how}"
        skipped = [f"'{rule}' ({why})" for rule, why in self.skipped if rule not in STANDALONE_RULES]
        not_checked = f"; not checked: {', '.join(skipped)}" if skipped else ""
        held = f"{len(self.rules)} rules hold on {self.device}"
        return f"check_sampler({self.name}): {held}; {hook}{not_checked}"


# ----------------------------------------------------------------------------------- the check
def check_sampler(sampler: Sampler, *, device: str | torch.device = "cpu", seed: int = 0) -> SamplerReport:
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
    - the export hook, when ``standalone(field)`` (called in eval mode, after the ``update`` steps,
      with :class:`~nerf_lightning.testing.scene.SyntheticField` as ``field``) returns a module rather
      than ``None``: ``'standalone() builds a module'`` (an ``nn.Module``), ``'standalone() keeps its
      own copies'`` (no tensor shares memory with the sampler's parameters and buffers),
      ``'standalone() runs'`` (``forward(origins, directions, near, far)`` in eval mode without
      gradients, on the 32-ray bundle, an empty batch and a single ray), ``'standalone() returns
      three tensors'`` (``(t_starts, t_ends, ray_indices)``), which then follow every output rule
      above, and ``'standalone() matches eval forward'`` (the same ray indices as the sampler's
      eval-mode ``forward`` with the same density, interval bounds within ``1e-5`` times the largest
      distance). ``torch.export`` and ``torch.jit.script`` of the module are left to the export
      (``nerf-lightning export --format pt2 ... --verify``);
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

    Returns:
        A :class:`SamplerReport` of what was checked (``print`` it for one line; ``pytest -s`` shows it).

    Raises:
        AssertionError: naming the first rule broken.
    """
    ck = Checker(type(sampler).__name__)
    if not isinstance(sampler, Sampler):
        ck.fail("is a Sampler", f"{type(sampler).__qualname__} is not a subclass of "
                "nerf_lightning.samplers.Sampler")
    device = torch.device(device)
    fork_devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=fork_devices):
        skipped, standalone = _check(ck, sampler, device, seed)
    return SamplerReport(
        name=type(sampler).__name__, device=str(device),
        rules=tuple(rule for rule in RULES if rule not in skipped), skipped=tuple(skipped.items()),
        standalone=standalone[0] if standalone is not None else None,
        standalone_bitwise=standalone[1] if standalone is not None else None,
    )


def _check(ck: Checker, sampler: Sampler, device: torch.device,
           seed: int) -> tuple[dict[str, str], tuple[str, bool] | None]:
    """Every rule after ``'is a Sampler'``; the rules that did not apply (with why), and the
    standalone module's class name and whether it matched bitwise (``None``: not exportable)."""
    skipped: dict[str, str] = {}
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
            before = clone_rays(rays)
            with ck.rule("forward runs"):
                samples = forward(mode, rays, generator(seed))
            if not rays_equal(rays, before):
                ck.fail("rays left unchanged", "forward modified the rays it was given in place")
            reference[mode] = check_samples(ck, samples, rays)
        with ck.context(f"in {mode} mode (empty batch)"):
            empty = rays[:0]
            with ck.rule("empty batch"):
                samples = forward(mode, empty, generator(seed))
            if isinstance(samples, PackedSamples) and (samples.num_rays != 0 or len(samples) != 0):
                ck.fail("empty batch", f"0 rays gave num_rays={samples.num_rays} and {len(samples)} samples")
            check_samples(ck, samples, empty)
        with ck.context(f"in {mode} mode (single ray)"):
            single = rays[:1]
            with ck.rule("single ray"):
                samples = forward(mode, single, generator(seed))
            check_samples(ck, samples, single)

    # reproducibility
    for mode in ("train", "eval"):
        with ck.context(f"in {mode} mode"):
            outputs = []
            for global_seed in (seed + 1, seed + 2):
                torch.manual_seed(global_seed)
                with ck.rule("same samples for the same generator seed"):
                    outputs.append(forward(mode, rays, generator(seed)))
            difference = samples_difference(outputs[0], outputs[1])
            if difference is not None:
                ck.fail("same samples for the same generator seed", f"two calls with generators seeded "
                        f"{seed} differ: {difference}; draw every random number from `generator` (not from "
                        "torch's global RNG, Python's random or numpy)")
            outputs = []
            for _ in range(2):
                torch.manual_seed(seed)
                with ck.rule("same samples for the same global seed"):
                    outputs.append(forward(mode, rays, None))
            difference = samples_difference(outputs[0], outputs[1])
            if difference is not None:
                ck.fail("same samples for the same global seed", "two calls with generator=None after "
                        f"torch.manual_seed({seed}) differ: {difference}")
    with ck.context("in eval mode"):
        with ck.rule("deterministic in eval mode"):
            others = [forward("eval", rays, generator(seed + 1)), forward("eval", rays, None)]
        for other in others:
            difference = samples_difference(reference["eval"], other)
            if difference is not None:
                ck.fail("deterministic in eval mode", "different seeds gave different samples: "
                        f"{difference}; jitter only when self.training")

    # the export hook
    standalone = _check_standalone(ck, work, rays, device)
    if standalone is None:
        skipped.update({rule: "standalone() returns None: not exportable" for rule in STANDALONE_RULES})

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
        difference = samples_difference(expected, restored)
        if difference is not None:
            ck.fail("state_dict round trip", f"in {mode} mode, a copy of the sampler given "
                    f"load_state_dict(sampler.state_dict()) samples differently: {difference}; is some state "
                    "kept outside registered (persistent) buffers and parameters?")

    # moving between devices
    other_device = torch.device("cuda") if device.type == "cpu" and torch.cuda.is_available() else None
    if device.type != "cpu":
        other_device = torch.device("cpu")
    if other_device is None:
        skipped["cuda matches cpu"] = "no CUDA device"
    else:
        with ck.context(f"on {other_device} (moved from {device})"):
            moved_rays = rays.to(other_device)
            with ck.rule("cuda matches cpu"):
                work.to(other_device)
                moved = forward("eval", moved_rays, torch.Generator(device=other_device).manual_seed(seed))
            check_samples(ck, moved, moved_rays)
            difference = samples_difference(reference["eval"], moved, atol=DEVICE_TOLERANCE * scale(rays))
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
            weights = rendering_weights(samples, rays, density_fn)
            loss = work.auxiliary_loss(samples, weights)
        if loss is not None:
            if not isinstance(loss, Tensor) or loss.dim() != 0:
                shape = tuple(loss.shape) if isinstance(loss, Tensor) else type(loss).__name__
                ck.fail("auxiliary loss is a finite scalar", f"auxiliary_loss returned {shape}, expected a "
                        "0-dim tensor or None")
            if not bool(torch.isfinite(loss)):
                ck.fail("auxiliary loss is a finite scalar", f"auxiliary_loss returned {show(loss)}")
        if not parameters:
            skipped["gradients reach the parameters"] = "no trainable parameters"
            return skipped, standalone
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
    return skipped, standalone


def _storage(tensor: Tensor) -> int | None:
    """Where ``tensor``'s memory starts (``None`` for an empty tensor, which holds none)."""
    return tensor.untyped_storage().data_ptr() if tensor.numel() else None


def _check_standalone(ck: Checker, work: Sampler, rays: Rays,
                      device: torch.device) -> tuple[str, bool] | None:
    """The rules of ``standalone(field)``; ``(module class name, bitwise equal)``, or ``None`` when the
    hook returns ``None``."""
    field = SyntheticField().to(device)
    work.eval()
    with ck.context("in eval mode"):
        with ck.rule("standalone() builds a module"), torch.no_grad():
            module = work.standalone(field)
        if module is None:
            return None
        if not isinstance(module, nn.Module):
            ck.fail("standalone() builds a module", f"standalone() returned {type(module).__name__}, "
                    "expected an nn.Module (or None for a sampler that cannot be exported)")
        own = {_storage(tensor) for tensor in (*work.parameters(), *work.buffers())} - {None}
        for name, tensor in (*module.named_parameters(), *module.named_buffers()):
            if _storage(tensor) in own:
                ck.fail("standalone() keeps its own copies", f"the module's {name!r} shares memory with the "
                        "sampler's parameters or buffers, so later training would change the export; copy it "
                        "(register_buffer(name, tensor.detach().clone()))")
    module.eval()
    name = type(module).__name__
    bitwise = True
    batches = ((f"{len(rays)}-ray bundle", rays), ("empty batch", rays[:0]), ("single ray", rays[:1]))
    for what, batch in batches:
        with ck.context(f"in the standalone() module {name} ({what})"):
            with ck.rule("standalone() runs"), torch.no_grad():
                out = module(batch.origins, batch.directions, batch.near, batch.far)
            if not (isinstance(out, tuple) and len(out) == 3 and all(isinstance(t, Tensor) for t in out)):
                got = f"a tuple of {len(out)}" if isinstance(out, tuple) else type(out).__name__
                ck.fail("standalone() returns three tensors", f"forward returned {got}, expected "
                        "(t_starts [S], t_ends [S], ray_indices [S])")
            samples = check_samples(ck, PackedSamples(out[0], out[1], out[2], len(batch)), batch)
            with ck.rule("standalone() matches eval forward"), torch.no_grad():
                expected = work(batch, field.density)
            difference = samples_difference(expected, samples, atol=RELATIVE_TOLERANCE * scale(batch))
            if difference is not None:
                ck.fail("standalone() matches eval forward", "the module and the sampler's eval-mode forward "
                        f"differ: {difference}; compute both with the same functions")
            bitwise = bitwise and samples_difference(expected, samples) is None
    return name, bitwise

