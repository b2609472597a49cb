"""The sampler author's kit: it passes correct samplers and names the rule a broken one breaks."""

from __future__ import annotations

import random
import re

import pytest
import torch
from torch import Tensor, nn

from nerf_lightning.core.types import PackedSamples, Rays
from nerf_lightning.samplers import (
    Hierarchical,
    OccupancyGrid,
    Proposal,
    Sampler,
    Uniform,
    load_sampler_plugins,
)
from nerf_lightning.samplers.toolkit import even_fractions, interval_edges, pack_dense_edges
from nerf_lightning.testing import (
    SamplerReport,
    check_sampler,
    synthetic_density,
    synthetic_field,
    synthetic_rays,
)
from nerf_lightning.testing.check import RULES, STANDALONE_RULES


# ------------------------------------------------------------------------- correct samplers
class Even(Sampler):
    """A correct sampler: ``num_samples`` intervals over ``[near, far]``, inner edges jittered in training."""

    def __init__(self, num_samples: int = 4) -> None:
        super().__init__()
        self.num_samples = num_samples

    def fractions(self, num_rays: int, device: torch.device, generator: torch.Generator | None) -> Tensor:
        """``[R, N + 1]`` sorted edge positions in ``[0, 1]``."""
        u = torch.linspace(0.0, 1.0, self.num_samples + 1, device=device).expand(num_rays, -1)
        if self.training:
            shift = torch.rand(num_rays, self.num_samples + 1, device=device, generator=generator) - 0.5
            shift[:, 0] = 0.0
            shift[:, -1] = 0.0
            u = u + shift / self.num_samples
        return u

    def edges(self, rays: Rays, generator: torch.Generator | None) -> Tensor:
        """``[R, N + 1]`` interval edges; rays that miss get all edges at ``near``."""
        near = rays.near[:, None]
        far = torch.maximum(rays.far, rays.near)[:, None]
        return near + (far - near) * self.fractions(len(rays), rays.device, generator)

    def forward(self, rays, density_fn=None, *, generator=None) -> PackedSamples:
        return PackedSamples.from_dense(self.edges(rays, generator))


class LearnedWithLoss(Even):
    """Owns a parameter trained by its auxiliary loss."""

    def __init__(self, num_samples: int = 4) -> None:
        super().__init__(num_samples)
        self.scale = nn.Parameter(torch.tensor(0.5))

    def auxiliary_loss(self, samples, weights):
        return (self.scale - 1.0) ** 2 * weights.detach().sum()


class LearnedThroughSamples(Even):
    """Owns a parameter that warps the edges, so the rendering trains it (no auxiliary loss)."""

    def __init__(self, num_samples: int = 4) -> None:
        super().__init__(num_samples)
        self.warp = nn.Parameter(torch.tensor(0.0))

    def forward(self, rays, density_fn=None, *, generator=None):
        u = self.fractions(len(rays), rays.device, generator)
        u = u ** torch.exp(self.warp)  # monotone in u, keeps 0 and 1
        near = rays.near[:, None]
        far = torch.maximum(rays.far, rays.near)[:, None]
        return PackedSamples.from_dense(near + (far - near) * u)


class Adaptive(Even):
    """Keeps state learned in ``update`` (with torch's global RNG) in a persistent buffer."""

    shrink: Tensor

    def __init__(self, num_samples: int = 4) -> None:
        super().__init__(num_samples)
        self.register_buffer("shrink", torch.tensor(0.0))

    def update(self, step, density_fn, *, generator=None):
        self.shrink.fill_(0.25 * float(torch.rand(())))

    def edges(self, rays, generator):
        near = rays.near[:, None]
        far = torch.maximum(rays.far, rays.near)[:, None]
        return near + (1.0 - self.shrink) * (far - near) * self.fractions(len(rays), rays.device, generator)


