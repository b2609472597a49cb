"""Packed volume rendering against closed forms and a per-ray reference implementation."""

from __future__ import annotations

import math

import pytest
import torch

from nerf_lightning.core.types import PackedSamples, Rays, SceneBox
from nerf_lightning.rendering.packed import (
    accumulate_along_rays,
    exclusive_sum_per_ray,
    first_sample_indices,
    render_weights,
)
from nerf_lightning.rendering.renderer import VolumeRenderer


def constant_segment(a: float, b: float, n: int, num_rays: int = 1) -> PackedSamples:
    """``n`` equal intervals over ``[a, b]`` on each of ``num_rays`` rays."""
    edges = torch.linspace(a, b, n + 1, dtype=torch.float64).expand(num_rays, n + 1)
    return PackedSamples.from_dense(edges.float().contiguous())


def reference_render(samples: PackedSamples, density: torch.Tensor, rgb: torch.Tensor,
                     background: torch.Tensor) -> dict[str, torch.Tensor]:
    """Straightforward per-ray loop in float64: ``T_i = prod_{j<i} (1 - alpha_j)``."""
    ray_indices = samples.ray_indices
    t_starts, t_ends = samples.t_starts.double(), samples.t_ends.double()
    density, rgb, background = density.double(), rgb.double(), background.double()
    weights = torch.zeros(len(samples), dtype=torch.float64)
    out_rgb, depth, opacity, trans = [], [], [], torch.zeros(len(samples), dtype=torch.float64)
    for ray in range(samples.num_rays):
        idx = torch.nonzero(ray_indices == ray).flatten()
        if idx.numel() == 0:
            out_rgb.append(background.clone())
            depth.append(torch.zeros((), dtype=torch.float64))
            opacity.append(torch.zeros((), dtype=torch.float64))
            continue
        alpha = 1.0 - torch.exp(-density[idx] * (t_ends[idx] - t_starts[idx]))
        transmittance = torch.cumprod(torch.cat([alpha.new_ones(1), 1.0 - alpha[:-1]]), dim=0)
        w = transmittance * alpha
        weights = weights.index_put((idx,), w)
        trans = trans.index_put((idx,), transmittance)
        acc = w.sum()
        opacity.append(acc)
        out_rgb.append((w[:, None] * rgb[idx]).sum(0) + (1.0 - acc) * background)
        mids = 0.5 * (t_starts[idx] + t_ends[idx])
        depth.append((w * mids).sum() / acc.clamp_min(1e-6))
    return {
        "weights": weights,
        "transmittance": trans,
        "rgb": torch.stack(out_rgb),
        "depth": torch.stack(depth),
        "opacity": torch.stack(opacity),
    }


def random_packed(counts: list[int], generator: torch.Generator) -> PackedSamples:
    """Sorted, non-overlapping random intervals with ``counts[r]`` samples on ray ``r``."""
    starts, ends, indices = [], [], []
    for ray, count in enumerate(counts):
        if count == 0:
            continue
        edges = torch.sort(torch.rand(2 * count, generator=generator) * 4.0 + 1.0).values
        starts.append(edges[0::2])
        ends.append(edges[1::2])
        indices.append(torch.full((count,), ray, dtype=torch.long))
    return PackedSamples(torch.cat(starts), torch.cat(ends), torch.cat(indices), len(counts))


