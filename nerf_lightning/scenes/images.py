"""Decoding, alpha compositing and downscaling of dataset images.

Images are tensors ``[H, W, C]`` float32 in ``[0, 1]`` with ``C = 3`` (RGB) or ``C = 4`` (RGBA with
straight, i.e. not premultiplied, alpha). Decoding is Pillow's: 8-bit images are divided by 255,
16-bit grayscale PNGs by 65535. Pillow reduces 16-bit RGB(A) PNGs to 8 bits per channel while decoding.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch import Tensor

from nerf_lightning.scenes.errors import DatasetError

_EXPECTED = "expected a readable PNG or JPEG image"
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)
T = TypeVar("T")


def _error(
    path: Path, problem: str, file_for_errors: str, frame: int | str, field: str = "file_path"
) -> DatasetError:
    what = "mask" if field == "mask_path" else "image"
    return DatasetError(file_for_errors, f"{what} '{path}' {problem}; {_EXPECTED}", frame=frame, field=field)


def image_size(path: Path, *, file_for_errors: str, frame: int | str) -> tuple[int, int]:
    """``(width, height)`` of an image file, read from its header only (no decoding)."""
    try:
        with Image.open(path) as img:
            return img.size
    except FileNotFoundError:
        raise _error(path, "does not exist", file_for_errors, frame) from None
    except _DECODE_ERRORS as exc:
        raise _error(path, f"cannot be read ({exc})", file_for_errors, frame) from None


def _to_array(img: Image.Image) -> np.ndarray:
    """``[H, W, 3 or 4]`` float32 array in ``[0, 1]`` of a decoded Pillow image of any mode."""
    mode = img.mode
    if mode.startswith("I;16") or mode == "I":  # 16-bit grayscale (PNG); "I" is how older Pillow named it
        gray = np.asarray(img).astype(np.float32) / 65535.0
        return np.repeat(gray[:, :, None], 3, axis=2)
    if mode == "F":
        gray = np.clip(np.asarray(img, dtype=np.float32), 0.0, 1.0)
        return np.repeat(gray[:, :, None], 3, axis=2)
    has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode == "P" and "transparency" in img.info)
    img = img.convert("RGBA" if has_alpha else "RGB")
    return np.asarray(img, dtype=np.uint8).astype(np.float32) / 255.0


def _decode(
    path: Path,
    file_for_errors: str,
    frame: int | str,
    convert: Callable[[Image.Image], T],
    field: str = "file_path",
) -> T:
    """``convert`` applied to the fully decoded image; every failure is a :class:`DatasetError`."""
    if path.is_dir():
        raise _error(path, "is a directory", file_for_errors, frame, field)
    try:
        with Image.open(path) as img:
            img.load()
            return convert(img)
    except FileNotFoundError:
        raise _error(path, "does not exist", file_for_errors, frame, field) from None
    except _DECODE_ERRORS as exc:
        raise _error(path, f"cannot be decoded ({exc})", file_for_errors, frame, field) from None


def load_image(path: Path, *, file_for_errors: str, frame: int | str) -> Tensor:
    """Decode an image file into ``[H, W, C]`` float32 in ``[0, 1]``, ``C`` = 3 or 4.

    Grayscale becomes RGB; palette images and grayscale+alpha become RGB or RGBA.

    Args:
        path: the image file.
        file_for_errors: the dataset file that refers to the image (named in errors).
        frame: the frame that refers to the image (named in errors).

    Raises:
        DatasetError: the file is missing, truncated or not an image (field ``file_path``).
    """
    array = _decode(path, file_for_errors, frame, _to_array)
    return torch.from_numpy(np.ascontiguousarray(array))


def decoded_size(
    path: Path, *, file_for_errors: str, frame: int | str, field: str = "file_path"
) -> tuple[int, int]:
    """``(width, height)`` of an image file after decoding all of it, as :func:`load_image` does.

    Fails exactly when :func:`load_image` (``field="mask_path"``: :func:`load_mask`) fails, with the same
    message, but keeps no pixels and converts nothing: the check of ``nerf-lightning data validate``.
    """
    return _decode(path, file_for_errors, frame, lambda img: img.size, field)


def _mask_array(img: Image.Image) -> np.ndarray:
    """``[H, W]`` bool, ``True`` where any colour channel is non-zero (alpha is ignored)."""
    if img.mode in ("1", "L", "I", "F") or img.mode.startswith("I;16"):
        array = np.asarray(img)
        return array.reshape(array.shape[0], array.shape[1]) != 0
    return np.asarray(img.convert("RGB")).any(axis=2)


def load_mask(path: Path, *, file_for_errors: str, frame: int | str) -> Tensor:
    """Decode a mask image into ``[H, W]`` bool: ``True`` (keep) where it is non-zero.

    nerfstudio's convention is a single-channel image with 0 = ignore; colour masks are accepted, a
    pixel counting as kept when any colour channel is non-zero.

    Raises:
        DatasetError: the file is missing, truncated or not an image (field ``mask_path``).
    """
    array = _decode(path, file_for_errors, frame, _mask_array, "mask_path")
    return torch.from_numpy(np.ascontiguousarray(array))


def downscale_mask(mask: Tensor, factor: int) -> Tensor:
    """``[H, W]`` bool -> ``[H // factor, W // factor]``: a pixel is kept only when all its ``factor x
    factor`` source pixels are (an averaged colour with any ignored source pixel in it is not a target).

    Cropped on the right and bottom as :func:`downscale` crops images.
    """
    if factor == 1:
        return mask
    height, width = mask.shape[0] // factor * factor, mask.shape[1] // factor * factor
    blocks = mask[:height, :width].reshape(height // factor, factor, width // factor, factor)
    return blocks.all(dim=3).all(dim=1)


def composite(image: Tensor, background: tuple[float, float, float]) -> Tensor:
    """Straight alpha ``[H, W, 4]`` over a constant ``background`` colour -> ``[H, W, 3]``.

    ``[H, W, 3]`` images are returned unchanged. Alpha 1 keeps the colour exactly and alpha 0 gives
    the background exactly.
    """
    if image.shape[-1] == 3:
        return image
    if image.shape[-1] != 4:
        raise ValueError(f"expected an image [H, W, 3] or [H, W, 4], got {tuple(image.shape)}")
    if len(background) != 3:
        raise ValueError(f"expected an RGB background colour, got {background!r}")
    alpha = image[..., 3:]
    bg = torch.tensor(background, dtype=image.dtype, device=image.device)
    return image[..., :3] * alpha + bg * (1.0 - alpha)


def downscale(image: Tensor, factor: int) -> Tensor:
    """Area-average ``[H, W, C]`` into ``[H // factor, W // factor, C]``.

    The image is first cropped on the right and bottom to a multiple of ``factor``, which keeps
    pixel coordinates (and so the principal point, divided by ``factor``) where they were.
    """
    if not isinstance(factor, int) or factor < 1:
        raise ValueError(f"downscale factor must be an integer >= 1, got {factor!r}")
    if factor == 1:
        return image
    height, width = image.shape[0] // factor * factor, image.shape[1] // factor * factor
    if height == 0 or width == 0:
        raise ValueError(f"image {tuple(image.shape[:2])} is smaller than the downscale factor {factor}")
    cropped = image[:height, :width].permute(2, 0, 1)[None]  # [1, C, H, W]
    pooled = F.avg_pool2d(cropped, kernel_size=factor, stride=factor)
    return pooled[0].permute(1, 2, 0).contiguous()


def quantize_to_uint8(image: Tensor) -> Tensor:
    """``[..., C]`` float in ``[0, 1]`` -> uint8 ``round(255 * image)`` (values outside are clamped).

    :func:`~nerf_lightning.scenes.loading.load_split` stores every prepared image this way, so images
    read from the image cache and images decoded afresh are bitwise identical (``q / 255``).
    """
    return (image * 255.0).round().clamp(0, 255).to(torch.uint8)
