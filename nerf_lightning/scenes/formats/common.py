"""What every format's loader shares: the downscale factor, image preparation, making cameras and
streaming a split's images one at a time.

Intrinsics are those of the full-size images (pixels, OpenCV's continuous coordinates; see
:mod:`nerf_lightning.cameras.geometry`); a downscale by ``f`` divides them by ``f`` and the images become
``[H // f, W // f, 3]``, composited over the background first.

Each loader is written once, as a stream (:class:`ImageStream`): it checks the split's files, then
prepares its images one after the other and, after the last, gives the split without them. The
loader of :data:`~nerf_lightning.scenes.loading.LOADERS` collects a stream into a list
(:func:`collect`); the image cache writes one image at a time to its entry instead, so that memory does
not grow with the number of images (:mod:`nerf_lightning.scenes.cache_build`). Both see the very same
images in the same order, so their results are bitwise equal.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.images import composite, quantize_to_uint8
from nerf_lightning.scenes.images import downscale as downscale_image
from nerf_lightning.scenes.scene import SceneSplit

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


# --------------------------------------------------------------------------------------------- streams


@dataclass
class PreparedImage:
    """One frame's image as a loader prepared it.

    Attributes:
        rgb: ``[H, W, 3]`` float32 in ``[0, 1]``, composited over the background and downscaled.
        alpha: ``[H, W]`` float32 opacity (:func:`prepare_alpha`); ``None`` for images without alpha.
        mask: ``[H * W]`` bool, ``True`` for pixels that count; ``None`` when the split has no masks
            (in a split with masks every frame has one, all ``True`` for frames without a mask file).
    """

    rgb: Tensor
    alpha: Tensor | None = None
    mask: Tensor | None = None


T = TypeVar("T")

SplitImages = Generator[PreparedImage, None, SceneSplit]
"""A split's prepared images, frame after frame; its return value is the split without its images
(``images`` empty, ``masks`` and ``alphas`` ``None``), known only once every image was prepared."""


@dataclass
class ImageStream:
    """A split whose files were checked, its images still to be prepared.

    Attributes:
        count: the number of images :attr:`images` yields.
        images: the generator preparing them (:data:`SplitImages`); it raises
            :class:`~nerf_lightning.scenes.errors.DatasetError` for an image that cannot be used.
    """

    count: int
    images: SplitImages


def collect(stream: ImageStream) -> SceneSplit:
    """The split of ``stream`` with every image in memory: float images as a list, the masks
    concatenated, the alphas packed (:func:`pack_alphas`)."""
    images: list[Tensor] = []
    alphas: list[Tensor | None] = []
    masks: list[Tensor] = []
    generator = stream.images
    while True:
        try:
            prepared = next(generator)
        except StopIteration as done:
            split: SceneSplit = done.value
            break
        images.append(prepared.rgb)
        alphas.append(prepared.alpha)
        if prepared.mask is not None:
            masks.append(prepared.mask)
    split.images = images
    split.masks = torch.cat(masks) if masks else None
    split.alphas = pack_alphas(alphas, images)
    return split


def in_order(jobs: Iterable[Callable[[], T]], workers: int = 1) -> Iterator[T]:
    """The results of ``jobs``, in their order, computed by up to ``workers`` threads at a time.

    Besides the result last given, at most ``workers`` jobs run or wait with theirs (the next job starts
    as a result is given, so the threads keep working while the caller uses it): the memory held is that
    of ``workers + 1`` results, however many jobs there are. A job that raises raises here, in its turn (the
    jobs before it are given first). Decoding and resampling release Python's lock, so threads prepare
    images side by side; the results are the same values whatever ``workers`` is (each job is computed
    the same way, alone). ``workers <= 1``: each job runs when its result is asked for, in this thread.
    """
    if workers <= 1:
        for job in jobs:
            yield job()
        return
    remaining = iter(jobs)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prepare-images") as pool:
        running: deque[Future[T]] = deque(pool.submit(job) for _, job in zip(range(workers), remaining,
                                                                              strict=False))
        try:
            while running:
                result = running.popleft().result()
                following = next(remaining, None)
                if following is not None:
                    running.append(pool.submit(following))
                yield result
        finally:
            for future in running:
                future.cancel()
