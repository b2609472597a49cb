"""The Disparity sampler plugin: the contract, its spacing and its entry point."""

from __future__ import annotations

from importlib.metadata import entry_points

import torch
from nerf_lightning_disparity import Disparity

from nerf_lightning.samplers import ENTRY_POINT_GROUP, load_sampler_plugins
from nerf_lightning.testing import check_sampler, synthetic_rays
from nerf_lightning.types import Rays


def test_contract() -> None:
    report = check_sampler(Disparity())
    assert report.standalone == "DisparitySteps" and report.standalone_bitwise  # the export hook, checked too
    check_sampler(Disparity(num_samples=1, jitter=False, min_near=0.5))


def eval_edges(sampler: Disparity, rays: Rays) -> torch.Tensor:
    """``[R, N + 1]`` edges of the evaluation-mode samples."""
    samples = sampler.eval()(rays)
    n = sampler.num_samples
    starts = samples.t_starts.view(len(rays), n)
    return torch.cat([starts, samples.t_ends.view(len(rays), n)[:, -1:]], dim=-1)


def test_edges_are_evenly_spaced_in_disparity() -> None:
    rays = synthetic_rays()
    hit = rays.far > rays.near
    sampler = Disparity(num_samples=16)
    edges = eval_edges(sampler, rays)[hit].double()
    disparity = 1.0 / edges
    steps = disparity[:, 1:] - disparity[:, :-1]
    torch.testing.assert_close(steps, steps[:, :1].expand_as(steps), rtol=1e-4, atol=0.0)
    near = rays.near[hit].clamp_min(sampler.min_near).double()
    torch.testing.assert_close(steps[:, 0], (1.0 / rays.far[hit] - 1.0 / near).double() / 16, rtol=1e-4,
                               atol=0.0)
    deltas = edges[:, 1:] - edges[:, :-1]
    assert bool((deltas[:, 1:] > deltas[:, :-1]).all())  # shorter intervals close to the camera


def test_near_is_clamped_and_misses_get_zero_length() -> None:
    directions = torch.tensor([[0.0, 0.0, 1.0]]).expand(4, -1)
    rays = Rays(origins=torch.zeros(4, 3), directions=directions,
                near=torch.tensor([0.0, 1.0, 2.0, 0.0]), far=torch.tensor([10.0, 4.0, 1.0, 0.03]))
    edges = eval_edges(Disparity(num_samples=4, min_near=0.05), rays)
    assert edges[0, 0] == 0.05 and edges[0, -1] == 10.0
    assert edges[1, 0] == 1.0 and edges[1, -1] == 4.0
    assert bool((edges[2] == 2.0).all())  # misses the scene: empty intervals at near
    assert bool((edges[3] == 0.03).all())  # ends before min_near: empty intervals at far


def test_jitter_is_reproducible_and_only_in_training() -> None:
    rays = synthetic_rays()
    sampler = Disparity(num_samples=8).train()
    a = sampler(rays, generator=torch.Generator().manual_seed(3))
    b = sampler(rays, generator=torch.Generator().manual_seed(3))
    c = sampler(rays, generator=torch.Generator().manual_seed(4))
    assert torch.equal(a.t_starts, b.t_starts)
    assert not torch.equal(a.t_starts, c.t_starts)
    frozen = Disparity(num_samples=8, jitter=False).train()
    assert torch.equal(frozen(rays).t_starts, eval_edges(Disparity(num_samples=8), rays)[:, :-1].reshape(-1))


def test_entry_point_is_installed() -> None:
    (entry_point,) = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == "Disparity"]
    assert entry_point.value == "nerf_lightning_disparity.sampler:Disparity"
    assert entry_point.dist is not None and entry_point.dist.name == "nerf-lightning-disparity"
    plugin = load_sampler_plugins()["Disparity"]
    assert plugin.sampler_class is Disparity
    assert plugin.distribution == "nerf-lightning-disparity" and plugin.version == "0.1.0"


def test_exported_twin_returns_the_evaluation_samples_for_any_ray_count() -> None:
    """The standalone() module (what `nerf-lightning export` builds on) samples as evaluation does."""
    rays = synthetic_rays()
    sampler = Disparity(num_samples=12, min_near=0.3).eval()
    twin = sampler.standalone(torch.nn.Identity())  # the field: not needed for disparity edges
    expected = sampler(rays)
    starts, ends, ray_indices = twin(rays.origins, rays.directions, rays.near, rays.far)
    assert torch.equal(starts, expected.t_starts) and torch.equal(ends, expected.t_ends)
    assert torch.equal(ray_indices, expected.ray_indices)
    rays_dim = torch.export.Dim("rays")
    program = torch.export.export(twin, (rays.origins, rays.directions, rays.near, rays.far),
                                  dynamic_shapes=[{0: rays_dim}] * 4).module()
    for count in (0, 1, len(rays)):
        traced = program(rays.origins[:count], rays.directions[:count], rays.near[:count], rays.far[:count])
        assert torch.equal(traced[0], expected.t_starts[: count * 12])
        assert torch.equal(traced[2], expected.ray_indices[: count * 12])