class Stepped(Sampler):
    """A variable number of intervals per ray, about ``step`` long, packed with ``PackedSamples.from_edges``
    (the example of docs/samplers.md)."""

    def __init__(self, step: float = 0.25, max_samples: int = 64) -> None:
        super().__init__()
        self.step, self.max_samples = step, max_samples

    def counts_and_spacing(self, rays: Rays) -> tuple[Tensor, Tensor]:
        """``[R]`` intervals per ray (0 for misses) and ``[R]`` their length."""
        length = (rays.far - rays.near).clamp_min(0.0)
        counts = torch.ceil(length / self.step).long().clamp_max(self.max_samples)
        return counts, length / counts.clamp_min(1)

    def forward(self, rays, density_fn=None, *, generator=None) -> PackedSamples:
        counts, spacing = self.counts_and_spacing(rays)
        edges_per_ray = counts + 1
        num_edges = int(edges_per_ray.sum())  # the host read a variable count costs
        ray = torch.repeat_interleave(torch.arange(len(rays), device=rays.device), edges_per_ray,
                                      output_size=num_edges)
        first = torch.cumsum(edges_per_ray, 0) - edges_per_ray  # [R] first edge of each ray
        k = torch.arange(num_edges, device=rays.device) - first[ray]  # [S + R] edge number along its ray
        edges = rays.near[ray] + k.to(rays.near.dtype) * spacing[ray]
        return PackedSamples.from_edges(edges, counts)


class SteppedByCounts(Stepped):
    """The same intervals, packed from their starts and ends with ``PackedSamples.from_counts``."""

    def forward(self, rays, density_fn=None, *, generator=None) -> PackedSamples:
        counts, spacing = self.counts_and_spacing(rays)
        num_samples = int(counts.sum())
        ray = torch.repeat_interleave(torch.arange(len(rays), device=rays.device), counts,
                                      output_size=num_samples)
        k = torch.arange(num_samples, device=rays.device) - (torch.cumsum(counts, 0) - counts)[ray]
        starts = rays.near[ray] + k.to(rays.near.dtype) * spacing[ray]
        return PackedSamples.from_counts(starts, starts + spacing[ray], counts)


CORRECT = [Uniform(), Uniform(num_samples=3, jitter=False), Even(), Adaptive(), LearnedWithLoss(),
           LearnedThroughSamples(), Stepped(), Stepped(step=0.05, max_samples=8), SteppedByCounts()]


@pytest.mark.parametrize("sampler", CORRECT, ids=[type(s).__name__ for s in CORRECT])
def test_kit_passes_correct_samplers(sampler: Sampler) -> None:
    check_sampler(sampler)


def test_variable_count_examples_pack_alike() -> None:
    rays = synthetic_rays()
    by_edges, by_counts = Stepped().eval()(rays), SteppedByCounts().eval()(rays)
    counts = by_edges.samples_per_ray()
    assert counts[[3, 12, 25]].tolist() == [0, 0, 0] and len(set(counts.tolist())) > 3  # misses: none
    assert torch.equal(by_edges.ray_indices, by_counts.ray_indices)
    torch.testing.assert_close(by_edges.t_starts, by_counts.t_starts)
    torch.testing.assert_close(by_edges.t_ends, by_counts.t_ends)


def test_kit_passes_occupancy_grid_small() -> None:
    check_sampler(OccupancyGrid(resolution=16))


@pytest.mark.parametrize("name", sorted(load_sampler_plugins()))
def test_kit_passes_every_registered_sampler_with_its_defaults(name: str) -> None:
    report = check_sampler(load_sampler_plugins()[name].sampler_class())
    assert report.standalone is not None  # every registered sampler exports, and its module was checked
    assert report.standalone_bitwise  # the built-ins and Disparity share their functions with the twin