# --- constant density: closed forms --------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.1, 1.3, 7.0])
def test_constant_density_matches_closed_form(sigma: float) -> None:
    a, b, n = 2.0, 5.0, 64
    samples = constant_segment(a, b, n)
    density = torch.full((n,), sigma)
    weights, transmittance = render_weights(density, samples.deltas, samples.ray_indices, 1)

    expected_opacity = 1.0 - math.exp(-sigma * (b - a))
    assert weights.sum().item() == pytest.approx(expected_opacity, abs=1e-5)
    expected_t = torch.exp(-sigma * (samples.t_starts.double() - a))
    torch.testing.assert_close(transmittance.double(), expected_t, rtol=0, atol=1e-5)
    assert transmittance[0].item() == 1.0

    out = VolumeRenderer()(torch.tensor([0.2, 0.5, 0.9]).expand(n, 3), density, samples,
                           torch.tensor([1.0, 0.0, 0.25]))
    assert out.opacity.item() == pytest.approx(expected_opacity, abs=1e-5)
    assert out.weights.sum().item() == pytest.approx(out.opacity.item(), abs=1e-6)
    expected_rgb = (torch.tensor([0.2, 0.5, 0.9], dtype=torch.float64) * expected_opacity
                    + torch.tensor([1.0, 0.0, 0.25], dtype=torch.float64) * (1.0 - expected_opacity))
    torch.testing.assert_close(out.rgb[0].double(), expected_rgb, rtol=0, atol=1e-5)

    # Expected depth of the piecewise-constant quadrature: w_i = q^i (1 - q), q = exp(-sigma d),
    # at t_i = a + d (i + 1/2); closed forms of sum q^i and sum i q^i.
    d = (b - a) / n
    q = math.exp(-sigma * d)
    geometric = (1.0 - q**n) / (1.0 - q)
    arithmetico = q * (1.0 - n * q ** (n - 1) + (n - 1) * q**n) / (1.0 - q) ** 2
    depth = (1.0 - q) * ((a + 0.5 * d) * geometric + d * arithmetico) / (1.0 - q**n)
    assert a < out.depth.item() < b
    assert out.depth.item() == pytest.approx(depth, abs=1e-4)
    # Continuous limit: (a + 1/sigma) - (b - a) e^{-sigma (b-a)} / (1 - e^{-sigma (b-a)}).
    continuous = a + 1.0 / sigma - (b - a) * math.exp(-sigma * (b - a)) / expected_opacity
    assert out.depth.item() == pytest.approx(continuous, abs=0.05)


def test_zero_density_and_zero_length_intervals_contribute_nothing() -> None:
    samples = constant_segment(0.0, 1.0, 4)
    out = VolumeRenderer()(torch.rand(4, 3), torch.zeros(4), samples, torch.tensor([0.3, 0.6, 0.9]))
    assert out.opacity.item() == 0.0
    assert out.depth.item() == 0.0
    torch.testing.assert_close(out.rgb[0], torch.tensor([0.3, 0.6, 0.9]))

    flat = PackedSamples(torch.full((3,), 2.0), torch.full((3,), 2.0), torch.zeros(3, dtype=torch.long), 1)
    weights, transmittance = render_weights(torch.full((3,), 1e4), flat.deltas, flat.ray_indices, 1)
    assert weights.abs().max().item() == 0.0
    assert transmittance.tolist() == [1.0, 1.0, 1.0]


def test_background_override_replaces_background() -> None:
    samples = constant_segment(0.0, 1.0, 8)
    density, rgb = torch.full((8,), 0.5), torch.full((8, 3), 0.5)
    plain = VolumeRenderer()(rgb, density, samples, torch.ones(3))
    black = VolumeRenderer(background_override=(0.0, 0.0, 0.0))(rgb, density, samples, torch.ones(3))
    torch.testing.assert_close(black.rgb, plain.rgb - (1.0 - plain.opacity[:, None]))
    torch.testing.assert_close(black.rgb, 0.5 * plain.opacity[:, None].expand(1, 3))


def test_per_ray_background() -> None:
    samples = constant_segment(0.0, 1.0, 4, num_rays=2)
    background = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    out = VolumeRenderer()(torch.zeros(8, 3), torch.ones(8), samples, background)
    transparency = math.exp(-1.0)
    torch.testing.assert_close(out.rgb, background * transparency)


# --- packed equals a per-ray reference -----------------------------------------------------------


def test_packed_rendering_matches_per_ray_reference() -> None:
    gen = torch.Generator().manual_seed(0)
    counts = [0, 3, 1, 0, 0, 7, 2, 300, 5, 0, 1, 0]  # empty rays first, in the middle and last
    samples = random_packed(counts, gen)
    num_samples = len(samples)
    density = torch.rand(num_samples, generator=gen) * 3.0
    density[::7] = 0.0
    rgb = torch.rand(num_samples, 3, generator=gen)
    background = torch.tensor([0.1, 0.7, 0.4])

    assert samples.samples_per_ray().tolist() == counts
    out = VolumeRenderer()(rgb, density, samples, background)
    ref = reference_render(samples, density, rgb, background)
    _, transmittance = render_weights(density, samples.deltas, samples.ray_indices, len(counts))

    for name, value in [("weights", out.weights), ("rgb", out.rgb), ("opacity", out.opacity),
                        ("depth", out.depth), ("transmittance", transmittance)]:
        torch.testing.assert_close(value.double(), ref[name], rtol=0, atol=1e-5, msg=name)
    empty = torch.tensor([c == 0 for c in counts])
    assert out.opacity[empty].abs().max().item() == 0.0
    assert out.depth[empty].abs().max().item() == 0.0
    torch.testing.assert_close(out.rgb[empty], background.expand(int(empty.sum()), 3))


