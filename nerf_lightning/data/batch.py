"""What the data module hands to the training system: rays with their target colours."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from nerf_lightning.core.types import Rays


@dataclass(frozen=True)
class RayBatch:
    """Rays and the colours of the pixels they go through.

    A batch of ``P`` pixels has ``R = P * K`` rays, ``K = rays_per_pixel``: the ``K`` rays of pixel ``p``
    are rays ``p * K`` to ``p * K + K - 1``, and the pixel's colour is their mean colour
    (:meth:`pixel_means`; ``NerfDataModule.supersample``). With ``K = 1`` (the default) rays and pixels
    are the same.

    Attributes:
        rays: ``R`` rays (random pixels in training, every pixel of one image in evaluation).
        rgb: ``[P, 3]`` target colours in ``[0, 1]``, composited over ``background``.
        background: ``[3]`` background colour the targets were composited over, or ``[R, 3]`` one
            per ray (training batches with random backgrounds: the same for a pixel's rays).
        sampler_seed: seed for the sampler's random numbers of this batch (derived from the
            run seed, the rank and the batch position, so runs are reproducible).
        update_seed: seed for the sampler's ``update`` before this batch (training batches):
            derived from the run seed and the batch position only, so under data parallelism
            every rank updates sampler state with the same random numbers.
        image_index: index of the image in its split (whole-image batches), else ``-1``.
        image_size: ``(height, width)`` of the image (whole-image batches), else ``None``.
        pixel_indices: ``[P]`` global index of each training pixel (training batches),
            else ``None``; lets per-ray errors be reported back to the pixel selection.
        camera_indices: ``[R]`` int64 index of each ray's training image (training batches),
            else ``None``: what per-image parameters (appearance embeddings, camera corrections)
            are looked up by. Evaluation images are not training images, so they have none; a
            training photo scored as it was fitted (``image_batch(..., as_fitted=True)``) has its own.
        mask: ``[P]`` bool, ``True`` for pixels that count in the metrics (whole-image batches of a
            split with masks, ``SceneSplit.masks``), else ``None``. Training batches never hold a
            masked pixel, so they have none.
    """

    rays: Rays
    rgb: Tensor
    background: Tensor
    sampler_seed: int
    update_seed: int = 0
    image_index: int = -1
    image_size: tuple[int, int] | None = None
    pixel_indices: Tensor | None = None
    camera_indices: Tensor | None = None
    mask: Tensor | None = None
    rays_per_pixel: int = 1

    def __post_init__(self) -> None:
        if self.rays_per_pixel < 1 or len(self.rays) != self.rgb.shape[0] * self.rays_per_pixel:
            raise ValueError(f"a batch of {self.rgb.shape[0]} pixels at {self.rays_per_pixel} rays per pixel "
                             f"needs {self.rgb.shape[0] * self.rays_per_pixel} rays, got {len(self.rays)}")

    def __len__(self) -> int:
        """The number of rays ``R``."""
        return len(self.rays)

    def pixel_means(self, values: Tensor) -> Tensor:
        """``[N // K, ...]`` the mean of each pixel's ``K`` rays of ``[N, ...]`` per-ray values (the
        leading ``N`` of the batch's rays, whole pixels only: a batch cut short keeps its whole pixels)."""
        k = self.rays_per_pixel
        if k == 1:
            return values
        pixels = values.shape[0] // k
        return values[: pixels * k].unflatten(0, (pixels, k)).mean(dim=1)