@pytest.mark.parametrize(
    ("sampler", "module"),
    [(Uniform(num_samples=5), "UniformSteps"), (Hierarchical(num_coarse=8, num_fine=8), "HierarchicalSteps"),
     (Hierarchical(num_coarse=8, num_fine=8, separate_coarse_network=True), "HierarchicalSteps"),
     (Proposal(proposal_samples=(16,), num_samples=8, proposal_max_resolution=(64,),
               spacing="linear_disparity", contraction="linf"), "ProposalSteps"),
     (OccupancyGrid(resolution=16), None)],
    ids=["Uniform", "Hierarchical", "Hierarchical-network", "Proposal-unbounded", "OccupancyGrid"],
)
def test_the_report_names_the_checked_export_module(sampler: Sampler, module: str | None) -> None:
    report = check_sampler(sampler)
    assert isinstance(report, SamplerReport) and report.name == type(sampler).__name__
    if module is not None:
        assert report.standalone == module
    assert report.standalone is not None and report.standalone_bitwise
    assert set(STANDALONE_RULES) <= set(report.rules)
    assert set(report.rules) | {rule for rule, _ in report.skipped} == set(RULES)
    line = str(report)
    assert "\n" not in line
    assert line.startswith(f"check_sampler({report.name}): {len(report.rules)} rules hold on cpu; ")
    assert f"standalone() gives {report.standalone}, the eval samples bitwise" in line


def test_a_sampler_without_export_hook_is_reported_not_exportable() -> None:
    report = check_sampler(Even())
    assert report.standalone is None and report.standalone_bitwise is None
    why = dict(report.skipped)
    assert why["standalone() matches eval forward"] == "standalone() returns None: not exportable"
    assert "standalone() returns None (not exportable)" in str(report)
    assert "'gradients reach the parameters' (no trainable parameters)" in str(report)
    assert "gradients reach the parameters" in check_sampler(LearnedWithLoss()).rules


def test_kit_leaves_the_sampler_and_the_global_rng_alone() -> None:
    sampler = Adaptive().eval()
    rng = torch.get_rng_state()
    check_sampler(sampler)
    assert not sampler.training
    assert float(sampler.shrink) == 0.0  # update() ran on copies only
    assert torch.equal(torch.get_rng_state(), rng)
    learned = LearnedWithLoss().train()
    check_sampler(learned)
    assert learned.training and learned.scale.grad is None


def test_synthetic_bundle_has_misses_and_a_camera_inside() -> None:
    rays = synthetic_rays()
    assert len(rays) == 32
    assert int((rays.far <= rays.near).sum()) == 3
    assert bool((rays.near >= 0.05).all())
    torch.testing.assert_close(rays.directions.norm(dim=-1), torch.ones(32))
    assert float(synthetic_density(torch.tensor([[0.5, 0.0, 0.0]]))) == pytest.approx(50.0)


# -------------------------------------------------------------------------- broken samplers
class Unsorted(Even):
    def forward(self, rays, density_fn=None, *, generator=None):
        s = super().forward(rays, generator=generator)
        flip = lambda t: t.reshape(len(rays), self.num_samples).flip(1).reshape(-1)  # noqa: E731
        return PackedSamples(flip(s.t_starts), flip(s.t_ends), s.ray_indices, s.num_rays)


class BeyondFar(Even):
    def edges(self, rays, generator):
        near = rays.near[:, None]
        far = torch.maximum(rays.far, rays.near)[:, None]
        return near + 1.1 * (far - near) * self.fractions(len(rays), rays.device, generator)


class Overlapping(Even):
    def forward(self, rays, density_fn=None, *, generator=None):
        edges = self.edges(rays, generator)
        ray_indices = torch.arange(len(rays), device=rays.device).repeat_interleave(self.num_samples - 1)
        return PackedSamples(edges[:, :-2].reshape(-1), edges[:, 2:].reshape(-1), ray_indices, len(rays))


class IndicesOutOfRange(Even):
    def forward(self, rays, density_fn=None, *, generator=None):
        s = super().forward(rays, generator=generator)
        return PackedSamples(s.t_starts, s.t_ends, s.ray_indices + 1, s.num_rays)


