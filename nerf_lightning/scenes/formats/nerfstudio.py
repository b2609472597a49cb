"""Loader for nerfstudio and instant-ngp captures (one ``transforms.json`` for all splits).

Cameras (intrinsics, ``camera_model`` and its distortion: OPENCV, FULL_OPENCV, OPENCV_FISHEYE, ...)
and instant-ngp's ``scale`` / ``offset`` / ``aabb_scale`` are read by
:mod:`nerf_lightning.scenes.formats.nerfstudio_cameras` (its docstring lists the keys); the poses stay in
the file's coordinates and the instant-ngp placement is returned as ``SceneSplit.ngp``.

``transform_matrix`` is an OpenGL camera-to-world matrix, as in nerfstudio and instant-ngp.

``mask_path`` (per frame, optional; nerfstudio's convention) names a single-channel image the size of
the frame's image, 0 where pixels are to be ignored: they are never training targets and do not count
in the metrics (``SceneSplit.masks``). A mask that is missing, unreadable or of another size is a
problem naming the frame and ``mask_path``. Masks are downscaled with their images (a downscaled pixel
is kept only when all its source pixels are).

Frames whose image file is missing are skipped with one warning. Split rule, applied to the frames
that exist on disk: if the file has ``train_filenames`` / ``val_filenames`` / ``test_filenames``, the
split is the frames named in ``{split}_filenames``. Otherwise the frames are sorted by ``file_path``
and frame ``i`` of that order goes to ``test`` if ``i % 8 == 0``, to ``val`` if ``i % 8 == 4`` and to
``train`` otherwise. Frames of a split are returned sorted by ``file_path``.

Downscaled copies: with ``downscale f > 1`` a frame's image is read from ``images_<f>/<its file name>``
next to ``transforms.json`` when that file exists at exactly ``w // f x h // f`` pixels (nerfstudio's
layout, which ``data process`` writes), else the full-size image is area-downscaled as always. A copy
saves decoding the full image; it is trusted to show the same image (the dataset fingerprint covers it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.common import (
    ImageStream,
    PreparedImage,
    SplitImages,
    check_downscale,
    collect,
    in_order,
    make_cameras,
    prepare_alpha,
    prepare_image,
)
from nerf_lightning.scenes.formats.nerfstudio_cameras import (
    Intrinsics,
    Lens,
    intrinsics,
    lookup,
    ngp_placement,
)
from nerf_lightning.scenes.formats.transforms_json import (
    ImageRef,
    camera_to_world,
    downscaled_copy,
    frame_objects,
    read_transforms,
    resolve_image,
)
from nerf_lightning.scenes.images import decoded_size, downscale_mask, image_size, load_image, load_mask
from nerf_lightning.scenes.problems import Problems
from nerf_lightning.scenes.scene import NgpPlacement, SceneSplit

SPLITS = ("train", "val", "test")
SPLIT_PERIOD = 8
"""Without explicit lists, frame ``i`` (sorted by file_path) is test if ``i % 8 == 0``, val if ``== 4``."""
_MAX_NAMES_IN_WARNING = 10

def _normalize(name: str) -> str:
    return Path(os.path.normpath(name)).as_posix()


def _select_split(
    meta: dict[str, Any], split: str, source: Path, refs: dict[int, ImageRef], order: list[int]
) -> list[int]:
    """Indices (into ``frames``) of the split, in ``order``; ``order`` lists the existing frames sorted."""
    listed = [f"{s}_filenames" for s in SPLITS if f"{s}_filenames" in meta]
    if not listed:
        return [index for position, index in enumerate(order) if _rule(position) == split]
    key = f"{split}_filenames"
    if key not in meta:
        raise DatasetError(
            source, f"missing; the file has {', '.join(listed)}, so it must list every split", field=key
        )
    value = meta[key]
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise DatasetError(source, f"expected a list of image paths, got {value!r:.80}", field=key)
    wanted = {_normalize(name) for name in value}
    unknown = sorted(wanted - {ref.name for ref in refs.values()})
    if unknown:
        raise DatasetError(
            source,
            f"names {len(unknown)} image(s) no frame has ({_preview(unknown)}); expected file_path values",
            field=key,
        )
    return [index for index in order if refs[index].name in wanted]


def _rule(position: int) -> str:
    remainder = position % SPLIT_PERIOD
    return "test" if remainder == 0 else "val" if remainder == SPLIT_PERIOD // 2 else "train"


def _preview(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_NAMES_IN_WARNING])
    return shown + (", ..." if len(names) > _MAX_NAMES_IN_WARNING else "")


@dataclass
class NerfstudioScan:
    """What ``transforms.json`` says, checked (every split; no image decoded).

    Attributes:
        source: the JSON file.
        meta: its top-level object.
        refs: frame index -> image of every frame whose ``file_path`` is usable.
        poses, cameras: frame index -> camera-to-world ``[3, 4]`` / ``(intrinsics, lens)`` of
            every frame with no problem (in collect mode frames with a problem are left out).
        order: the frames whose image exists, sorted by image name (the split rule's order).
        masks: frame index -> mask image of the frames with a ``mask_path`` (existing files only).
        ngp: instant-ngp's placement (``None`` without ``scale``, ``offset``, ``aabb_scale``).
    """

    source: Path
    meta: dict[str, Any]
    refs: dict[int, ImageRef]
    poses: dict[int, np.ndarray]
    cameras: dict[int, tuple[Intrinsics, Lens]]
    order: list[int]
    masks: dict[int, ImageRef]
    ngp: NgpPlacement | None = None


def _mask_ref(root: Path, frame: dict[str, Any], source: Path, index: int) -> ImageRef | None:
    """The frame's ``mask_path`` resolved (``None`` without one); a mask file that does not exist is an
    error (a frame whose mask is lost must not be trained on with its ignored pixels as targets)."""
    if frame.get("mask_path") is None:
        return None
    ref = resolve_image(root, frame, source, index, try_png=False, field="mask_path")
    if not ref.exists:
        raise DatasetError(
            source,
            f"mask '{ref.name}' does not exist; "
            "expected a single-channel image the size of the frame's image",
            frame=index,
            field="mask_path",
        )
    return ref


def scan_nerfstudio(root: Path, problems: Problems) -> NerfstudioScan | None:
    """The JSON checks of a nerfstudio capture (everything but the splits and decoding images).

    Frames whose image is missing are reported through :meth:`Problems.warn`. ``None`` (collect mode
    only) when the file, its ``frames`` or all its images cannot be used.
    """
    source = root / "transforms.json"
    meta = problems.check(
        read_transforms, source, "a nerfstudio / instant-ngp transforms.json with intrinsics and 'frames'"
    )
    if meta is None:
        return None
    frames = frame_objects(meta, source, problems)
    if not frames:
        return None
    poses = {i: problems.check(camera_to_world, frame, source, i) for i, frame in frames.items()}
    checked_refs = {
        i: problems.check(resolve_image, root, frame, source, i, try_png=False) for i, frame in frames.items()
    }
    refs = {i: ref for i, ref in checked_refs.items() if ref is not None}
    ngp = problems.check(ngp_placement, meta, source)

    existing = [i for i, ref in refs.items() if ref.exists]
    missing = [i for i, ref in refs.items() if not ref.exists]
    if missing and (existing or not problems.collect):  # with no image at all, the error below says it
        names = [refs[i].name for i in missing]
        problems.warn(
            [
                DatasetError(source, f"image '{refs[i].name}' does not exist; the frame is skipped",
                             frame=i, field="file_path")
                for i in missing
            ],
            f"{source}: skipping {len(missing)} frame(s) whose image file is missing: {_preview(names)}",
            stacklevel=3,
        )
    if not existing:
        if refs:
            problems.report(DatasetError(
                source,
                f"none of the {len(frames)} image files exist; expected images inside {root}",
                field="frames",
            ))
        return None

    first = existing[0]
    first_size: list[tuple[int, int]] = []

    def fallback_size() -> tuple[int, int]:
        if not first_size:
            first_size.append(image_size(refs[first].path, file_for_errors=str(source), frame=first))
        return first_size[0]

    cameras = {
        i: problems.check(intrinsics, meta, frame, i, source, fallback_size) for i, frame in frames.items()
    }
    with_mask = [i for i in existing if frames[i].get("mask_path") is not None]
    masks = {i: problems.check(_mask_ref, root, frames[i], source, i) for i in with_mask}
    good = [
        i for i in existing
        if poses[i] is not None and cameras[i] is not None and (i not in masks or masks[i] is not None)
    ]
    return NerfstudioScan(
        source=source,
        meta=meta,
        refs=refs,
        poses={i: poses[i] for i in good},
        cameras={i: cameras[i] for i in good},
        order=sorted(existing, key=lambda i: refs[i].name),
        masks={i: ref for i, ref in masks.items() if ref is not None},
        ngp=ngp,
    )


def split_frames(scan: NerfstudioScan, split: str) -> list[int]:
    """Frame indices of ``split``, sorted by image name (frames with a problem left out)."""
    meta, source = scan.meta, scan.source
    selected = _select_split(meta, split, source, scan.refs, scan.order)
    if not selected:
        key = f"{split}_filenames"
        why = (
            f"'{key}' selects none of them" if key in meta else f"the rule (i % {SPLIT_PERIOD}) selects none"
        )
        raise DatasetError(
            source,
            f"split '{split}' has no frames ({len(scan.order)} frames exist on disk, {why}); "
            "expected at least one",
            field=key if key in meta else "frames",
        )
    return [i for i in selected if i in scan.cameras]


def check_image_size(scan: NerfstudioScan, index: int, width: int, height: int) -> tuple[int, int]:
    """The decoded image of frame ``index`` has the frame's ``w x h``."""
    (_, _, _, _, expected_w, expected_h), _ = scan.cameras[index]
    if width != expected_w or height != expected_h:
        frame = scan.meta["frames"][index]
        declared = all(lookup(scan.meta, frame, index, key)[0] is not None for key in ("w", "h"))
        first = next(ref.name for ref in scan.refs.values() if ref.exists)
        # Without w, h the expected size is the first image's: say so, or the message names a missing field.
        origin = "" if declared else f" (w or h not given: the size of the first image, '{first}')"
        raise DatasetError(
            scan.source,
            f"image '{scan.refs[index].name}' is {width}x{height} pixels; "
            f"expected w x h = {expected_w}x{expected_h}{origin}",
            frame=index,
            field="w" if width != expected_w else "h",
        )
    return width, height


def check_mask_size(scan: NerfstudioScan, index: int, width: int, height: int) -> tuple[int, int]:
    """The mask of frame ``index`` (if any) is ``width x height`` pixels, its image's size."""
    ref = scan.masks.get(index)
    if ref is None:
        return width, height
    size = decoded_size(ref.path, file_for_errors=str(scan.source), frame=index, field="mask_path")
    return _same_size(scan, index, size, (width, height))


def _same_size(
    scan: NerfstudioScan, index: int, mask_size: tuple[int, int], image_size: tuple[int, int]
) -> tuple[int, int]:
    if mask_size != image_size:
        raise DatasetError(
            scan.source,
            f"mask '{scan.masks[index].name}' is {mask_size[0]}x{mask_size[1]} pixels; expected the size of "
            f"image '{scan.refs[index].name}', {image_size[0]}x{image_size[1]}",
            frame=index,
            field="mask_path",
        )
    return mask_size


def _load_mask(scan: NerfstudioScan, index: int, image_size: tuple[int, int], downscale: int) -> Tensor:
    """``[H // f * W // f]`` bool mask of frame ``index``, all ``True`` when the frame has none."""
    width, height = image_size
    ref = scan.masks.get(index)
    if ref is None:
        return torch.ones(height // downscale * (width // downscale), dtype=torch.bool)
    mask = load_mask(ref.path, file_for_errors=str(scan.source), frame=index)
    _same_size(scan, index, (mask.shape[1], mask.shape[0]), image_size)
    return downscale_mask(mask, downscale).reshape(-1)


def _frame_image(scan: NerfstudioScan, index: int, background: tuple[float, float, float],
                 factor: int) -> tuple[Tensor, Tensor | None]:
    """Frame ``index``'s image composited and downscaled by ``factor``, and its alpha (``None`` without
    one): from its downscaled copy when there is one of the right size (module docstring), else from
    the full-size image."""
    source = scan.source
    if factor > 1:
        (_, _, _, _, width, height), _ = scan.cameras[index]
        copy = downscaled_copy(source.parent, scan.refs[index].path, factor)
        if copy.is_file():
            image = load_image(copy, file_for_errors=str(source), frame=index)
            if (image.shape[1], image.shape[0]) == (width // factor, height // factor):
                return prepare_image(image, background, 1, source, index), prepare_alpha(image, 1)
    image = load_image(scan.refs[index].path, file_for_errors=str(source), frame=index)
    check_image_size(scan, index, image.shape[1], image.shape[0])
    return prepare_image(image, background, factor, source, index), prepare_alpha(image, factor)


def load_nerfstudio(
    root: Path, split: str, *, background: tuple[float, float, float] = (1.0, 1.0, 1.0), downscale: int = 1
) -> SceneSplit:
    """Load one split of ``root/transforms.json`` (nerfstudio / instant-ngp); see the module docstring.

    Args:
        root: the capture folder.
        split: ``train``, ``val`` or ``test``.
        background: colour RGBA images are composited over.
        downscale: integer factor; images become ``[H // f, W // f, 3]``, intrinsics are divided by ``f``.

    Raises:
        DatasetError: anything wrong with the JSON file or an image of the split (one-line message).
        ValueError: an unknown split name or a bad downscale factor.
    """
    return collect(stream_nerfstudio(root, split, background=background, downscale=downscale))


def stream_nerfstudio(
    root: Path, split: str, *, background: tuple[float, float, float] = (1.0, 1.0, 1.0), downscale: int = 1,
    skip: int = 0, workers: int = 1,
) -> ImageStream:
    """:func:`load_nerfstudio` one image at a time
    (:class:`~nerf_lightning.scenes.formats.common.ImageStream`); the JSON file and the split are checked
    before this returns, the images (and masks) as they are prepared (by ``workers`` threads,
    :func:`~nerf_lightning.scenes.formats.common.in_order`), but for the first ``skip``."""
    check_downscale(downscale)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    scan = scan_nerfstudio(Path(root), Problems())
    assert scan is not None  # strict: problems raise
    selected = split_frames(scan, split)
    return ImageStream(len(selected), _nerfstudio_images(scan, selected, background, downscale, skip,
                                                         workers))


def _nerfstudio_frame(scan: NerfstudioScan, index: int, background: tuple[float, float, float],
                      downscale: int, with_masks: bool) -> PreparedImage:
    image, alpha = _frame_image(scan, index, background, downscale)
    mask = None
    if with_masks:
        (_, _, _, _, width, height), _ = scan.cameras[index]
        mask = _load_mask(scan, index, (width, height), downscale)
    return PreparedImage(image, alpha, mask)


def _nerfstudio_images(scan: NerfstudioScan, selected: list[int], background: tuple[float, float, float],
                       downscale: int, skip: int, workers: int) -> SplitImages:
    with_masks = any(index in scan.masks for index in selected)
    yield from in_order((partial(_nerfstudio_frame, scan, index, background, downscale, with_masks)
                         for index in selected[skip:]), workers)
    selected_poses: list[np.ndarray] = [scan.poses[i] for i in selected]
    return SceneSplit(
        cameras=make_cameras(
            selected_poses,
            [scan.cameras[i][0] for i in selected],
            [scan.cameras[i][1][1] for i in selected],
            downscale,
            lens=[scan.cameras[i][1][0] for i in selected],
        ),
        images=[],
        names=[scan.refs[i].name for i in selected],
        source=str(scan.source),
        ngp=scan.ngp,
    )