def test_gradients_match_per_ray_reference() -> None:
    gen = torch.Generator().manual_seed(1)
    counts = [2, 0, 5, 1, 4]
    samples = random_packed(counts, gen)
    density = (torch.rand(len(samples), generator=gen) * 2.0).requires_grad_()
    rgb = torch.rand(len(samples), 3, generator=gen).requires_grad_()
    background = torch.tensor([0.2, 0.3, 0.4])
    probe = torch.randn(len(counts), 3, generator=gen)

    out = VolumeRenderer()(rgb, density, samples, background)
    grad_density, grad_rgb = torch.autograd.grad((out.rgb * probe).sum() + out.depth.sum(), [density, rgb])

    density64 = density.detach().double().requires_grad_()
    rgb64 = rgb.detach().double().requires_grad_()
    ref = reference_render(samples, density64, rgb64, background)
    ref_density, ref_rgb = torch.autograd.grad((ref["rgb"] * probe.double()).sum() + ref["depth"].sum(),
                                               [density64, rgb64])
    assert grad_density.abs().sum() > 0 and grad_rgb.abs().sum() > 0
    torch.testing.assert_close(grad_density.double(), ref_density, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grad_rgb.double(), ref_rgb, rtol=1e-4, atol=1e-5)


def test_exclusive_sum_gradcheck_double() -> None:
    ray_indices = torch.tensor([0, 0, 0, 2, 2, 3])
    values = torch.rand(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: exclusive_sum_per_ray(v, ray_indices, 5), (values,))