class Ungrouped(Even):
    def forward(self, rays, density_fn=None, *, generator=None):
        edges = self.edges(rays, generator)
        per_sample = lambda t: t.t().reshape(-1)  # noqa: E731  sample-major order: rays interleaved
        ray_indices = torch.arange(len(rays), device=rays.device).repeat(self.num_samples)
        return PackedSamples(per_sample(edges[:, :-1]), per_sample(edges[:, 1:]), ray_indices, len(rays))


class WrongNumRays(Even):
    def forward(self, rays, density_fn=None, *, generator=None):
        s = super().forward(rays, generator=generator)
        return PackedSamples(s.t_starts, s.t_ends, s.ray_indices, s.num_rays + 1)


class CrashesOnEmpty(Even):
    def edges(self, rays, generator):
        longest = (rays.far - rays.near).max()  # no maximum of an empty tensor
        return super().edges(rays, generator) * (longest / longest)


class PythonRandom(Even):
    def fractions(self, num_rays, device, generator):
        u = torch.linspace(0.0, 1.0, self.num_samples + 1, device=device).expand(num_rays, -1).clone()
        if self.training:
            u[:, 1:-1] += (random.random() - 0.5) / self.num_samples
        return u


class IgnoresGenerator(Even):
    def fractions(self, num_rays, device, generator):
        return super().fractions(num_rays, device, None)  # torch's global RNG


class JittersInEval(Even):
    def fractions(self, num_rays, device, generator):
        was_training = self.training
        self.training = True
        try:
            return super().fractions(num_rays, device, generator)
        finally:
            self.training = was_training


class NonPersistentState(Even):
    """Learns how much of ``[near, far]`` to cover in ``update``, in a buffer checkpoints omit."""

    shrink: Tensor

    def __init__(self, num_samples: int = 4) -> None:
        super().__init__(num_samples)
        self.register_buffer("shrink", torch.tensor(0.0), persistent=False)

    def update(self, step, density_fn, *, generator=None):
        self.shrink.fill_(0.25)

    def edges(self, rays, generator):
        near = rays.near[:, None]
        far = torch.maximum(rays.far, rays.near)[:, None]
        return near + (1.0 - self.shrink) * (far - near) * self.fractions(len(rays), rays.device, generator)


class AttributeState(Even):
    """Counts updates in a plain Python attribute that sets the number of samples."""

    def __init__(self, num_samples: int = 4) -> None:
        super().__init__(num_samples)
        self.updates = 0

    def update(self, step, density_fn, *, generator=None):
        self.updates += 1
        self.num_samples = 4 + self.updates


class OmitsBufferFromStateDict(NonPersistentState):
    def __init__(self, num_samples: int = 4) -> None:
        super().__init__(num_samples)
        self.register_buffer("shrink", torch.tensor(0.0))  # persistent this time...

    def state_dict(self, *args, **kwargs):  # ...but left out of checkpoints
        state = super().state_dict(*args, **kwargs)
        state.pop("shrink", None)
        return state


class DetachedLoss(Even):
    def __init__(self, num_samples: int = 4) -> None:
        super().__init__(num_samples)
        self.scale = nn.Parameter(torch.tensor(0.5))

    def auxiliary_loss(self, samples, weights):
        return ((self.scale - 1.0) ** 2).detach()


class UnusedParameter(Even):
    def __init__(self, num_samples: int = 4) -> None:
        super().__init__(num_samples)
        self.scale = nn.Parameter(torch.tensor(0.5))


class NanLoss(Even):
    def auxiliary_loss(self, samples, weights):
        return weights.sum() * float("nan")


class VectorLoss(Even):
    def auxiliary_loss(self, samples, weights):
        return weights


class NanAfterUpdate(NonPersistentState):
    def update(self, step, density_fn, *, generator=None):
        self.shrink.fill_(float("nan") if step == 2 else 0.0)


class MissedRaysGetLength(Even):
    def edges(self, rays, generator):
        near = rays.near[:, None]
        far = torch.where(rays.far > rays.near, rays.far, rays.near + 1.0)[:, None]
        return near + (far - near) * self.fractions(len(rays), rays.device, generator)


