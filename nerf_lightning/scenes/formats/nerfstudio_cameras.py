"""Cameras and instant-ngp scene placement of a nerfstudio / instant-ngp ``transforms.json``.

Intrinsics are given at the top level and may be overridden per frame by the same keys (a JSON
``null`` counts as absent):

* ``fl_x``, ``fl_y`` focal lengths in pixels (``fl_y`` defaults to ``fl_x``); without ``fl_x``,
  ``camera_angle_x`` (radians) gives ``fl_x = 0.5 * w / tan(camera_angle_x / 2)``. A frame's own
  ``fl_x`` or ``camera_angle_x`` wins over the top-level ones.
* ``cx``, ``cy`` principal point in pixels (default ``w / 2``, ``h / 2``).
* ``w``, ``h`` image size; when absent they are read from the first existing image.
* ``camera_model`` and its distortion coefficients (default 0; see :data:`CAMERA_MODELS`):

  ======================================================  ===========================================
  ``camera_model``                                        coefficients
  ======================================================  ===========================================
  absent, ``SIMPLE_PINHOLE``, ``PINHOLE``,                ``k1, k2, p1, p2, k3`` (OpenCV; ``k3`` is
  ``SIMPLE_RADIAL``, ``RADIAL``, ``OPENCV``               the ``r^6`` term, as in OpenCV and nerfstudio)
  ``FULL_OPENCV``                                         ``k1..k6, p1, p2`` (OpenCV's rational model)
  ``OPENCV_FISHEYE`` (or instant-ngp's                    ``k1..k4`` (equidistant fisheye)
  ``"is_fisheye": true``)
  ======================================================  ===========================================

  A non-zero coefficient the model does not have is refused (e.g. ``k4`` of ``OPENCV``: nerfstudio
  reads it as an ``r^8`` term, OpenCV as a rational one, so it is ambiguous), as is any other
  model (``EQUIRECTANGULAR``, ...). :mod:`nerf_lightning.cameras.lens` defines the models.

instant-ngp's ``scale``, ``offset`` and ``aabb_scale`` (top level only) are read and checked into a
:class:`~nerf_lightning.scenes.scene.NgpPlacement` (:func:`ngp_placement`); the poses are not changed
(its docstring says why).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nerf_lightning.cameras.lens import COEFFICIENTS, LensModel
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.transforms_json import finite_number, is_number
from nerf_lightning.scenes.scene import NgpPlacement

Intrinsics = tuple[float, float, float, float, int, int]
"""``(fx, fy, cx, cy, w, h)`` of the full-size image."""
Lens = tuple[int, tuple[float, ...]]
"""``(LensModel, eight coefficients in the order of lens.COEFFICIENTS)``."""

_PERSPECTIVE_KEYS = ("k1", "k2", "p1", "p2", "k3")
CAMERA_MODELS: dict[str, tuple[LensModel, tuple[str, ...]]] = {
    "SIMPLE_PINHOLE": (LensModel.PERSPECTIVE, _PERSPECTIVE_KEYS),
    "PINHOLE": (LensModel.PERSPECTIVE, _PERSPECTIVE_KEYS),
    "SIMPLE_RADIAL": (LensModel.PERSPECTIVE, _PERSPECTIVE_KEYS),
    "RADIAL": (LensModel.PERSPECTIVE, _PERSPECTIVE_KEYS),
    "OPENCV": (LensModel.PERSPECTIVE, _PERSPECTIVE_KEYS),
    "FULL_OPENCV": (LensModel.PERSPECTIVE, COEFFICIENTS),
    "OPENCV_FISHEYE": (LensModel.FISHEYE, ("k1", "k2", "k3", "k4")),
}
"""``camera_model`` -> lens model and the coefficient keys it reads (each goes to slot
``COEFFICIENTS.index(key)``: a fisheye's ``k1..k4`` are in the ``k1, k2, k3, k4`` slots)."""
_ALL_KEYS = ("k1", "k2", "k3", "k4", "k5", "k6", "p1", "p2")


def lookup(meta: dict[str, Any], frame: dict[str, Any], index: int, key: str) -> tuple[Any, int | None]:
    """The frame's value of ``key`` else the top-level one (``None`` if neither) and where it was.

    A JSON ``null`` counts as absent.
    """
    if frame.get(key) is not None:
        return frame[key], index
    return meta.get(key), None


def _size(
    meta: dict[str, Any], frame: dict[str, Any], index: int, key: str, fallback: int, source: Path
) -> int:
    value, where = lookup(meta, frame, index, key)
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


def _camera_model(meta: dict[str, Any], frame: dict[str, Any], index: int, source: Path) -> str:
    model, where = lookup(meta, frame, index, "camera_model")
    fisheye, fisheye_where = lookup(meta, frame, index, "is_fisheye")
    if fisheye is not None and not isinstance(fisheye, bool):
        raise DatasetError(source, f"expected true or false, got {fisheye!r}", frame=fisheye_where,
                           field="is_fisheye")
    if model is None:
        return "OPENCV_FISHEYE" if fisheye else "OPENCV"
    if model not in CAMERA_MODELS:
        raise DatasetError(
            source, f"expected one of {', '.join(CAMERA_MODELS)}, got {model!r}", frame=where,
            field="camera_model",
        )
    if fisheye and model != "OPENCV_FISHEYE":
        raise DatasetError(
            source, f"is true but camera_model is {model!r}; expected OPENCV_FISHEYE or is_fisheye false",
            frame=fisheye_where, field="is_fisheye",
        )
    return model


def _lens(meta: dict[str, Any], frame: dict[str, Any], index: int, source: Path) -> Lens:
    name = _camera_model(meta, frame, index, source)
    model, keys = CAMERA_MODELS[name]
    coefficients = [0.0] * len(COEFFICIENTS)
    for key in _ALL_KEYS:
        value, where = lookup(meta, frame, index, key)
        if value is None:
            continue
        number = finite_number(value, source, where, key)
        if key in keys:
            coefficients[COEFFICIENTS.index(key)] = number
        elif number != 0:
            hint = " (FULL_OPENCV has k1..k6, p1, p2)" if model == LensModel.PERSPECTIVE else ""
            raise DatasetError(
                source,
                f"expected 0 or absent: camera model {name} has {', '.join(keys)}{hint}; got {value!r}",
                frame=where,
                field=key,
            )
    return int(model), tuple(coefficients)


def intrinsics(
    meta: dict[str, Any],
    frame: dict[str, Any],
    index: int,
    source: Path,
    fallback_size: Callable[[], tuple[int, int]],
) -> tuple[Intrinsics, Lens]:
    """``(fx, fy, cx, cy, w, h)`` and the lens of frame ``index`` after overrides (module docstring)."""
    lens = _lens(meta, frame, index, source)
    needs_fallback = lookup(meta, frame, index, "w")[0] is None or lookup(meta, frame, index, "h")[0] is None
    fallback = fallback_size() if needs_fallback else (0, 0)
    width = _size(meta, frame, index, "w", fallback[0], source)
    height = _size(meta, frame, index, "h", fallback[1], source)
    fx = _focal_x(meta, frame, index, width, source)
    values: dict[str, float] = {}
    defaults = (("fl_y", fx, True), ("cx", 0.5 * width, False), ("cy", 0.5 * height, False))
    for key, default, positive in defaults:
        value, where = lookup(meta, frame, index, key)
        values[key] = (
            default if value is None else finite_number(value, source, where, key, positive=positive)
        )
    return (fx, values["fl_y"], values["cx"], values["cy"], width, height), lens


def ngp_placement(meta: dict[str, Any], source: Path) -> NgpPlacement | None:
    """instant-ngp's ``scale``, ``offset`` and ``aabb_scale`` of a transforms file, checked; ``None`` when
    it has none of them (a nerfstudio file: nerfstudio ignores them).

    ``scale`` and ``aabb_scale`` must be positive numbers, ``offset`` a finite number or a list of
    three (instant-ngp takes both). Absent ``scale`` / ``offset`` take instant-ngp's defaults (0.33, 0.5).
    """
    if all(meta.get(key) is None for key in ("scale", "offset", "aabb_scale")):
        return None
    scale = NgpPlacement.DEFAULT_SCALE
    if meta.get("scale") is not None:
        scale = finite_number(meta["scale"], source, None, "scale", positive=True)
    offset = (NgpPlacement.DEFAULT_OFFSET,) * 3
    value = meta.get("offset")
    if value is not None:
        if is_number(value):
            offset = (finite_number(value, source, None, "offset"),) * 3
        elif isinstance(value, list) and len(value) == 3 and all(
            is_number(v) and math.isfinite(v) for v in value
        ):
            offset = (float(value[0]), float(value[1]), float(value[2]))
        else:
            raise DatasetError(
                source, f"expected a finite number or a list of 3, got {value!r:.80}", field="offset"
            )
    aabb_scale = None
    if meta.get("aabb_scale") is not None:
        aabb_scale = finite_number(meta["aabb_scale"], source, None, "aabb_scale", positive=True)
    return NgpPlacement(scale=scale, offset=offset, aabb_scale=aabb_scale)
