"""What every format's loader shares: the downscale factor, image preparation and making cameras.

Intrinsics are those of the full-size images (pixels, OpenCV's continuous coordinates; see
:mod:`nerf_lightning.cameras.geometry`); a downscale by ``f`` divides them by ``f`` and the images become
``[H // f, W // f, 3]``, composited over the background first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.images import composite, quantize_to_uint8
from nerf_lightning.scenes.images import downscale as downscale_image

ROTATION_TOLERANCE = 1e-2
"""Largest accepted ``max |R^T R - I|`` of a pose's rotation part (scaled rotations are rejected)."""


def check_downscalable(width: int, height: int, factor: int, source: Path, index: int) -> tuple[int, int]:
    """An image ``width x height`` can be downscaled by ``factor`` (both sides at least ``factor``)."""
    if height < factor or width < factor:
        raise DatasetError(
            source,
            f"image is {width}x{height}, smaller than the downscale factor {factor}",
            frame=index,
            field="file_path",
        )
    return width, height


def prepare_image(
    image: Tensor, background: tuple[float, float, float], factor: int, source: Path, index: int
) -> Tensor:
    """Composite ``[H, W, C]`` over ``background`` then area-downscale by ``factor`` -> ``[H//f, W//f, 3]``.

    Compositing comes first: averaging straight-alpha colours would bleed hidden colours into edges.
    """
    height, width = image.shape[:2]
    check_downscalable(width, height, factor, source, index)
    return downscale_image(composite(image, background), factor)


def prepare_alpha(image: Tensor, factor: int) -> Tensor | None:
    """The alpha channel of ``[H, W, 4]`` area-downscaled by ``factor`` -> ``[H // f, W // f]`` (the
    share of each pixel the content covers); ``None`` for ``[H, W, 3]`` images."""
    if image.shape[-1] != 4:
        return None
    return downscale_image(image[..., 3:], factor)[..., 0]


def pack_alphas(alphas: list[Tensor | None], images: list[Tensor]) -> Tensor | None:
    """The split's alpha as ``[P]`` uint8 (255 opaque), pixels ordered as the packed images; frames
    without alpha (``None``) are opaque. ``None`` when no frame has alpha."""
    if all(alpha is None for alpha in alphas):
        return None
    filled = [torch.ones(image.shape[:2]) if alpha is None else alpha
              for alpha, image in zip(alphas, images, strict=True)]
    return torch.cat([quantize_to_uint8(alpha).reshape(-1) for alpha in filled])


def check_downscale(factor: int) -> None:
    """Downscale factors are integers >= 1 (a configuration error otherwise)."""
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"downscale must be an integer >= 1, got {factor!r}")


def make_cameras(
    poses: list[np.ndarray],
    intrinsics: list[tuple[float, float, float, float, int, int]],
    distortion: list[tuple[float, ...]],
    factor: int,
    lens: list[int] | None = None,
) -> Cameras:
    """float32 :class:`Cameras` from per-frame poses ``[3, 4]``, ``(fx, fy, cx, cy, w, h)``, distortion
    coefficients (4, 5 or 8 per frame, OpenCV's order ``k1, k2, p1, p2, k3, k4, k5, k6``; see
    :mod:`nerf_lightning.cameras.lens`) and lens models (``None``: all perspective) of the full-size
    images, scaled to images downscaled by ``factor``."""
    columns = list(zip(*intrinsics, strict=True))
    coefficients = (
        torch.tensor(distortion, dtype=torch.float32).reshape(len(poses), -1) if poses else torch.zeros(0, 8)
    )
    cameras = Cameras(
        camera_to_world=torch.tensor(np.stack(poses), dtype=torch.float32),
        fx=torch.tensor(columns[0], dtype=torch.float32),
        fy=torch.tensor(columns[1], dtype=torch.float32),
        cx=torch.tensor(columns[2], dtype=torch.float32),
        cy=torch.tensor(columns[3], dtype=torch.float32),
        width=torch.tensor(columns[4], dtype=torch.int64),
        height=torch.tensor(columns[5], dtype=torch.int64),
        distortion=coefficients,
        lens=None if lens is None else torch.tensor(lens, dtype=torch.int64).reshape(len(poses)),
    )
    return cameras if factor == 1 else cameras.scaled(factor)
