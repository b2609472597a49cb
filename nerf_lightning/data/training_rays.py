"""A training batch of rays as a pure function of its key: which pixels, their colours, their rays.

The data module (:class:`~nerf_lightning.data.datamodule.NerfDataModule`) decides *when* a batch is made
(on the training thread, or ahead of time on the prefetch thread: :mod:`nerf_lightning.data.prefetch`);
this module decides *what* it is. :func:`draw_training_batch` reads only its arguments: the pixel store
and error map it is given (which the caller does not change while a draw may run), the key (position,
size, device, seed, rank, number of ranks, version) and settings fixed for a fit. Its one generator is
seeded from the key and nothing global is drawn, so a batch is the same bit for bit on whichever thread
and at whichever time it is made, and after a resume.

How the pixels are chosen, in order of precedence: in proportion to a map of recent error
(``pixel_selection="error"``, :class:`~nerf_lightning.data.error_map.PixelErrorMap`); uniformly among
the pixels of a rotating window of images (``images_per_window``,
:class:`~nerf_lightning.data.image_windows.ImageWindows`); uniformly among the pixels a mask keeps
(:class:`~nerf_lightning.data.masked_pixels.KeptPixels`); uniformly among all training pixels. Masked
pixels are never training targets: a draw that may hit one (by error, in a window) is replaced by a
kept pixel.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras, subpixel_offsets
from nerf_lightning.core.types import Rays
from nerf_lightning.data.backgrounds import over_random_backgrounds
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.data.error_map import PixelErrorMap
from nerf_lightning.data.image_windows import ImageWindows
from nerf_lightning.data.masked_pixels import KeptPixels
from nerf_lightning.data.seeding import derive_seed
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.scene import SceneSplit

TRAIN_STREAM, SAMPLER_STREAM, UPDATE_STREAM = 1, 2, 3
"""The streams of :func:`~nerf_lightning.data.seeding.derive_seed` for a batch's pixels, its sampler and
its sampler update."""

MakeRays = Callable[[Cameras, Tensor, Tensor, Tensor, Tensor | None], Rays]
"""``(cameras, camera [R], cols [R], rows [R], offsets [R, 2] or None) -> Rays``: the training split's
rays through points of pixels, or their centres (its box, near, far and lens fixed for a fit)."""


class PixelStore:
    """All training pixels, flattened image after image, as uint8 on one device.

    On the CPU the pixels (and alphas) are the split's own tensors, not copies: with the image cache on,
    a memory map of its entry whose pages are read as batches touch them, so the training set takes no
    memory of the process's own however large it is. On an accelerator they are copied to its memory.

    Args:
        split: the training split.
        device: where batches are drawn.
        with_alpha: keep the alphas (training composites over random backgrounds).
        windows: draw from a rotating window of images (``images_per_window``), or ``None``.
    """

    def __init__(self, split: SceneSplit, device: torch.device, with_alpha: bool,
                 windows: ImageWindows | None = None) -> None:
        self.pixels = split.images.pixels.to(device)  # [P, 3] uint8 (no copy on the CPU, see above)
        # [P] uint8, on the device only when training composites over random backgrounds
        self.alphas = split.alphas.to(device) if with_alpha and split.alphas is not None else None
        self.offsets = split.images.offsets.to(device)  # [N + 1]
        self.cameras = split.cameras.to(device)
        self.num_pixels = int(split.images.offsets[-1])
        self.device = device
        if split.masks is not None and not bool(split.masks.any()):
            raise DatasetError(split.source, "the masks of the training images leave no pixel to train on",
                               field="mask_path")
        self.kept = KeptPixels(split.masks, device) if split.masks is not None else None
        self.windows = windows


@dataclass(frozen=True)
class BatchKey:
    """Everything a training batch depends on besides settings fixed for a fit: a prefetched batch is
    served only for an equal key (:mod:`nerf_lightning.data.prefetch`)."""

    position: int
    """The fit loop's global batch position (the rays' seed)."""
    rays_per_batch: int
    device: torch.device
    seed: int
    rank: int
    world: int
    """The number of ranks (with ``rank``, which window of images the batch draws from)."""
    version: int
    """Bumped whenever state a batch reads changes: the pixel store, the error map, a loaded state."""


def rays_per_side_at(position: int, supersample: int, supersample_from: int) -> int:
    """Rays along a pixel's side in the training batch at ``position``: ``supersample`` from position
    ``supersample_from`` on, one ray through the pixel's centre before."""
    return supersample if position >= supersample_from else 1


