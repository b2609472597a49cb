"""``VolumeRenderer(near_gradient_distance=d)``: the backward pass of samples nearer than ``d`` is scaled
by ``(t / d) ** 2``; what is rendered, and everything outside training, stays exactly as without it."""

from __future__ import annotations

import pytest
import torch

from nerf_lightning.core.types import PackedSamples
from nerf_lightning.rendering.renderer import VolumeRenderer


def _scene(seed: int = 0) -> tuple[PackedSamples, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Three rays of 16 intervals from 0.1 to 6 (nearer and farther than the distances tried)."""
    gen = torch.Generator().manual_seed(seed)
    edges = torch.linspace(0.1, 6.0, 17).expand(3, 17).contiguous()
    samples = PackedSamples.from_dense(edges)
    density = torch.rand(len(samples), generator=gen) * 0.5
    rgb = torch.rand(len(samples), 3, generator=gen)
    target = torch.rand(3, 3, generator=gen)
    return samples, density, rgb, target


def _gradients(renderer: VolumeRenderer, samples: PackedSamples, density: torch.Tensor, rgb: torch.Tensor,
               target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    density = density.clone().requires_grad_()
    rgb = rgb.clone().requires_grad_()
    out = renderer(rgb, density, samples, torch.ones(3))
    (out.rgb - target).square().sum().backward()
    assert density.grad is not None and rgb.grad is not None
    return out.rgb.detach(), density.grad, rgb.grad


@pytest.mark.parametrize("distance", [1.0, 4.0])
def test_near_samples_get_scaled_gradients_and_the_same_render(distance: float) -> None:
    samples, density, rgb, target = _scene()
    plain_rgb, plain_density_grad, plain_rgb_grad = _gradients(VolumeRenderer(), samples, density, rgb,
                                                               target)
    scaled_rgb, density_grad, rgb_grad = _gradients(VolumeRenderer(near_gradient_distance=distance),
                                                    samples, density, rgb, target)

    assert torch.equal(scaled_rgb, plain_rgb)  # the forward pass is untouched, bit for bit
    expected = (samples.t_mids / distance).square().clamp(max=1.0)
    near = samples.t_mids < distance
    assert bool(near.any()) and bool((~near).any())
    torch.testing.assert_close(density_grad, plain_density_grad * expected)
    torch.testing.assert_close(rgb_grad, plain_rgb_grad * expected[:, None])
    assert torch.equal(density_grad[~near], plain_density_grad[~near])
    # the nearest sample, at t = 0.284, is a long way below its plain gradient
    assert float(rgb_grad[0].abs().sum()) < 0.1 * float(plain_rgb_grad[0].abs().sum())


def test_no_scaling_outside_training() -> None:
    samples, density, rgb, target = _scene(1)
    renderer = VolumeRenderer(near_gradient_distance=4.0)
    _, plain_density_grad, plain_rgb_grad = _gradients(VolumeRenderer(), samples, density, rgb, target)
    renderer.eval()
    _, density_grad, rgb_grad = _gradients(renderer, samples, density, rgb, target)
    assert torch.equal(density_grad, plain_density_grad) and torch.equal(rgb_grad, plain_rgb_grad)


@pytest.mark.parametrize("distance", [-1.0, float("nan"), float("inf")])
def test_a_negative_distance_is_refused(distance: float) -> None:
    with pytest.raises(ValueError, match="near_gradient_distance must be a finite distance >= 0"):
        VolumeRenderer(near_gradient_distance=distance)