class Int32Indices(Even):
    def forward(self, rays, density_fn=None, *, generator=None):
        s = super().forward(rays, generator=generator)
        return PackedSamples(s.t_starts, s.t_ends, s.ray_indices.int(), s.num_rays)


class ReturnsTuple(Even):
    def forward(self, rays, density_fn=None, *, generator=None):
        s = super().forward(rays, generator=generator)
        return s.t_starts, s.t_ends, s.ray_indices


class ModifiesRays(Even):
    def forward(self, rays, density_fn=None, *, generator=None):
        rays.near.clamp_(min=0.1)
        return super().forward(rays, generator=generator)


class NeedsArgument(Even):
    def __init__(self, num_samples: int) -> None:
        super().__init__(num_samples)


class EvenSteps(nn.Module):
    """``Even`` in evaluation mode, torch only: a correct export module."""

    def __init__(self, num_samples: int) -> None:
        super().__init__()
        self.num_samples = num_samples

    def forward(self, origins: Tensor, directions: Tensor, near: Tensor, far: Tensor):
        return pack_dense_edges(interval_edges(near, far, even_fractions(near.shape[0], self.num_samples + 1,
                                                                         near.device)))


class Exportable(Even):
    def standalone(self, field):
        return EvenSteps(self.num_samples)


class ExportRaises(Even):
    def standalone(self, field):
        raise NotImplementedError("no twin yet")


class ExportsAFunction(Even):
    def standalone(self, field):
        return lambda origins, directions, near, far: None


class ExportSharesItsBuffer(Adaptive):
    def standalone(self, field):
        twin = EvenSteps(self.num_samples)
        twin.register_buffer("shrink", self.shrink)  # not a copy: training would change the export
        return twin


class ExportCrashesOnEmpty(Even):
    def standalone(self, field):
        class Steps(EvenSteps):
            def forward(self, origins, directions, near, far):
                longest = (far - near).max()  # no maximum of an empty tensor
                return super().forward(origins, directions, near, far * (longest / longest))

        return Steps(self.num_samples)


class ExportReturnsPackedSamples(Even):
    def standalone(self, field):
        class Steps(EvenSteps):
            def forward(self, origins, directions, near, far):
                return PackedSamples(*super().forward(origins, directions, near, far), near.shape[0])

        return Steps(self.num_samples)


class ExportInt32Indices(Even):
    def standalone(self, field):
        class Steps(EvenSteps):
            def forward(self, origins, directions, near, far):
                starts, ends, indices = super().forward(origins, directions, near, far)
                return starts, ends, indices.int()

        return Steps(self.num_samples)


class ExportDiffers(Even):
    """The twin spaces its edges evenly in u^2, the sampler evenly in u: both valid, not the same."""

    def standalone(self, field):
        class Steps(EvenSteps):
            def forward(self, origins, directions, near, far):
                u = even_fractions(near.shape[0], self.num_samples + 1, near.device)
                return pack_dense_edges(interval_edges(near, far, u**2))

        return Steps(self.num_samples)


class ExportIgnoresTheField(Even):
    """Places samples by the density in forward, but its twin does not query the field it is given."""

    def forward(self, rays, density_fn=None, *, generator=None):
        edges = self.edges(rays, generator)
        if density_fn is not None and not self.training and len(rays):
            mids = 0.5 * (edges[:, :1] + edges[:, 1:2])
            dense = density_fn(rays.origins + rays.directions * mids) > 1.0  # [R] first interval occupied
            edges = torch.where(dense[:, None], edges, edges[:, :1].expand_as(edges))
        return PackedSamples.from_dense(edges)

    def standalone(self, field):
        return EvenSteps(self.num_samples)


class NotASampler(nn.Module):
    def forward(self, rays, density_fn=None, *, generator=None):
        return Even()(rays)