def test_render_weights_gradcheck() -> None:
    # render_weights computes in float32 by contract (its outputs are float32), so the
    # finite differences use a step and tolerances that float32 can resolve.
    ray_indices = torch.tensor([0, 0, 0, 1, 3, 3])
    deltas = torch.tensor([0.3, 0.2, 0.5, 0.4, 0.1, 0.7], dtype=torch.float64)
    densities = torch.tensor([0.5, 1.5, 0.8, 2.0, 0.3, 1.1], dtype=torch.float64, requires_grad=True)

    def fn(sigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        weights, transmittance = render_weights(sigma, deltas, ray_indices, 4)
        return weights.double(), transmittance.double()

    assert torch.autograd.gradcheck(fn, (densities,), eps=1e-3, atol=2e-3, rtol=1e-2)


# --- precision -----------------------------------------------------------------------------------


def test_last_ray_transmittance_precise_with_a_million_samples() -> None:
    num_rays, per_ray = 10_000, 100
    gen = torch.Generator().manual_seed(2)
    deltas = torch.full((num_rays * per_ray,), 0.01)
    # Earlier rays are opaque (optical depth 10 per sample, global running sum ~1e7, far past
    # float32's integer precision); the last ray is thin so its transmittance spans (0.3, 1].
    density = torch.rand(num_rays * per_ray, generator=gen) * 500.0 + 750.0
    last = slice((num_rays - 1) * per_ray, None)
    density[last] = torch.rand(per_ray, generator=gen) * 2.0
    ray_indices = torch.arange(num_rays).repeat_interleave(per_ray)

    _, transmittance = render_weights(density, deltas, ray_indices, num_rays)
    optical = density[last].double() * deltas[last].double()
    expected = torch.exp(-(torch.cumsum(optical, 0) - optical))
    assert expected[-1] < 0.5
    torch.testing.assert_close(transmittance[last].double(), expected, rtol=0, atol=1e-5)


# --- packed primitives on hand-written inputs ----------------------------------------------------


def test_first_sample_indices_by_hand() -> None:
    ray_indices = torch.tensor([1, 1, 2, 4, 4, 4])
    assert first_sample_indices(ray_indices, 6).tolist() == [0, 0, 2, 3, 3, 6]
    assert first_sample_indices(torch.zeros(0, dtype=torch.long), 3).tolist() == [0, 0, 0]


def test_exclusive_sum_per_ray_by_hand() -> None:
    values = torch.tensor([1.0, 2.0, 3.0, 10.0, 20.0, 5.0, 6.0, 7.0])
    ray_indices = torch.tensor([0, 0, 0, 2, 2, 3, 5, 5])
    result = exclusive_sum_per_ray(values, ray_indices, 7)
    assert result.dtype == torch.float32
    assert result.tolist() == [0.0, 1.0, 3.0, 0.0, 10.0, 0.0, 0.0, 6.0]


def test_empty_inputs() -> None:
    empty = torch.zeros(0)
    no_rays = torch.zeros(0, dtype=torch.long)
    assert exclusive_sum_per_ray(empty, no_rays, 3).shape == (0,)
    weights, transmittance = render_weights(empty, empty, no_rays, 3)
    assert weights.shape == (0,) and transmittance.shape == (0,)
    assert accumulate_along_rays(empty, no_rays, 3).tolist() == [0.0, 0.0, 0.0]

    samples = PackedSamples(empty, empty, no_rays, 2)
    assert samples.samples_per_ray().tolist() == [0, 0]
    out = VolumeRenderer()(torch.zeros(0, 3), empty, samples, torch.tensor([0.5, 0.25, 1.0]))
    torch.testing.assert_close(out.rgb, torch.tensor([[0.5, 0.25, 1.0]] * 2))
    assert out.opacity.tolist() == [0.0, 0.0] and out.depth.tolist() == [0.0, 0.0]


def test_accumulate_along_rays_by_hand() -> None:
    weights = torch.tensor([0.5, 0.25, 1.0, 2.0])
    ray_indices = torch.tensor([0, 0, 2, 2])
    values = torch.tensor([[1.0, 2.0], [4.0, 8.0], [1.0, 0.0], [0.0, 1.0]])
    assert accumulate_along_rays(weights, ray_indices, 3).tolist() == [0.75, 0.0, 3.0]
    assert accumulate_along_rays(weights, ray_indices, 3, values).tolist() == [[1.5, 3.0], [0, 0], [1.0, 2.0]]


# --- shared types --------------------------------------------------------------------------------


def test_packed_samples_from_dense_and_positions() -> None:
    edges = torch.tensor([[0.0, 1.0, 3.0], [2.0, 2.5, 4.0]])
    samples = PackedSamples.from_dense(edges)
    assert samples.num_rays == 2 and len(samples) == 4
    assert samples.t_starts.tolist() == [0.0, 1.0, 2.0, 2.5]
    assert samples.t_ends.tolist() == [1.0, 3.0, 2.5, 4.0]
    assert samples.ray_indices.tolist() == [0, 0, 1, 1]
    assert samples.t_mids.tolist() == [0.5, 2.0, 2.25, 3.25]
    assert samples.deltas.tolist() == [1.0, 2.0, 0.5, 1.5]
    assert samples.samples_per_ray().tolist() == [2, 2]

    rays = Rays(origins=torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0]]),
                directions=torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
                near=torch.tensor([0.0, 2.0]), far=torch.tensor([3.0, 4.0]))
    expected = torch.tensor([[1.0, 0.5, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 1.25], [0.0, 0.0, 2.25]])
    torch.testing.assert_close(samples.positions(rays), expected)
    torch.testing.assert_close(samples.directions(rays), rays.directions[[0, 0, 1, 1]])


COUNTS_WITH_ZEROS = [0, 3, 0, 0, 1, 4, 0]  # empty rays first, in the middle and last


def test_packed_samples_from_counts_equals_hand_packing() -> None:
    reference = random_packed(COUNTS_WITH_ZEROS, torch.Generator().manual_seed(3))
    for dtype in (torch.int64, torch.int32):  # ray indices are int64 either way
        counts = torch.tensor(COUNTS_WITH_ZEROS, dtype=dtype)
        packed = PackedSamples.from_counts(reference.t_starts, reference.t_ends, counts)
        assert packed.num_rays == len(COUNTS_WITH_ZEROS) and packed.ray_indices.dtype == torch.int64
        assert torch.equal(packed.ray_indices, reference.ray_indices)
        assert packed.t_starts is reference.t_starts and packed.t_ends is reference.t_ends
        assert packed.samples_per_ray().tolist() == COUNTS_WITH_ZEROS


