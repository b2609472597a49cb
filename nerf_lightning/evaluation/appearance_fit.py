"""NeRF-W's test-time appearance fit: a code fitted to a test image's left half, scored on its right half.

A test view is not a training image, so it has no appearance code; the headline metrics render it
with the mean of the training codes (:mod:`nerf_lightning.fields.appearance`). A photo taken with
another exposure is then scored partly on the exposure, not on the scene. NeRF-W's fairer option:
fit one fresh code to the left half of the image (columns ``c`` with ``2 c < W``), the field frozen,
and score only the right half, which the fit never saw. The same right half rendered with the mean
code is the comparison.

Everything here is a pure function of a ``render`` callable, ``(rays [R], code [D]) -> rgb [R, 3]``,
differentiable in ``code``: whoever calls it decides how rays are sampled and shaded (the training
system's own path, so the fit sees exactly what evaluation renders).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from nerf_lightning.core.types import Rays

RenderWithCode = Callable[[Rays, Tensor], Tensor]
"""``(rays [R], code [D]) -> rgb [R, 3]``: a render of ``R`` rays with one appearance code."""


@dataclass(frozen=True)
class HalfFitOptions:
    """How a code is fitted.

    Attributes:
        steps: Adam steps on the code.
        rays_per_step: random left-half pixels (drawn with replacement) per step.
        learning_rate: Adam's learning rate on the code.
        chunk_rays: rays rendered at once when rendering the right half (no gradient).
    """

    steps: int = 64
    rays_per_step: int = 1024
    learning_rate: float = 0.05
    chunk_rays: int = 8192

    def __post_init__(self) -> None:
        for name in ("steps", "rays_per_step", "chunk_rays"):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value}")
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be a number > 0, got {self.learning_rate}")


@dataclass(frozen=True)
class HalfFit:
    """The right half of a test image, rendered with the fitted code.

    Attributes:
        code: ``[D]`` the fitted code (detached).
        rgb: ``[H, W_r, 3]`` the right half rendered with ``code``, clamped to ``[0, 1]``.
        columns: the first column of the right half (``W_r = W - columns``).
    """

    code: Tensor
    rgb: Tensor
    columns: int


def right_half_start(width: int) -> int:
    """The first column of the right half: the left half is the columns ``c`` with ``2 c < width``."""
    return (width + 1) // 2


def right_half(image: Tensor, width: int) -> Tensor:
    """``[H, W_r, ...]`` the right-half columns of an ``[H, W, ...]`` image."""
    return image[:, right_half_start(width):]


def render_pixels(render: RenderWithCode, rays: Rays, pixels: Tensor, code: Tensor,
                  rays_per_pixel: int = 1) -> Tensor:
    """``[N, 3]`` the colours of ``pixels [N]`` (int64) with ``code``: the mean of each pixel's
    ``rays_per_pixel`` rays, which follow one another in ``rays`` (``RayBatch.rays_per_pixel``)."""
    if rays_per_pixel == 1:
        return render(rays[pixels], code)
    offsets = torch.arange(rays_per_pixel, device=pixels.device)
    chosen = (pixels[:, None] * rays_per_pixel + offsets).reshape(-1)  # [N * K]
    return render(rays[chosen], code).unflatten(0, (-1, rays_per_pixel)).mean(dim=1)


def fit_code(render: RenderWithCode, rays: Rays, target: Tensor, pixels: Tensor, initial_code: Tensor,
             options: HalfFitOptions, generator: torch.Generator, rays_per_pixel: int = 1) -> Tensor:
    """Fit one code to some pixels of a view: Adam on the mean squared error of random pixels.

    Args:
        render: the renderer with a code.
        rays: ``P * rays_per_pixel`` rays of the view's ``P`` pixels; target: ``[P, 3]`` their colours.
        pixels: ``[K]`` int64, ``K >= 1``, the pixels the fit may draw from.
        initial_code: ``[D]`` where the fit starts (the mean code: the fit starts from the headline's
            render of the view).
        options: steps, rays per step, learning rate.
        generator: draws the pixels (on the rays' device); the fit is deterministic given its state.
        rays_per_pixel: rays of each pixel, averaged into its colour.

    Returns:
        ``[D]`` the fitted code, detached. Only the code is updated: the gradient is taken with
        respect to it alone, so no parameter of the renderer gets a ``.grad``.
    """
    code = initial_code.detach().clone().requires_grad_(True)
    optimizer = torch.optim.Adam([code], lr=options.learning_rate)
    with torch.enable_grad():  # evaluation runs without gradients; the fit needs the code's
        for _ in range(options.steps):
            # Drawn on the device, never read back: no host synchronisation in the loop.
            chosen = pixels[torch.randint(len(pixels), (options.rays_per_step,), generator=generator,
                                          device=pixels.device)]
            rgb = render_pixels(render, rays, chosen, code, rays_per_pixel)
            loss = (rgb - target[chosen]).square().mean()
            (code.grad,) = torch.autograd.grad(loss, [code])
            optimizer.step()
    return code.detach()


def fit_left_render_right(render: RenderWithCode, rays: Rays, target: Tensor, mask: Tensor | None,
                          initial_code: Tensor, options: HalfFitOptions,
                          generator: torch.Generator, rays_per_pixel: int = 1) -> HalfFit | None:
    """NeRF-W's evaluation of one view: fit a code on its left half, render its right half with it.

    Args:
        render: the renderer with a code.
        rays: the view's ``H * W * rays_per_pixel`` rays in row-major pixel order, a pixel's rays in a row.
        target: ``[H, W, 3]`` the view's colours.
        mask: ``[H, W]`` bool, ``True`` for pixels that count (``None``: all); ignored left-half
            pixels are never fitted to.
        initial_code: ``[D]`` the code the fit starts from.
        options, generator, rays_per_pixel: as for :func:`fit_code`.

    Returns:
        The right half rendered with the fitted code; ``None`` when the left half has no kept pixel
        (nothing to fit to) or the image is one column wide (no right half to score).
    """
    height, width = target.shape[:2]
    start = right_half_start(width)
    if start >= width or len(rays) != height * width * rays_per_pixel:
        return None
    columns = torch.arange(width, device=target.device).expand(height, width)
    left = columns < start if mask is None else (columns < start) & mask
    pixels = left.reshape(-1).nonzero().squeeze(1)  # one host read per view, before the loop
    if len(pixels) == 0:
        return None
    code = fit_code(render, rays, target.reshape(-1, 3), pixels, initial_code, options, generator,
                    rays_per_pixel)
    right = (columns >= start).reshape(-1).nonzero().squeeze(1)
    chunk = max(options.chunk_rays // rays_per_pixel, 1)
    with torch.no_grad():
        parts = [render_pixels(render, rays, right[i:i + chunk], code, rays_per_pixel)
                 for i in range(0, len(right), chunk)]
    rgb = torch.cat(parts).clamp(0, 1).reshape(height, width - start, 3)
    return HalfFit(code=code, rgb=rgb, columns=start)
