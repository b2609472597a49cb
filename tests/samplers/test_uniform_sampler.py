"""The ``Uniform`` sampler: intervals within [near, far], sorted, reproducible jitter."""

from __future__ import annotations

import pytest
import torch

from nerf_lightning.core.types import PackedSamples, Rays
from nerf_lightning.samplers import Uniform

NUM_SAMPLES = 8


def make_rays(near: list[float], far: list[float]) -> Rays:
    n = len(near)
    gen = torch.Generator().manual_seed(0)
    directions = torch.randn(n, 3, generator=gen)
    return Rays(origins=torch.randn(n, 3, generator=gen),
                directions=directions / directions.norm(dim=-1, keepdim=True),
                near=torch.tensor(near), far=torch.tensor(far))


RAYS = make_rays([0.0, 2.0, 0.5, 1.0], [1.0, 6.0, 0.75, 100.0])


def per_ray(samples: PackedSamples, values: torch.Tensor) -> torch.Tensor:
    """``[R, N]`` view of per-sample values (the sampler gives every ray N samples)."""
    return values.view(samples.num_rays, -1)


def check_intervals(samples: PackedSamples, rays: Rays) -> None:
    num_rays = len(rays)
    assert samples.num_rays == num_rays and len(samples) == num_rays * NUM_SAMPLES
    assert samples.samples_per_ray().tolist() == [NUM_SAMPLES] * num_rays
    assert samples.ray_indices.tolist() == torch.arange(num_rays).repeat_interleave(NUM_SAMPLES).tolist()
    starts, ends = per_ray(samples, samples.t_starts), per_ray(samples, samples.t_ends)
    near, far = rays.near[:, None], torch.maximum(rays.far, rays.near)[:, None]
    assert (starts >= near).all() and (ends <= far).all()
    assert (starts <= ends).all()
    assert (ends[:, :-1] <= starts[:, 1:]).all()  # sorted, non-overlapping
    assert (ends[:, :-1] == starts[:, 1:]).all()  # contiguous: edges are shared


@pytest.mark.parametrize("training", [True, False])
def test_intervals_inside_bounds_sorted_and_non_overlapping(training: bool) -> None:
    sampler = Uniform(NUM_SAMPLES).train(training)
    for seed in range(3):
        check_intervals(sampler(RAYS, generator=torch.Generator().manual_seed(seed)), RAYS)


def test_eval_intervals_are_equal_length() -> None:
    samples = Uniform(NUM_SAMPLES).eval()(RAYS)
    deltas = per_ray(samples, samples.deltas)
    expected = (RAYS.far - RAYS.near) / (NUM_SAMPLES + 1)
    # Edges are equally spaced whatever the end convention, so all deltas of one ray agree.
    torch.testing.assert_close(deltas, deltas[:, :1].expand_as(deltas))
    assert (deltas[:, 0] >= expected - 1e-5).all()


def test_eval_intervals_cover_near_to_far() -> None:
    samples = Uniform(NUM_SAMPLES).eval()(RAYS)
    starts, ends = per_ray(samples, samples.t_starts), per_ray(samples, samples.t_ends)
    torch.testing.assert_close(starts[:, 0], RAYS.near)
    torch.testing.assert_close(ends[:, -1], RAYS.far)


def test_eval_is_deterministic_and_ignores_generator() -> None:
    sampler = Uniform(NUM_SAMPLES).eval()
    a = sampler(RAYS, generator=torch.Generator().manual_seed(1))
    b = sampler(RAYS, generator=torch.Generator().manual_seed(2))
    c = sampler(RAYS)
    assert torch.equal(a.t_starts, b.t_starts) and torch.equal(a.t_ends, b.t_ends)
    assert torch.equal(a.t_starts, c.t_starts) and torch.equal(a.t_ends, c.t_ends)
    # jitter=False behaves as evaluation even in training mode.
    d = Uniform(NUM_SAMPLES, jitter=False).train()(RAYS, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.t_starts, d.t_starts) and torch.equal(a.t_ends, d.t_ends)


def test_training_jitter_follows_the_generator() -> None:
    sampler = Uniform(NUM_SAMPLES).train()
    a = sampler(RAYS, generator=torch.Generator().manual_seed(7))
    b = sampler(RAYS, generator=torch.Generator().manual_seed(7))
    c = sampler(RAYS, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a.t_starts, b.t_starts) and torch.equal(a.t_ends, b.t_ends)
    assert not torch.equal(a.t_starts, c.t_starts)
    evaluated = Uniform(NUM_SAMPLES).eval()(RAYS)
    assert not torch.equal(a.t_starts, evaluated.t_starts)


def test_training_jitter_stays_within_half_an_interval() -> None:
    """Inner edge k lies within half an interval of near + k h; the end edges stay at near and far."""
    rays = make_rays([1.0], [10.0])
    sampler = Uniform(NUM_SAMPLES).train()
    gen = torch.Generator().manual_seed(0)
    h = 9.0 / NUM_SAMPLES
    for _ in range(5):
        samples = sampler(rays, generator=gen)
        edges = torch.cat([samples.t_starts, samples.t_ends[-1:]])
        centre = 1.0 + h * torch.arange(NUM_SAMPLES + 1)
        assert (edges - centre).abs().max() <= 0.5 * h + 1e-5
        assert edges[0] == 1.0 and abs(float(edges[-1]) - 10.0) < 1e-5
        assert not torch.allclose(edges[1:-1], centre[1:-1])


@pytest.mark.parametrize("training", [True, False])
def test_rays_that_miss_get_zero_length_intervals(training: bool) -> None:
    rays = make_rays([2.0, 3.0, 1.0], [2.0, 1.0, 4.0])  # far == near, far < near, a normal ray
    samples = Uniform(NUM_SAMPLES).train(training)(rays, generator=torch.Generator().manual_seed(0))
    deltas = per_ray(samples, samples.deltas)
    assert deltas[:2].abs().max().item() == 0.0
    assert per_ray(samples, samples.t_starts)[:2].tolist() == [[2.0] * NUM_SAMPLES, [3.0] * NUM_SAMPLES]
    assert (deltas[2] > 0).all()


def test_num_samples_validation() -> None:
    for bad in (0, -1):
        with pytest.raises(ValueError, match="num_samples"):
            Uniform(bad)
    assert len(Uniform(1).eval()(RAYS)) == len(RAYS)


def test_positions_lie_on_the_rays() -> None:
    samples = Uniform(NUM_SAMPLES).eval()(RAYS)
    positions = samples.positions(RAYS)
    offsets = positions - RAYS.origins[samples.ray_indices]
    t = (offsets * RAYS.directions[samples.ray_indices]).sum(-1)
    torch.testing.assert_close(t, samples.t_mids)
    torch.testing.assert_close(offsets, RAYS.directions[samples.ray_indices] * t[:, None])