BROKEN = [
    (NotASampler(), "is a Sampler"),
    (NeedsArgument(4), "constructible without arguments"),
    (NanAfterUpdate(), "update keeps buffers finite"),
    (ModifiesRays(), "rays left unchanged"),
    (ReturnsTuple(), "returns PackedSamples"),
    (WrongNumRays(), "num_rays equals the ray count"),
    (Int32Indices(), "float intervals and int64 ray indices"),
    (IndicesOutOfRange(), "ray indices in range"),
    (Ungrouped(), "ray indices grouped"),
    (MissedRaysGetLength(), "missed rays get zero length"),
    (BeyondFar(), "within near and far"),
    (Unsorted(), "sorted within each ray"),
    (Overlapping(), "non-overlapping within each ray"),
    (CrashesOnEmpty(), "empty batch"),
    (PythonRandom(), "same samples for the same generator seed"),
    (IgnoresGenerator(), "same samples for the same generator seed"),
    (JittersInEval(), "deterministic in eval mode"),
    (NonPersistentState(), "state_dict round trip"),
    (AttributeState(), "state_dict round trip"),
    (OmitsBufferFromStateDict(), "state_dict round trip"),
    (NanLoss(), "auxiliary loss is a finite scalar"),
    (VectorLoss(), "auxiliary loss is a finite scalar"),
    (DetachedLoss(), "gradients reach the parameters"),
    (UnusedParameter(), "gradients reach the parameters"),
    (ExportRaises(), "standalone() builds a module"),
    (ExportsAFunction(), "standalone() builds a module"),
    (ExportSharesItsBuffer(), "standalone() keeps its own copies"),
    (ExportCrashesOnEmpty(), "standalone() runs"),
    (ExportReturnsPackedSamples(), "standalone() returns three tensors"),
    (ExportInt32Indices(), "float intervals and int64 ray indices"),
    (ExportDiffers(), "standalone() matches eval forward"),
    (ExportIgnoresTheField(), "standalone() matches eval forward"),
]


@pytest.mark.parametrize(("sampler", "rule"), BROKEN, ids=[type(s).__name__ for s, _ in BROKEN])
def test_kit_names_the_rule_a_broken_sampler_breaks(sampler: Sampler, rule: str) -> None:
    name = type(sampler).__name__
    with pytest.raises(AssertionError, match=rf"^check_sampler\({name}\): rule '{re.escape(rule)}' broken"):
        check_sampler(sampler)


def test_message_locates_the_problem() -> None:
    with pytest.raises(AssertionError) as info:
        check_sampler(Unsorted())
    message = str(info.value)
    assert "in train mode (32-ray bundle)" in message
    assert "ray 0, its sample 1 (packed index 1)" in message


def test_a_correct_export_module_passes_and_is_named() -> None:
    report = check_sampler(Exportable())
    assert report.standalone == "EvenSteps" and report.standalone_bitwise
    field = synthetic_field()
    assert torch.equal(field.density(torch.tensor([[0.5, 0.0, 0.0]])), torch.tensor([50.0]))


def test_broken_export_messages_say_where_and_what() -> None:
    with pytest.raises(AssertionError) as info:
        check_sampler(ExportCrashesOnEmpty())
    assert "broken in the standalone() module Steps (empty batch): raised RuntimeError" in str(info.value)
    with pytest.raises(AssertionError) as info:
        check_sampler(ExportSharesItsBuffer())
    assert "the module's 'shrink' shares memory with the sampler's parameters or buffers" in str(info.value)
    with pytest.raises(AssertionError) as info:
        check_sampler(ExportInt32Indices())
    assert ("broken in the standalone() module Steps (32-ray bundle): t_starts torch.float32, t_ends "
            "torch.float32, ray_indices torch.int32") in str(info.value)
    with pytest.raises(AssertionError) as info:
        check_sampler(ExportDiffers())
    assert "the module and the sampler's eval-mode forward differ: t_starts[1] (ray 0)" in str(info.value)
