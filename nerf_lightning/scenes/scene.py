"""A loaded split of a scene: cameras plus decoded, background-composited images (and masks)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.core.types import SceneBox
from nerf_lightning.scenes.images import quantize_to_uint8


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


@dataclass(frozen=True)
class NgpPlacement:
    """How instant-ngp places a capture in its unit cube, from ``transforms.json``'s ``scale``,
    ``offset`` and ``aabb_scale``.

    instant-ngp maps a position ``x`` of the file's world to ``scale * x + offset`` (then cycles the
    axes, which does not matter here) and reconstructs the cube ``[0, 1]^3`` of that space enlarged
    ``aabb_scale`` times about its centre. Our loader keeps the poses in the file's coordinates: a
    uniform scale and a shift change nothing that is rendered (the scene box comes from the cameras
    and moves with them, ray distances are relative to it), and keeping them leaves
    ``--data.scene_box``, camera paths and exports in the coordinates of the file, which nerfstudio
    (ignoring these keys) uses too. What the keys do change in instant-ngp, *which region* is
    reconstructed, is kept here in the file's coordinates: :meth:`unit_cube` and :meth:`box`.

    Attributes:
        scale: instant-ngp's ``scale`` (its default 0.33 when absent).
        offset: ``[3]`` instant-ngp's ``offset`` (0.5 each when absent).
        aabb_scale: how many times the unit cube's size the content reaches (instant-ngp's
            ``aabb_scale``, 1 to 128 there; large for unbounded captures); ``None`` when absent.
    """

    DEFAULT_SCALE = 0.33
    DEFAULT_OFFSET = 0.5

    scale: float
    offset: tuple[float, float, float]
    aabb_scale: float | None = None

    def unit_cube(self) -> SceneBox:
        """The region instant-ngp maps to ``[0, 1]^3``, in the file's world coordinates."""
        offset = torch.tensor(self.offset, dtype=torch.float64)
        lower, upper = (0.0 - offset) / self.scale, (1.0 - offset) / self.scale
        return SceneBox(lower.float(), upper.float())

    def box(self) -> SceneBox:
        """instant-ngp's reconstruction box: :meth:`unit_cube` enlarged ``aabb_scale`` times about its
        centre (the unit cube itself without ``aabb_scale``)."""
        cube = self.unit_cube()
        center, half = 0.5 * (cube.lower + cube.upper), 0.5 * (cube.upper - cube.lower)
        factor = self.aabb_scale if self.aabb_scale is not None else 1.0
        return SceneBox(center - factor * half, center + factor * half)

    def as_dict(self) -> dict[str, float | list[float] | None]:
        return {"scale": self.scale, "offset": list(self.offset), "aabb_scale": self.aabb_scale}

    @staticmethod
    def from_dict(values: dict) -> NgpPlacement:
        offset = [float(v) for v in values["offset"]]
        aabb = values["aabb_scale"]
        return NgpPlacement(float(values["scale"]), (offset[0], offset[1], offset[2]),
                            None if aabb is None else float(aabb))


@dataclass
class SceneSplit:
    """Images of one split (``train``, ``val`` or ``test``) and their cameras.

    Attributes:
        cameras: ``N`` cameras, already scaled to the stored image size.
        images: ``N`` tensors ``[H_i, W_i, 3]`` float32 in ``[0, 1]``, alpha already composited
            over the background; ``H_i, W_i`` equal ``cameras.height[i], cameras.width[i]``. Loaders
            return a list; :func:`~nerf_lightning.scenes.loading.load_split` returns
            :class:`PackedImages` (values quantised to multiples of ``1 / 255``, uint8 pixels
            available without conversion).
        names: ``N`` image paths relative to the dataset root (for messages and reports).
        source: the file the split was read from (for messages).
        depth_range: ``(near, far)`` depths along the optical axis, in world units, between which
            all content lies (forward-facing captures such as LLFF); ``None`` when unknown.
        world_scale, world_transform: how the capture's world was normalised, by its loader and then by
            the data module's ``normalise`` (composed into one): a point ``x`` of the capture maps to
            ``world_transform[:, :3] @ (world_scale * x) + world_transform[:, 3]`` (``world_transform``
            ``[3, 4]``; ``None`` means the identity).
        masks: ``[P]`` bool over the split's pixels, ordered as :class:`PackedImages` (image after
            image, row-major): ``True`` for pixels that count, ``False`` for pixels to ignore in
            training and metrics (nerfstudio's ``mask_path``, 0 = ignore; downscaled so that a pixel
            is kept only when all its source pixels are). ``None`` when no frame has a mask.
        ngp: instant-ngp's placement of the capture (``scale``, ``offset``, ``aabb_scale``), ``None``
            when the file gives none of them; :attr:`aabb_scale` is a shortcut.
        alphas: ``[P]`` uint8 opacity of each pixel (255: opaque), ordered as :class:`PackedImages`,
            for splits whose images have an alpha channel (``None`` otherwise; frames without one
            count as opaque). The images are composited already; alpha lets training composite
            them over other backgrounds too (``NerfDataModule(random_background=True)``).
    """

    cameras: Cameras
    images: Sequence[Tensor]
    names: list[str]
    source: str
    depth_range: tuple[float, float] | None = None
    world_scale: float = 1.0
    world_transform: Tensor | None = None
    masks: Tensor | None = None
    ngp: NgpPlacement | None = None
    alphas: Tensor | None = None

    def __len__(self) -> int:
        return len(self.images)

    @property
    def aabb_scale(self) -> float | None:
        """instant-ngp's ``aabb_scale`` (the content's extent in unit-cube sizes), ``None`` if not given.

        A hint for unbounded scenes: :meth:`NgpPlacement.box` is that extent in world coordinates.
        """
        return self.ngp.aabb_scale if self.ngp is not None else None

    def mask(self, index: int) -> Tensor | None:
        """``[H_i, W_i]`` bool mask of image ``index`` (a view of :attr:`masks`), ``None`` without masks."""
        if self.masks is None:
            return None
        if isinstance(self.images, PackedImages):  # shapes without converting any image
            shapes = list(self.images.shapes)
        else:
            shapes = [(int(image.shape[0]), int(image.shape[1])) for image in self.images]
        start = sum(h * w for h, w in shapes[:index])
        height, width = shapes[index]
        return self.masks[start : start + height * width].view(height, width)
