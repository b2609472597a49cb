"""``data.target_pixels``: a capture's image downscale chosen from a pixel budget per image, before loading.

Why a budget instead of a fixed factor: a recipe's ray batch, grid resolution and per-image codes are
tuned to some number of pixels per view, and a fixed ``downscale: 4`` gives a 1080x1920 phone photo
130k pixels but a 605x806 one 30k (:func:`~nerf_lightning.scenes.normalise.downscale_for_pixels`).

The rule: the training images' size (the one with the median pixel count, when they differ) is read
without decoding any pixels, and the factor whose image (``width // f x height // f``) is nearest the
budget in ratio is taken, never upsampling. Per format:

* Blender: the sizes in the headers of ``transforms_train.json``'s images;
* nerfstudio / instant-ngp: the training frames' ``w x h`` (as the loader reads them, headers where
  the file gives none); any factor, as the loader area-downscales (or reads an ``images_<f>/`` copy);
* LLFF: the full-size ``H x W`` of ``poses_bounds.npy``, and only the factors of the ``images_<f>/``
  folders that exist (plus 1 when ``images/`` does): reading ``images/`` to downscale it by a factor
  without a folder decodes every full-size photo, which is what those folders spare. With no
  ``images_<f>/`` folder at all, any factor (the loader downscales ``images/``).
"""

from __future__ import annotations

from pathlib import Path

from nerf_lightning.scenes.formats.blender import scan_blender
from nerf_lightning.scenes.formats.llff import IMAGE_FOLDER, POSES_FILE, read_poses_bounds
from nerf_lightning.scenes.formats.nerfstudio import scan_nerfstudio, split_frames
from nerf_lightning.scenes.images import image_size
from nerf_lightning.scenes.loading import detect_format
from nerf_lightning.scenes.normalise import downscale_for_pixels
from nerf_lightning.scenes.problems import Problems

Size = tuple[int, int]
"""``(width, height)`` in pixels."""


def _median_size(sizes: list[Size]) -> Size:
    """The size with the median pixel count (the lower middle one for an even count)."""
    ordered = sorted(sizes, key=lambda size: (size[0] * size[1], size))
    return ordered[(len(ordered) - 1) // 2]


def llff_downscale_folders(root: Path) -> list[int]:
    """The factors ``f`` of the ``images_<f>/`` folders of an LLFF capture, ascending (``1`` for
    ``images/``)."""
    factors = set()
    if root.is_dir():
        for child in root.iterdir():
            match = IMAGE_FOLDER.fullmatch(child.name)
            if match is not None and child.is_dir():
                factor = int(match.group(1)) if match.group(1) else 1
                if factor >= 1:
                    factors.add(factor)
    return sorted(factors)


def training_image_size(root: Path, dataset_format: str) -> Size:
    """The full-size ``(width, height)`` of the training images (see the module docstring).

    Raises:
        DatasetError: the dataset's files cannot be read (as the loader would report them).
    """
    if dataset_format == "blender":
        scan = scan_blender(root, "train", Problems())
        assert scan is not None  # strict: problems raise
        return _median_size([image_size(frame.ref.path, file_for_errors=str(scan.source), frame=frame.index)
                             for frame in scan.frames])
    if dataset_format == "nerfstudio":
        found = scan_nerfstudio(root, Problems())
        assert found is not None
        sizes = []
        for index in split_frames(found, "train"):
            (_, _, _, _, width, height), _ = found.cameras[index]
            sizes.append((int(width), int(height)))
        return _median_size(sizes)
    if dataset_format == "llff":
        array = read_poses_bounds(root / POSES_FILE)
        hwf = array[:, :15].reshape(-1, 3, 5)[:, :, 4]  # [N, 3]: H, W, focal of the full-size images
        return _median_size([(round(w), round(h)) for h, w, _ in hwf.tolist()])
    raise ValueError(f"unknown dataset_format {dataset_format!r}; expected blender, nerfstudio or llff")


def downscale_for_capture(root: str | Path, dataset_format: str, target_pixels: int) -> int:
    """The downscale factor of the capture in ``root`` for about ``target_pixels`` pixels per image.

    Args:
        root: the dataset folder.
        dataset_format: ``auto`` (detected) or a loader's name.
        target_pixels: the budget per image, positive.

    Raises:
        ValueError: ``target_pixels`` is not positive (naming it).
        DatasetError: the dataset's files cannot be read.
    """
    if target_pixels < 1:
        raise ValueError(f"target_pixels must be a positive number of pixels per image, got {target_pixels}")
    root = Path(root)
    if dataset_format == "auto":
        dataset_format = detect_format(root)
    width, height = training_image_size(root, dataset_format)
    factors = None
    if dataset_format == "llff":
        folders = llff_downscale_folders(root)
        factors = folders if any(f > 1 for f in folders) else None
    return downscale_for_pixels(width, height, target_pixels, factors)