def draw_training_batch(store: PixelStore, error_map: PixelErrorMap | None, key: BatchKey, *,
                        window_steps: int, make_rays: MakeRays, background: Sequence[float],
                        supersample: int = 1, supersample_from: int = 0) -> RayBatch:
    """The ``key.rays_per_batch`` training rays of ``key``: ``P = rays_per_batch // supersample ** 2``
    pixels (at least one), each through ``K = supersample ** 2`` random points of its pixel, one in each
    cell of a ``supersample x supersample`` grid (``supersample`` 1: the pixel's centre). Batches before
    position ``supersample_from`` take one ray through each pixel's centre.

    Args:
        store: the training pixels on ``key.device``.
        error_map: draw by recent error (``pixel_selection="error"``), or ``None``.
        key: the batch's position, size, device, seed, rank, number of ranks.
        window_steps: steps each window of images lasts (with ``store.windows``): step ``s`` of rank
            ``r`` of ``W`` draws from window ``(s // window_steps) * W + r``.
        make_rays: the training split's rays through pixels.
        background: the RGB colour transparent pixels are composited over (unless random).
        supersample: rays per pixel along each axis.
        supersample_from: the first batch position with ``supersample`` (earlier: one ray per pixel).

    Returns:
        A :class:`RayBatch` of ``P * K`` rays, with ``rgb [P, 3]``, ``pixel_indices [P]`` (global),
        ``camera_indices [P * K]`` and ``rays_per_pixel = K``.
    """
    per_pixel = rays_per_side_at(key.position, supersample, supersample_from) ** 2
    device, count = key.device, max(key.rays_per_batch // per_pixel, 1)
    generator = torch.Generator(device=device)
    generator.manual_seed(derive_seed(key.seed, key.rank, key.position, TRAIN_STREAM))
    if error_map is not None:
        pixel = error_map.sample(count, generator)  # [R]
        if store.kept is not None:
            pixel = store.kept.replace_masked(pixel, generator)
    elif store.windows is not None:
        window = (key.position // window_steps) * key.world + key.rank
        pixel = store.windows.sample(count, window, generator)
        if store.kept is not None:  # a masked draw is replaced by a kept pixel of any image
            pixel = store.kept.replace_masked(pixel, generator)
    elif store.kept is not None:
        pixel = store.kept.sample(count, generator)
    else:
        pixel = torch.randint(0, store.num_pixels, (count,), device=device, generator=generator)
    camera = torch.searchsorted(store.offsets, pixel, right=True) - 1  # [R]
    local = pixel - store.offsets[camera]
    width = store.cameras.width[camera]
    cols, rows = local % width, local // width
    rgb = store.pixels[pixel].float() / 255.0  # [P, 3]
    colour = torch.tensor(tuple(background), dtype=torch.float32, device=device)  # [3]
    if store.alphas is not None:
        rgb, colour = over_random_backgrounds(rgb, store.alphas[pixel], colour, generator)
    if per_pixel == 1:
        rays = make_rays(store.cameras, camera, cols, rows, None)
    else:  # [P * K]: each pixel's K rays in a row, drawn after the pixels (supersample 1 draws the same)
        offsets = subpixel_offsets(supersample, count, device, generator)  # [P * K, 2]
        camera, cols, rows = (t.repeat_interleave(per_pixel) for t in (camera, cols, rows))
        rays = make_rays(store.cameras, camera, cols, rows, offsets)
        if colour.dim() == 2:
            colour = colour.repeat_interleave(per_pixel, dim=0)
    return RayBatch(rays=rays, rgb=rgb, background=colour,
                    sampler_seed=derive_seed(key.seed, key.rank, key.position, SAMPLER_STREAM),
                    update_seed=derive_seed(key.seed, key.position, UPDATE_STREAM),
                    pixel_indices=pixel, camera_indices=camera, rays_per_pixel=per_pixel)