def test_packed_samples_from_edges_equals_hand_packing() -> None:
    generator = torch.Generator().manual_seed(4)
    per_ray = [torch.sort(torch.rand(count + 1, generator=generator) * 4.0 + 1.0).values
               for count in COUNTS_WITH_ZEROS]  # count + 1 edges, one for a ray without intervals
    edges = torch.cat(per_ray).requires_grad_()
    packed = PackedSamples.from_edges(edges, torch.tensor(COUNTS_WITH_ZEROS))
    assert packed.num_rays == len(COUNTS_WITH_ZEROS) and len(packed) == sum(COUNTS_WITH_ZEROS)
    assert torch.equal(packed.t_starts, torch.cat([e[:-1] for e in per_ray]))
    assert torch.equal(packed.t_ends, torch.cat([e[1:] for e in per_ray]))
    hand = torch.cat([torch.full((count,), ray) for ray, count in enumerate(COUNTS_WITH_ZEROS)])
    assert torch.equal(packed.ray_indices, hand)
    packed.deltas.sum().backward()  # gradients reach the edges: first minus last edge of each ray
    expected = torch.cat([torch.tensor([-1.0] + [0.0] * (c - 1) + [1.0]) if c else torch.zeros(1)
                          for c in COUNTS_WITH_ZEROS])
    torch.testing.assert_close(edges.grad, expected)


def test_packed_samples_from_edges_and_counts_match_from_dense() -> None:
    edges = torch.sort(torch.rand(5, 4, generator=torch.Generator().manual_seed(5)), dim=1).values
    dense = PackedSamples.from_dense(edges)
    counts = torch.full((5,), 3)
    for packed in (PackedSamples.from_edges(edges.reshape(-1), counts),
                   PackedSamples.from_counts(dense.t_starts, dense.t_ends, counts)):
        for name in ("t_starts", "t_ends", "ray_indices"):
            assert torch.equal(getattr(packed, name), getattr(dense, name)), name
        assert packed.num_rays == dense.num_rays


def test_packed_samples_from_counts_and_edges_without_samples() -> None:
    empty = torch.zeros(0)
    for rays in (0, 3):  # no rays; rays that all have no interval
        counts = torch.zeros(rays, dtype=torch.long)
        for packed in (PackedSamples.from_counts(empty, empty, counts),
                       PackedSamples.from_edges(torch.ones(rays), counts)):
            assert packed.num_rays == rays and len(packed) == 0 and packed.ray_indices.dtype == torch.int64
            assert packed.t_ends.shape == (0,)


def test_samples_per_ray_counts_empty_rays() -> None:
    samples = PackedSamples(torch.zeros(5), torch.ones(5), torch.tensor([1, 1, 1, 3, 3]), 5)
    assert samples.samples_per_ray().tolist() == [0, 3, 0, 2, 0]


def test_scene_box_intersect_by_hand() -> None:
    box = SceneBox(torch.tensor([-1.0, -2.0, 0.0]), torch.tensor([1.0, 2.0, 3.0]))
    s = 1.0 / math.sqrt(2.0)
    origins = torch.tensor([
        [-5.0, 0.0, 1.0],   # along +x through the box: x from -1 to 1
        [0.0, 0.0, 1.0],    # from inside, along -y: leaves at y = -2
        [3.0, 3.0, 1.0],    # diagonal in x-y, enters at x = 1 (t = 2 sqrt 2), leaves at x = -1 (4 sqrt 2)
        [-5.0, 5.0, 1.0],   # along +x above the box: misses
        [0.5, 0.5, 10.0],   # straight down -z: z from 3 to 0
    ])
    directions = torch.tensor([
        [1.0, 0.0, 0.0],
        [0.0, -1.0, 0.0],
        [-s, -s, 0.0],
        [1.0, 0.0, 0.0],
        [0.0, 0.0, -1.0],
    ])
    entry, exit_ = box.intersect(origins, directions)
    torch.testing.assert_close(entry[[0, 2, 4]], torch.tensor([4.0, 2.0 * math.sqrt(2.0), 7.0]))
    torch.testing.assert_close(exit_[[0, 2, 4]], torch.tensor([6.0, 4.0 * math.sqrt(2.0), 10.0]))
    assert entry[1].item() < 0.0
    assert exit_[1].item() == pytest.approx(2.0)
    assert exit_[3].item() <= entry[3].item()
    torch.testing.assert_close(box.as_tensor(), torch.tensor([[-1.0, -2.0, 0.0], [1.0, 2.0, 3.0]]))
    assert SceneBox.cube(0.5, (1.0, 0.0, 0.0)).as_tensor().tolist() == [[0.5, -0.5, -0.5], [1.5, 0.5, 0.5]]
