"""Entry point for loading a split of a dataset folder in any supported format.

Formats are registered in :data:`LOADERS` (name -> loader) and, for ``"auto"``, in
:data:`DETECTION_MARKERS` (name -> file whose presence in the folder identifies the format; checked in
order). A new format adds one entry to each, and to :data:`STREAMS` when it can give its images one at
a time (the image cache then builds its entries in bounded memory; without one it loads the whole
split first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.blender import load_blender, stream_blender
from nerf_lightning.scenes.formats.common import ImageStream
from nerf_lightning.scenes.formats.llff import load_llff, stream_llff
from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio, stream_nerfstudio
from nerf_lightning.scenes.scene import PackedImages, SceneSplit


class Loader(Protocol):
    def __call__(
        self, root: Path, split: str, *, background: tuple[float, float, float] = ..., downscale: int = ...
    ) -> SceneSplit: ...


LOADERS: dict[str, Loader] = {
    "blender": load_blender,
    "nerfstudio": load_nerfstudio,
    "llff": load_llff,
}
"""Format name -> loader."""


class StreamingLoader(Protocol):
    def __call__(
        self, root: Path, split: str, *, background: tuple[float, float, float] = ..., downscale: int = ...,
        skip: int = ..., workers: int = ...,
    ) -> ImageStream: ...


STREAMS: dict[str, StreamingLoader] = {
    "blender": stream_blender,
    "nerfstudio": stream_nerfstudio,
    "llff": stream_llff,
}
"""Format name -> the same loader giving one image at a time (its loader collects it); ``skip`` leaves out
the first images (prepared by an earlier build that was interrupted), checking only their headers, and
``workers`` threads prepare the images (the same values whatever their number)."""

DETECTION_MARKERS: dict[str, str] = {
    "blender": "transforms_train.json",
    "nerfstudio": "transforms.json",
    "llff": "poses_bounds.npy",
}
"""Format name -> marker file, in detection order (the first format whose marker exists wins)."""


def detect_format(root: str | Path) -> str:
    """The format of a dataset folder, from the marker files in :data:`DETECTION_MARKERS`.

    Raises:
        DatasetError: the folder does not exist or holds none of the marker files.
    """
    root = Path(root)
    expected = ", ".join(f"{marker} ({name})" for name, marker in DETECTION_MARKERS.items())
    if not root.is_dir():
        raise DatasetError(root, f"not a folder; expected a dataset folder containing one of: {expected}")
    for name, marker in DETECTION_MARKERS.items():
        if (root / marker).is_file():
            return name
    raise DatasetError(root, f"unknown dataset format; expected the folder to contain one of: {expected}")


def load_split(
    root: str | Path,
    split: str,
    *,
    dataset_format: str = "auto",
    background: tuple[float, float, float] = (1.0, 1.0, 1.0),
    downscale: int = 1,
) -> SceneSplit:
    """Load ``split`` of the dataset in ``root``.

    Args:
        root: the dataset folder.
        split: ``train``, ``val`` or ``test``.
        dataset_format: a key of :data:`LOADERS`, or ``"auto"`` to use :func:`detect_format`.
        background: colour RGBA images are composited over.
        downscale: integer factor; images become ``[H // f, W // f, 3]``.

    Returns:
        The loader's split with its images quantised to uint8 and packed (:class:`PackedImages`):
        each value is ``round(255 * v) / 255`` of the loader's ``v``, exactly what the image cache
        (:func:`nerf_lightning.scenes.cache.cached_load_split`) stores and gives back.

    Raises:
        DatasetError: the folder or its files cannot be used (one-line message).
        ValueError: an unknown ``dataset_format``.
    """
    root = Path(root)
    if dataset_format == "auto":
        dataset_format = detect_format(root)
    if dataset_format not in LOADERS:
        known = ", ".join(["auto", *LOADERS])
        raise ValueError(f"unknown dataset_format {dataset_format!r}; expected one of: {known}")
    scene = LOADERS[dataset_format](root, split, background=background, downscale=downscale)
    if not isinstance(scene.images, PackedImages):
        scene.images = PackedImages.from_images(scene.images)
    return scene
