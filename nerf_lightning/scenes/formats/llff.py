"""Loader for LLFF forward-facing captures (``poses_bounds.npy`` plus ``images*/`` folders).

An LLFF capture (e.g. ``fern``) is a folder with::

    poses_bounds.npy     float array [N, 17], one row per image
    images/              full-resolution images (optional when a downsampled folder exists)
    images_4/, images_8/ the same images downsampled by 4, 8, ... (LLFF's ``minify``)

Row layout: the first 15 numbers are a 3x5 matrix (row-major). Its columns 0-2 are the
camera-to-world rotation in LLFF's ``[down, right, backwards]`` axis convention, column 3 the
camera position and column 4 ``[H, W, focal]`` of the *full-resolution* images (pixels). The last
two numbers are the ``near`` and ``far`` depth bounds of the scene content seen by that camera,
measured along its optical axis.

Conversion to this project's OpenGL camera-to-world (``+x`` right, ``+y`` up, camera looking along
``-z``): new columns ``[col1, -col0, col2, col3]``, i.e. right = col1, up = -col0, back = col2.

Images: with ``downscale == f > 1`` the folder ``images_{f}`` is used as stored if it exists,
otherwise the folder ``images_{g}`` with the largest ``g`` dividing ``f`` is area-downscaled by
``f / g``, otherwise ``images/`` by ``f``; with ``f == 1`` ``images/`` is used. The
images are the folder's ``.jpg``/``.jpeg``/``.png`` files (any case) sorted by name, matched to the
rows in order. Intrinsics of an image ``W_img`` pixels wide: ``fx = fy = focal * W_img / W``,
``cx = W_img / 2``, ``cy = H_img / 2``, no distortion (for ``images/`` + downscale, the intrinsics of
the full image divided by ``f``, as for the other loaders).

Normalisation, as in the LLFF / NeRF reference code, so that the scene scale does not depend on the
capture's units (all images of the capture take part, whatever the split):

1. scale: positions and bounds are multiplied by ``s = 1 / (0.75 * min(near))``, so the smallest
   near bound becomes ``1 / 0.75``;
2. recentre: the average pose (mean position; mean backward axis, normalised; mean up axis,
   orthonormalised against it) becomes the identity: every camera-to-world is left-multiplied by
   its inverse ``T``.

A point ``x`` of the capture's world thus maps to ``T[:, :3] @ (s * x) + T[:, 3]``; ``s`` and ``T``
are returned as :attr:`SceneSplit.world_scale` and :attr:`SceneSplit.world_transform`, and
:attr:`SceneSplit.depth_range` is ``(s * min(near), s * max(far))``.

Split rule (LLFF convention, on the images in name order): image ``i`` is ``test`` if ``i % 8 == 0``,
``val`` if ``i % 8 == 4``, ``train`` otherwise.

Every problem raises a one-line :class:`DatasetError` naming the file (``poses_bounds.npy`` or an
image folder), the frame (row / image index) and the field (``pose``, ``hwf``, ``bounds``,
``downscale``, ``file_path``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from nerf_lightning.cameras.geometry import average_pose
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.common import (
    ROTATION_TOLERANCE,
    ImageStream,
    PreparedImage,
    SplitImages,
    check_downscale,
    collect,
    in_order,
    make_cameras,
    prepare_image,
)
from nerf_lightning.scenes.images import image_size, load_image
from nerf_lightning.scenes.problems import Problems
from nerf_lightning.scenes.scene import SceneSplit

POSES_FILE = "poses_bounds.npy"
SPLITS = ("train", "val", "test")
SPLIT_PERIOD = 8
"""Image ``i`` (name order) is test if ``i % 8 == 0``, val if ``i % 8 == 4``, train otherwise."""
BOUND_FACTOR = 0.75
"""After rescaling the smallest near bound is ``1 / BOUND_FACTOR`` (LLFF's ``bd_factor``)."""
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
IMAGE_FOLDER = re.compile(r"images(?:_(\d+))?")
"""Names of a capture's image folders: ``images`` (full size) and ``images_<f>`` (downscaled by ``f``)."""
_ROW_LENGTH = 17


def split_of(index: int) -> str:
    """The split of image ``index`` (name order)."""
    remainder = index % SPLIT_PERIOD
    return "test" if remainder == 0 else "val" if remainder == SPLIT_PERIOD // 2 else "train"


def llff_to_opengl(matrices: np.ndarray) -> np.ndarray:
    """``[..., 3, 4]`` OpenGL camera-to-world from LLFF ``[..., 3, >=4]`` (columns down, right, back, t)."""
    return np.concatenate(
        [matrices[..., 1:2], -matrices[..., 0:1], matrices[..., 2:3], matrices[..., 3:4]], axis=-1
    )


def normalize_poses(poses: np.ndarray, near: float) -> tuple[np.ndarray, float, np.ndarray]:
    """Rescale (smallest near -> ``1 / BOUND_FACTOR``) then recentre ``[N, 3, 4]`` OpenGL poses.

    Returns:
        The new poses, the scale ``s`` and the ``[3, 4]`` rigid transform ``T`` applied after it.
    """
    scale = 1.0 / (near * BOUND_FACTOR)
    scaled = poses.copy()
    scaled[:, :, 3] *= scale
    avg = average_pose(torch.from_numpy(scaled)).numpy()  # float64 in, float64 out
    rotation = avg[:, :3].T
    transform = np.concatenate([rotation, -rotation @ avg[:, 3:4]], axis=1)
    out = np.concatenate(
        [rotation @ scaled[:, :, :3], (rotation @ scaled[:, :, 3:4]) + transform[:, 3:4]], axis=2
    )
    return out, scale, transform


# ----------------------------------------------------------------------------------------- poses file


def _field_of_column(column: int) -> str:
    if column >= 15:
        return "bounds"
    return "hwf" if column % 5 == 4 else "pose"


_EXPECTED_POSES = f"expected an LLFF {POSES_FILE}: a float array [N, 17] (3x5 pose-hwf matrix, near, far)"


def _read_poses_file(source: Path) -> np.ndarray:
    """``poses_bounds.npy`` as float64, checked to be one numeric array ``[N, 17]``, ``N >= 1``."""
    expected = _EXPECTED_POSES
    try:
        array = np.load(source, allow_pickle=False)
    except FileNotFoundError:
        raise DatasetError(source, f"file not found; {expected}") from None
    except (OSError, ValueError, EOFError) as exc:
        raise DatasetError(source, f"cannot be read ({exc}); {expected}") from None
    if not isinstance(array, np.ndarray):
        raise DatasetError(source, f"holds a {type(array).__name__}, not a single array; {expected}")
    if not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise DatasetError(source, f"has dtype {array.dtype}; {expected}")
    if array.ndim != 2 or array.shape[1] != _ROW_LENGTH or array.shape[0] == 0:
        raise DatasetError(source, f"has shape {list(array.shape)}; {expected}")
    return array.astype(np.float64)


def _check_finite_row(array: np.ndarray, row: int, source: Path) -> int:
    bad = np.flatnonzero(~np.isfinite(array[row]))
    if bad.size:
        column = int(bad[0])
        raise DatasetError(
            source,
            f"column {column} is {array[row, column]}; expected finite numbers",
            frame=row,
            field=_field_of_column(column),
        )
    return row


def _check_row(array: np.ndarray, row: int, source: Path) -> int:
    """Row ``row`` (all finite) has positive hwf, ``0 < near < far`` and a rotation."""
    height, width, focal = array[row, 4:15:5]
    if min(height, width, focal) <= 0:
        raise DatasetError(
            source,
            f"expected positive [H, W, focal] of the full-size images, got {[height, width, focal]}",
            frame=row,
            field="hwf",
        )
    near, far = array[row, 15:]
    if not 0 < near < far:
        raise DatasetError(
            source, f"expected 0 < near < far, got near={near:.6g}, far={far:.6g}",
            frame=row, field="bounds",
        )
    rotation = array[row, :15].reshape(3, 5)[:, :3]
    deviation = float(np.abs(rotation.T @ rotation - np.eye(3)).max())
    det = float(np.linalg.det(rotation))
    if deviation >= ROTATION_TOLERANCE or det <= 0:
        raise DatasetError(
            source,
            f"expected a rotation (orthonormal, det +1, max |R^T R - I| < {ROTATION_TOLERANCE}) in "
            f"columns 0-2 of the 3x5 matrix; max |R^T R - I| is {deviation:.3g}, det is {det:.4g}",
            frame=row,
            field="pose",
        )
    return row


def check_poses_bounds(source: Path, problems: Problems) -> tuple[np.ndarray, list[int]] | None:
    """The ``[N, 17]`` float64 array of ``poses_bounds.npy`` and the rows with no problem.

    Every row is checked for non-finite numbers first (the first bad column of a row is reported),
    then for hwf, bounds and rotation. ``None`` (collect mode only) when the file is unusable.
    """
    array = problems.check(_read_poses_file, source)
    if array is None:
        return None
    rows = range(array.shape[0])
    finite = [row for row in rows if problems.check(_check_finite_row, array, row, source) is not None]
    good = [row for row in finite if problems.check(_check_row, array, row, source) is not None]
    return array, good


def read_poses_bounds(source: Path) -> np.ndarray:
    """The checked ``[N, 17]`` float64 array of ``poses_bounds.npy`` (the first problem raises)."""
    checked = check_poses_bounds(source, Problems())
    assert checked is not None  # strict: problems raise
    return checked[0]


# ---------------------------------------------------------------------------------------- image folder


def _downscaled_folders(root: Path) -> dict[int, Path]:
    folders: dict[int, Path] = {}
    if root.is_dir():
        for child in root.iterdir():
            match = IMAGE_FOLDER.fullmatch(child.name)
            if match and match.group(1) and child.is_dir() and int(match.group(1)) >= 1:
                folders[int(match.group(1))] = child
    return dict(sorted(folders.items()))


def choose_image_folder(root: Path, factor: int) -> tuple[Path, int]:
    """The folder to read and the factor still to apply to its images (1 for ``images_{factor}``)."""
    full = root / "images"
    available = _downscaled_folders(root)
    if factor > 1 and factor in available:
        return available[factor], 1
    finer = [f for f in available if factor % f == 0 and f < factor]
    if finer:  # e.g. images_8/ area-downscaled by 2 for downscale 16: fewer pixels to read than images/
        return available[max(finer)], factor // max(finer)
    if full.is_dir():
        return full, factor
    names = ", ".join(f"{p.name}/" for p in available.values())
    if factor == 1 and len(available) == 1:
        (only,) = available
        raise DatasetError(
            full,
            f"folder not found, but {available[only].name}/ holds images downscaled by {only}; "
            f"expected downscale {only} (--data.downscale {only} for fit and the commands that train or "
            f"load a run, --downscale {only} for data validate and data cache)",
            field="downscale",
        )
    if available:
        raise DatasetError(
            full,
            f"folder not found and there is no images_{factor}/ for downscale {factor}; "
            f"expected downscale to be one of {sorted(available)} ({names})",
            field="downscale",
        )
    wanted = "images/" if factor == 1 else f"images_{factor}/ or images/"
    raise DatasetError(root / (f"images_{factor}" if factor > 1 else "images"),
                       f"folder not found; expected the capture's images in {wanted}", field="downscale")


def list_images(folder: Path) -> list[Path]:
    """The image files of ``folder`` sorted by name."""
    return sorted(
        (p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()),
        key=lambda p: p.name,
    )


def _images_for_poses(folder: Path, count: int) -> list[Path]:
    """The images of ``folder``, checked to be one per pose (``count`` poses)."""
    files = list_images(folder)
    if len(files) != count:
        raise DatasetError(
            folder,
            f"holds {len(files)} image(s) (jpg/jpeg/png) but {POSES_FILE} has {count} pose(s); "
            "expected one image per pose, matched in name order",
            field="file_path",
        )
    return files


# ------------------------------------------------------------------------------------------ the checks


@dataclass
class LlffScan:
    """What an LLFF capture holds, checked except for decoding images.

    Attributes:
        root, source: the capture folder and its ``poses_bounds.npy``.
        array: the ``[N, 17]`` poses and bounds.
        good: rows with no problem (all rows in strict mode).
        folder, remaining: the image folder read and the downscale factor still to apply.
        files: the ``N`` images, name order, matched to the rows.
    """

    root: Path
    source: Path
    array: np.ndarray
    good: list[int]
    folder: Path
    remaining: int
    files: list[Path]


def scan_llff(root: Path, downscale: int, problems: Problems) -> LlffScan | None:
    """The checks of ``poses_bounds.npy`` and the image folder; ``None`` (collect mode only) when the
    capture cannot be used at all."""
    source = root / POSES_FILE
    checked = check_poses_bounds(source, problems)
    chosen = problems.check(choose_image_folder, root, downscale)
    if checked is None or chosen is None:
        return None
    array, good = checked
    folder, remaining = chosen
    files = problems.check(_images_for_poses, folder, len(array))
    if files is None:
        return None
    return LlffScan(root, source, array, good, folder, remaining, files)


def split_images(scan: LlffScan, split: str) -> list[int]:
    """Image indices of ``split`` (rows with a problem left out)."""
    count = len(scan.files)
    selected = [i for i in range(count) if split_of(i) == split]
    if not selected:
        raise DatasetError(
            scan.source,
            f"split '{split}' has no images ({count} images; image i is test if "
            f"i % {SPLIT_PERIOD} == 0, val if i % {SPLIT_PERIOD} == {SPLIT_PERIOD // 2}); "
            "expected at least one",
        )
    good = set(scan.good)
    return [i for i in selected if i in good]


def check_image_aspect(scan: LlffScan, index: int, width: int, height: int) -> tuple[int, int]:
    """The decoded image ``index`` has the aspect ratio of its row's full-size ``W x H``."""
    full_h, full_w, _ = scan.array[index, 4:15:5]
    expected_h = width * full_h / full_w
    if abs(height - expected_h) > max(1.0, 0.01 * expected_h):
        raise DatasetError(
            scan.source,
            f"image '{scan.files[index].relative_to(scan.root).as_posix()}' is {width}x{height} pixels; "
            f"expected the aspect ratio of W x H = {full_w:g}x{full_h:g}",
            frame=index,
            field="hwf",
        )
    return width, height


# ------------------------------------------------------------------------------------------ the loader


def load_llff(
    root: Path, split: str, *, background: tuple[float, float, float] = (1.0, 1.0, 1.0), downscale: int = 1
) -> SceneSplit:
    """Load one split of an LLFF capture; see the module docstring for conventions.

    Args:
        root: the capture folder (with ``poses_bounds.npy``).
        split: ``train``, ``val`` or ``test``.
        background: colour RGBA images are composited over.
        downscale: integer factor; ``images_{f}/`` is used when present, else ``images/`` downscaled.

    Raises:
        DatasetError: anything wrong with ``poses_bounds.npy``, the image folder or an image.
        ValueError: an unknown split name or a bad downscale factor.
    """
    return collect(stream_llff(root, split, background=background, downscale=downscale))


def stream_llff(
    root: Path, split: str, *, background: tuple[float, float, float] = (1.0, 1.0, 1.0), downscale: int = 1,
    skip: int = 0, workers: int = 1,
) -> ImageStream:
    """:func:`load_llff` one image at a time (:class:`~nerf_lightning.scenes.formats.common.ImageStream`);
    ``poses_bounds.npy`` and the image folder are checked before this returns, the images as they are
    prepared (by ``workers`` threads, :func:`~nerf_lightning.scenes.formats.common.in_order`). The first
    ``skip`` images are not prepared (their sizes are read from their headers)."""
    check_downscale(downscale)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    root = Path(root)
    scan = scan_llff(root, downscale, Problems())
    assert scan is not None  # strict: problems raise
    selected = split_images(scan, split)
    return ImageStream(len(selected), _llff_images(scan, selected, background, skip, workers))


def _llff_frame(scan: LlffScan, index: int, background: tuple[float, float, float]
                ) -> tuple[tuple[int, int], PreparedImage]:
    """Image ``index``'s decoded ``(width, height)`` (checked) and the image prepared."""
    image = load_image(scan.files[index], file_for_errors=str(scan.source), frame=index)
    height, width = image.shape[:2]
    check_image_aspect(scan, index, width, height)
    prepared = prepare_image(image, background, scan.remaining, scan.source, index)
    return (width, height), PreparedImage(prepared)


def _llff_images(scan: LlffScan, selected: list[int], background: tuple[float, float, float],
                 skip: int, workers: int) -> SplitImages:
    root, source, array, files, remaining = scan.root, scan.source, scan.array, scan.files, scan.remaining
    matrices = array[:, :15].reshape(-1, 3, 5)
    hwf = matrices[:, :, 4]  # [N, 3]: H, W, focal of the full-size images
    bounds = array[:, 15:]
    poses, scale, transform = normalize_poses(llff_to_opengl(matrices[:, :, :4]), float(bounds[:, 0].min()))
    intrinsics: list[tuple[float, float, float, float, int, int]] = []
    prepared = in_order((partial(_llff_frame, scan, index, background) for index in selected[skip:]), workers)
    for position, index in enumerate(selected):
        image = None
        if position < skip:  # prepared before: its decoded size is its header's
            width, height = image_size(files[index], file_for_errors=str(source), frame=index)
            check_image_aspect(scan, index, width, height)
        else:
            (width, height), image = next(prepared)
        _, full_w, focal = hwf[index]
        f = focal * width / full_w
        intrinsics.append((f, f, 0.5 * width, 0.5 * height, width, height))
        if image is not None:
            yield image
            del image
    cameras = make_cameras(
        [poses[i] for i in selected], intrinsics, [(0.0, 0.0, 0.0, 0.0)] * len(selected), remaining
    )
    return SceneSplit(
        cameras=cameras,
        images=[],
        names=[files[i].relative_to(root).as_posix() for i in selected],
        source=str(source),
        depth_range=(float(bounds[:, 0].min() * scale), float(bounds[:, 1].max() * scale)),
        world_scale=scale,
        world_transform=torch.tensor(transform, dtype=torch.float32),
    )
