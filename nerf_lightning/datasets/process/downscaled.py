"""``DST/images_2``, ``images_4``, ``images_8``: the dataset's images downscaled, as nerfstudio lays them out.

Training on a phone capture at full size is rarely wanted (``configs/nerfstudio.yaml`` trains at
``--data.downscale 4``), and decoding a 12-megapixel photo to average it down costs more than the
training step that uses it. The nerfstudio loader reads ``ROOT/images_<f>/<name of the frame's
file>`` for ``--data.downscale f`` when that copy exists at the expected size (nerfstudio's own
convention, :func:`nerf_lightning.scenes.formats.transforms_json.downscaled_copy`).

The filter is an area average over ``f x f`` blocks after cropping the right and bottom to a multiple
of ``f``: exactly what the loaders do without a copy (:func:`nerf_lightning.scenes.images.downscale`), so
a dataset trains the same with or without its copies, up to rounding to 8 bits. Area averaging is also
the right filter for integer factors (no ringing, unlike Lanczos, and no aliasing).

Every photo was decoded before structure-from-motion (:mod:`.photos`); one that no longer decodes here
(changed during the run) is an :class:`~.photos.UnreadablePhotoError` naming it, as up front.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PIL import Image

from nerf_lightning.datasets.process.photos import (
    DECODE_ERRORS,
    EXPECTED,
    UnreadablePhotoError,
    decode_problem,
)
from nerf_lightning.files import atomic_path

FACTORS = (2, 4, 8)
JPEG_QUALITY = 95


def _opened(source: Path) -> Image.Image:
    """``Image.open(source)``; :class:`~.photos.UnreadablePhotoError` when it is no image."""
    try:
        return Image.open(source)
    except DECODE_ERRORS as error:
        raise UnreadablePhotoError(source, f"{decode_problem(error)}; {EXPECTED}") from None


def downscale_file(source: Path, target: Path, factor: int) -> tuple[int, int]:
    """Write ``source`` area-downscaled by ``factor`` to ``target`` (same format); its ``(w, h)``.

    Raises:
        UnreadablePhotoError: ``source`` does not decode.
    """
    with _opened(source) as image:
        try:
            image.load()
        except DECODE_ERRORS as error:
            raise UnreadablePhotoError(source, f"{decode_problem(error)}; {EXPECTED}") from None
        width, height = image.width // factor, image.height // factor
        if width < 1 or height < 1:
            raise ValueError(f"{source} ({image.width}x{image.height}) is smaller than the factor {factor}")
        small = image.crop((0, 0, width * factor, height * factor)).reduce(factor)
        options = {"quality": JPEG_QUALITY} if target.suffix.lower() in (".jpg", ".jpeg") else {}
        with atomic_path(target, fsync=False) as partial:  # no half-written image; full disk: DiskFullError
            small.save(partial, **options)
    return width, height


def write_downscaled(root: Path, images: Path, names: list[str], factors: tuple[int, ...] = FACTORS,
                     on_image: Callable[[], None] = lambda: None) -> list[Path]:
    """``root/images_<f>/<name>`` for every image ``names`` of folder ``images`` and factor ``f``
    (each folder replaced); the folders written. Factors larger than the images are left out."""
    folders = []
    with _opened(images / names[0]) as first:
        smallest = min(first.size)
    for factor in factors:
        if smallest < factor:
            continue
        folder = root / f"images_{factor}"
        if folder.exists():
            for stale in folder.iterdir():
                stale.unlink()
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            downscale_file(images / name, folder / name, factor)
            on_image()
        folders.append(folder)
    return folders
