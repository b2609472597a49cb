"""Loader for nerfstudio and instant-ngp captures (one ``transforms.json`` for all splits).

Intrinsics are given at the top level and may be overridden per frame by the same keys:

* ``fl_x``, ``fl_y`` focal lengths in pixels (``fl_y`` defaults to ``fl_x``); without ``fl_x``,
  ``camera_angle_x`` (radians) gives ``fl_x = 0.5 * w / tan(camera_angle_x / 2)``. A frame's own
  ``fl_x`` or ``camera_angle_x`` wins over the top-level ones.
* ``cx``, ``cy`` principal point in pixels (default ``w / 2``, ``h / 2``).
* ``w``, ``h`` image size; when absent they are read from the first existing image (file order) and
  every image must then have that size.
* ``k1``, ``k2``, ``p1``, ``p2`` OpenCV distortion (default 0). Non-zero ``k3``/``k4`` and non-pinhole
  ``camera_model`` values (e.g. ``OPENCV_FISHEYE``) are rejected: the cameras cannot represent them.

``transform_matrix`` is an OpenGL camera-to-world matrix, as in nerfstudio and instant-ngp.

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

import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import Tensor

from nerf_lightning.data.errors import DatasetError
from nerf_lightning.data.formats.common import check_downscale, make_cameras, prepare_image
from nerf_lightning.data.formats.transforms_json import (
    ImageRef,
    camera_to_world,
    downscaled_copy,
    finite_number,
    frame_objects,
    is_number,
    read_transforms,
    resolve_image,
)
from nerf_lightning.data.images import image_size, load_image
from nerf_lightning.data.problems import Problems
from nerf_lightning.data.scene import SceneSplit

SPLITS = ("train", "val", "test")
SPLIT_PERIOD = 8
"""Without explicit lists, frame ``i`` (sorted by file_path) is test if ``i % 8 == 0``, val if ``== 4``."""
_PERSPECTIVE_MODELS = ("OPENCV", "PINHOLE", "SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL")
_MAX_NAMES_IN_WARNING = 10

Intrinsics = tuple[float, float, float, float, int, int]
Distortion = tuple[float, float, float, float]


def _lookup(meta: dict[str, Any], frame: dict[str, Any], index: int, key: str) -> tuple[Any, int | None]:
    """The frame's value of ``key`` else the top-level one (``None`` if neither) and where it was.

    A JSON ``null`` counts as absent.
    """
    if frame.get(key) is not None:
        return frame[key], index
    return meta.get(key), None


def _size(
    meta: dict[str, Any], frame: dict[str, Any], index: int, key: str, fallback: int, source: Path
) -> int:
    value, where = _lookup(meta, frame, index, key)
    if value is None:
        return fallback
    if not is_number(value) or not math.isfinite(value) or value <= 0 or value != int(value):
        raise DatasetError(
            source, f"expected a positive integer number of pixels, got {value!r}", frame=where, field=key
        )
    return int(value)


def _focal_x(meta: dict[str, Any], frame: dict[str, Any], index: int, width: int, source: Path) -> float:
    for obj, where in ((frame, index), (meta, None)):
        if obj.get("fl_x") is not None:
            return finite_number(obj["fl_x"], source, where, "fl_x", positive=True)
        if obj.get("camera_angle_x") is not None:
            angle = obj["camera_angle_x"]
            if not is_number(angle) or not 0.0 < angle < math.pi:
                raise DatasetError(
                    source,
                    f"expected a field of view in radians, in (0, pi), got {angle!r}",
                    frame=where,
                    field="camera_angle_x",
                )
            return 0.5 * width / math.tan(0.5 * angle)
    raise DatasetError(
        source,
        "missing; expected a focal length in pixels, or 'camera_angle_x', at the top level or in the frame",
        frame=index,
        field="fl_x",
    )


def _intrinsics(
    meta: dict[str, Any],
    frame: dict[str, Any],
    index: int,
    source: Path,
    fallback_size: Callable[[], tuple[int, int]],
) -> tuple[Intrinsics, Distortion]:
    """``(fx, fy, cx, cy, w, h)`` and ``(k1, k2, p1, p2)`` of frame ``index`` after overrides."""
    model, where = _lookup(meta, frame, index, "camera_model")
    if model is not None and model not in _PERSPECTIVE_MODELS:
        raise DatasetError(
            source,
            f"expected a pinhole/OpenCV model ({', '.join(_PERSPECTIVE_MODELS)}), got {model!r}",
            frame=where,
            field="camera_model",
        )
    needs_fallback = (
        _lookup(meta, frame, index, "w")[0] is None or _lookup(meta, frame, index, "h")[0] is None
    )
    fallback = fallback_size() if needs_fallback else (0, 0)
    width = _size(meta, frame, index, "w", fallback[0], source)
    height = _size(meta, frame, index, "h", fallback[1], source)
    fx = _focal_x(meta, frame, index, width, source)
    values: dict[str, float] = {}
    for key, default, positive in (
        ("fl_y", fx, True),
        ("cx", 0.5 * width, False),
        ("cy", 0.5 * height, False),
        ("k1", 0.0, False),
        ("k2", 0.0, False),
        ("p1", 0.0, False),
        ("p2", 0.0, False),
    ):
        value, where = _lookup(meta, frame, index, key)
        values[key] = (
            default if value is None else finite_number(value, source, where, key, positive=positive)
        )
    for key in ("k3", "k4"):
        value, where = _lookup(meta, frame, index, key)
        if value is not None and value != 0:
            raise DatasetError(
                source,
                f"expected 0 or absent (only k1, k2, p1, p2 are supported), got {value!r}",
                frame=where,
                field=key,
            )
    intrinsics = (fx, values["fl_y"], values["cx"], values["cy"], width, height)
    return intrinsics, (values["k1"], values["k2"], values["p1"], values["p2"])


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
        poses, cameras: frame index -> camera-to-world ``[3, 4]`` / ``(intrinsics, distortion)`` of
            every frame with no problem (in collect mode frames with a problem are left out).
        order: the frames whose image exists, sorted by image name (the split rule's order).
    """

    source: Path
    meta: dict[str, Any]
    refs: dict[int, ImageRef]
    poses: dict[int, np.ndarray]
    cameras: dict[int, tuple[Intrinsics, Distortion]]
    order: list[int]


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
        i: problems.check(_intrinsics, meta, frame, i, source, fallback_size) for i, frame in frames.items()
    }
    good = [i for i in existing if poses[i] is not None and cameras[i] is not None]
    return NerfstudioScan(
        source=source,
        meta=meta,
        refs=refs,
        poses={i: poses[i] for i in good},
        cameras={i: cameras[i] for i in good},
        order=sorted(existing, key=lambda i: refs[i].name),
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
        declared = all(_lookup(scan.meta, frame, index, key)[0] is not None for key in ("w", "h"))
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


def _frame_image(scan: NerfstudioScan, index: int, background: tuple[float, float, float],
                 factor: int) -> Tensor:
    """Frame ``index``'s image composited and downscaled by ``factor``: from its downscaled copy when
    there is one of the right size (module docstring), else from the full-size image."""
    source = scan.source
    if factor > 1:
        (_, _, _, _, width, height), _ = scan.cameras[index]
        copy = downscaled_copy(source.parent, scan.refs[index].path, factor)
        if copy.is_file():
            image = load_image(copy, file_for_errors=str(source), frame=index)
            if (image.shape[1], image.shape[0]) == (width // factor, height // factor):
                return prepare_image(image, background, 1, source, index)
    image = load_image(scan.refs[index].path, file_for_errors=str(source), frame=index)
    check_image_size(scan, index, image.shape[1], image.shape[0])
    return prepare_image(image, background, factor, source, index)


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
    check_downscale(downscale)
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    scan = scan_nerfstudio(Path(root), Problems())
    assert scan is not None  # strict: problems raise
    source = scan.source
    selected = split_frames(scan, split)
    images: list[Tensor] = []
    for index in selected:
        images.append(_frame_image(scan, index, background, downscale))
    selected_poses: list[np.ndarray] = [scan.poses[i] for i in selected]
    return SceneSplit(
        cameras=make_cameras(
            selected_poses,
            [scan.cameras[i][0] for i in selected],
            [scan.cameras[i][1] for i in selected],
            downscale,
        ),
        images=images,
        names=[scan.refs[i].name for i in selected],
        source=str(source),
    )
