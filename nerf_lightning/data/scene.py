"""A loaded split of a scene: cameras plus decoded, background-composited images."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import torch
from torch import Tensor

from nerf_lightning.data.cameras import Cameras
from nerf_lightning.data.images import quantize_to_uint8


class PackedImages(Sequence[Tensor]):
    """``N`` RGB images stored as one uint8 pixel array, read as float32 ``[H_i, W_i, 3]`` in ``[0, 1]``.

    The pixels of all images, image after image and row-major within an image, form ``pixels``
    ``[P, 3]`` uint8 (``P = sum(H_i * W_i)``); image ``i`` is ``pixels[offsets[i]:offsets[i + 1]]``.
    ``pixels`` may be a memory map of the image cache (nothing is read until it is used).

    Indexing returns a *new* float32 tensor ``q / 255`` each time (``q`` the stored uint8 values), so
    the values do not depend on where the pixels came from; :meth:`uint8` gives the stored values
    without conversion. It is a read-only :class:`~collections.abc.Sequence`, not a list: use
    ``list(images)`` where a list is needed (``torch.stack`` takes lists and tuples only).

    Args:
        pixels: ``[P, 3]`` uint8.
        shapes: ``(H_i, W_i)`` of each image.
    """

    def __init__(self, pixels: Tensor, shapes: Iterable[tuple[int, int]]) -> None:
        self.shapes: tuple[tuple[int, int], ...] = tuple((int(h), int(w)) for h, w in shapes)
        if pixels.dtype != torch.uint8 or pixels.ndim != 2 or pixels.shape[1] != 3:
            raise ValueError(f"expected pixels [P, 3] uint8, got {tuple(pixels.shape)} {pixels.dtype}")
        sizes = torch.tensor([h * w for h, w in self.shapes], dtype=torch.int64)
        self.offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])  # [N + 1]
        if int(self.offsets[-1]) != pixels.shape[0]:
            raise ValueError(
                f"the image shapes hold {int(self.offsets[-1])} pixels but pixels has {pixels.shape[0]}"
            )
        self.pixels = pixels
        self._starts = self.offsets.tolist()

    @classmethod
    def from_images(cls, images: Iterable[Tensor]) -> PackedImages:
        """Pack float ``[H, W, 3]`` images in ``[0, 1]``, quantised by :func:`quantize_to_uint8`."""
        quantized = [quantize_to_uint8(image) for image in images]
        for image in quantized:
            if image.ndim != 3 or image.shape[2] != 3:
                raise ValueError(f"expected images [H, W, 3], got {tuple(image.shape)}")
        pixels = (
            torch.cat([q.reshape(-1, 3) for q in quantized])
            if quantized
            else torch.zeros(0, 3, dtype=torch.uint8)
        )
        return cls(pixels, [(q.shape[0], q.shape[1]) for q in quantized])

    def __len__(self) -> int:
        return len(self.shapes)

    def uint8(self, index: int) -> Tensor:
        """The stored ``[H, W, 3]`` uint8 values of image ``index`` (a view, no copy)."""
        index = range(len(self))[index]  # bounds check, negative indices
        height, width = self.shapes[index]
        return self.pixels[self._starts[index] : self._starts[index + 1]].view(height, width, 3)

    @overload
    def __getitem__(self, index: int) -> Tensor: ...

    @overload
    def __getitem__(self, index: slice) -> list[Tensor]: ...

    def __getitem__(self, index: int | slice) -> Tensor | list[Tensor]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        return self.uint8(index).to(torch.float32) / 255.0

    def __iter__(self) -> Iterator[Tensor]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"PackedImages({len(self)} images, {self.pixels.shape[0]} pixels)"


@dataclass
class SceneSplit:
    """Images of one split (``train``, ``val`` or ``test``) and their cameras.

    Attributes:
        cameras: ``N`` cameras, already scaled to the stored image size.
        images: ``N`` tensors ``[H_i, W_i, 3]`` float32 in ``[0, 1]``, alpha already composited
            over the background; ``H_i, W_i`` equal ``cameras.height[i], cameras.width[i]``. Loaders
            return a list; :func:`~nerf_lightning.data.loading.load_split` returns
            :class:`PackedImages` (values quantised to multiples of ``1 / 255``, uint8 pixels
            available without conversion).
        names: ``N`` image paths relative to the dataset root (for messages and reports).
        source: the file the split was read from (for messages).
        depth_range: ``(near, far)`` depths along the optical axis, in world units, between which
            all content lies (forward-facing captures such as LLFF); ``None`` when unknown.
        world_scale, world_transform: how the loader normalised the capture's world: a point ``x``
            of the capture maps to ``world_transform[:, :3] @ (world_scale * x) + world_transform[:, 3]``
            (``world_transform`` ``[3, 4]``; ``None`` means the identity).
    """

    cameras: Cameras
    images: Sequence[Tensor]
    names: list[str]
    source: str
    depth_range: tuple[float, float] | None = None
    world_scale: float = 1.0
    world_transform: Tensor | None = None

    def __len__(self) -> int:
        return len(self.images)
