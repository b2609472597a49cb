"""``nerf-lightning data convert SRC DST``: an LLFF capture or a COLMAP model -> ``DST/transforms.json``.

The output is a nerfstudio / instant-ngp ``transforms.json`` as
:mod:`nerf_lightning.scenes.formats.nerfstudio` reads it; each frame's ``file_path`` is the image's path
relative to ``DST``. The nerfstudio loader only opens images inside its dataset folder, so when the
source's image folder is not inside ``DST`` (a fresh folder, a read-only capture) the images are
hard-linked or copied into ``DST/<image folder name>/`` first
(:mod:`nerf_lightning.datasets.image_placement`); when it is (``DST`` is the capture or an ancestor) they
are referenced in place and nothing is linked or copied.

Sources (``SRC``):

* LLFF (:mod:`nerf_lightning.datasets.sources.llff`): a folder with ``poses_bounds.npy`` and
  ``images/`` or ``images_N/`` (default: ``images/``, else the ``images_N/`` with the smallest ``N``;
  ``--images`` picks one). Checked exactly as the LLFF loader checks it
  (:func:`nerf_lightning.scenes.formats.llff.scan_llff`), rows matched to images in name order.
* COLMAP (:mod:`nerf_lightning.datasets.sources.colmap`): a model folder with ``cameras.bin`` +
  ``images.bin`` (preferred when present) or ``cameras.txt`` + ``images.txt``, given directly or as the
  capture folder holding it in ``sparse/0/``, ``sparse/`` or ``colmap/sparse/0/``. Images are looked up
  in ``images/`` next to the model folder or up to three folders above it (``--images`` overrides).
  Camera models ``SIMPLE_PINHOLE``, ``PINHOLE``, ``SIMPLE_RADIAL``, ``RADIAL``, ``OPENCV``,
  ``FULL_OPENCV`` and ``OPENCV_FISHEYE`` are converted; the cameras that registered images use must
  be among them. Every registered image must
  exist and have its camera's size.

What is written:

* intrinsics ``fl_x, fl_y, cx, cy, w, h`` (pixels of the images referenced), plus ``k1, k2, p1, p2``
  and ``camera_model: "OPENCV"`` for SIMPLE_RADIAL, RADIAL and OPENCV, ``k1..k6, p1, p2`` and
  ``"FULL_OPENCV"``, ``k1..k4`` and ``"OPENCV_FISHEYE"`` (``"PINHOLE"`` otherwise). They are at the top
  level when every frame has the same ones, else in each frame.
* ``frames``, sorted by ``file_path``: ``file_path``, ``transform_matrix`` (4x4 OpenGL camera-to-world,
  ``+x`` right, ``+y`` up, looking along ``-z``; see :mod:`nerf_lightning.cameras.geometry`) and, for COLMAP,
  ``colmap_im_id`` (as nerfstudio writes it). No split lists: the loader's rule (every 8th frame by
  ``file_path`` from the first is test, from the fifth val) is the LLFF loader's rule.
* ``conversion``, what was done, so the output can be traced back to its source:

  - ``tool``: ``"nerf-lightning data convert"``; ``version``: this section's layout, ``2`` (``1``: before
    ``image_placement``, with ``source`` always relative to ``DST``).
  - ``source_format``: ``"colmap-binary"``, ``"colmap-text"`` or ``"llff"``.
  - ``source``: the COLMAP model folder or the ``poses_bounds.npy`` file, relative to ``DST`` when inside
    it, else absolute; ``images``: the image folder the frames reference, relative to ``DST`` (``/``
    separated).
  - ``image_placement``: how the images got into ``DST``: ``mode`` (``"in place"``, ``"linked"``,
    ``"copied"`` or ``"linked and copied"``), ``from`` (the source's image folder, as ``source``),
    ``count`` (images linked or copied into ``DST``: 0 in place), ``linked`` and ``copied`` (hard links
    of the source's files and copies, those already there included) and ``reused`` (already there,
    identical, left untouched).
  - ``applied_transform``: 4x4 matrix ``A`` from the source's world to the output's world:
    ``transform_matrix = A @ source camera-to-world (in OpenGL axes)``. The identity for both formats:
    the source's world frame, origin and units are kept.
  - ``camera_convention``: ``"OpenGL (x right, y up, z back)"``, the camera axes of ``transform_matrix``.
  - ``source_camera_convention``: the source's camera axes in words; ``camera_axes_change``: the 4x4
    matrix ``P`` with ``OpenGL camera-to-world = source camera-to-world @ P`` (COLMAP: the inverse of
    its world-to-camera ``[R | t]``, then ``diag(1, -1, -1, 1)``; LLFF: columns ``[down, right, back,
    position]`` permuted to ``[right, up, back, position]`` = ``[col1, -col0, col2, col3]``).
  - ``cameras`` (COLMAP): camera id -> ``model``, ``width``, ``height``, ``params`` as COLMAP gave them.
  - ``bounds`` (LLFF): ``near`` (smallest) and ``far`` (largest) depth bounds along the optical axes in
    the capture's units, and ``per_frame``: ``file_path`` -> ``[near, far]``. The nerfstudio loader
    does not read them (it derives the scene box from the cameras); they are kept for reference.
  - ``notes``: sentences on anything a reader of the file should know.

The file is written atomically (:mod:`nerf_lightning.files`: a temporary file in ``DST``, then renamed),
after the images are placed; an existing ``DST/transforms.json`` is only replaced with ``force``, and so
is a different file where an image would be placed.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nerf_lightning.datasets.image_placement import Placement, display_path, plan_placement
from nerf_lightning.datasets.sources.colmap import COLMAP_MODEL_FOLDERS, find_colmap_model, read_colmap
from nerf_lightning.datasets.sources.frame import Source
from nerf_lightning.datasets.sources.llff import read_llff
from nerf_lightning.files import atomic_write_text
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.llff import POSES_FILE

TRANSFORMS_FILE = "transforms.json"
CONVERSION_VERSION = 2
CAMERA_CONVENTION = "OpenGL (x right, y up, z back)"
_DISTORTION_KEYS = ("k1", "k2", "p1", "p2")


@dataclass
class ConversionResult:
    """What :func:`convert_dataset` wrote: the file, its content and lines for the user."""

    path: Path
    transforms: dict[str, Any]
    messages: list[str]


# -------------------------------------------------------------------------------------------- the source


def read_source(src: Path, images: Path | None = None) -> Source:
    """The LLFF capture (``SRC/poses_bounds.npy``) or COLMAP model of ``SRC``, read and checked."""
    if not src.is_dir():
        raise DatasetError(src, "not a folder; expected an LLFF capture or a COLMAP model folder")
    if (src / POSES_FILE).is_file():
        return read_llff(src, images)
    found = find_colmap_model(src)
    if found is None:
        places = ", ".join("SRC" if r == "." else f"SRC/{r}" for r in COLMAP_MODEL_FOLDERS)
        raise DatasetError(
            src,
            f"holds neither {POSES_FILE} (LLFF) nor a COLMAP model (cameras.bin + images.bin or "
            f"cameras.txt + images.txt in {places}); expected an LLFF capture or a COLMAP model",
        )
    return read_colmap(*found, images=images)


# -------------------------------------------------------------------------------------------- the output


def _relative(path: Path, dst: Path) -> str:
    return Path(os.path.relpath(path.resolve(), dst.resolve())).as_posix()


def _number(value: float | int) -> float | int:
    return int(value) if isinstance(value, (int, np.integer)) else float(value)


def build_transforms(source: Source, dst: Path, placement: Placement | None = None) -> dict[str, Any]:
    """The ``transforms.json`` content for ``source`` written into folder ``dst``, whose images are
    where ``placement`` put them (default: in place).

    Raises:
        DatasetError: an image resolves outside ``dst`` (the nerfstudio loader would refuse it).
    """
    if placement is None:
        placement = plan_placement([f.image for f in source.frames], source.images, dst)
    dst_real = dst.resolve()
    for frame in source.frames:
        real = placement.targets[frame.image].resolve()
        if not real.is_relative_to(dst_real):  # in place, an image that is a link to outside DST
            raise DatasetError(
                dst,
                f"image '{frame.image}' resolves to {real}, outside {dst_real}; the nerfstudio loader reads "
                "only images inside its dataset folder: expected the file itself, not a link to it",
                field="file_path",
            )
    applied = np.eye(4)
    frames = sorted(
        ((_relative(placement.targets[frame.image], dst), frame) for frame in source.frames),
        key=lambda item: item[0],
    )
    shared = all(frame.intrinsics == frames[0][1].intrinsics for _, frame in frames)

    def camera_keys(intrinsics: dict[str, Any]) -> dict[str, Any]:
        numbers = {k: v for k, v in intrinsics.items() if k != "camera_model"}
        default = "OPENCV" if any(k in intrinsics for k in _DISTORTION_KEYS) else "PINHOLE"
        model = intrinsics.get("camera_model", default)
        return {"camera_model": model, **{k: _number(v) for k, v in numbers.items()}}

    details = dict(source.details)
    if "bounds" in details:
        per_image = details["bounds"]["per_frame"]
        details["bounds"] = {
            **details["bounds"],
            "per_frame": {name: per_image[frame.image] for name, frame in frames},
        }
    conversion: dict[str, Any] = {
        "tool": "nerf-lightning data convert",
        "version": CONVERSION_VERSION,
        "source_format": source.source_format,
        "source": display_path(source.source, dst),
        "images": _relative(placement.folder, dst),
        "image_placement": placement.record(dst),
        "applied_transform": applied.tolist(),
        "camera_convention": CAMERA_CONVENTION,
        "source_camera_convention": source.camera_convention,
        "camera_axes_change": source.axes_change.tolist(),
        **details,
        "notes": list(source.notes),
    }
    meta: dict[str, Any] = {"conversion": conversion}
    if shared:
        meta.update(camera_keys(frames[0][1].intrinsics))
    meta["frames"] = [
        {
            "file_path": name,
            "transform_matrix": (applied @ frame.camera_to_world).tolist(),
            **({} if shared else camera_keys(frame.intrinsics)),
            **frame.extra,
        }
        for name, frame in frames
    ]
    return meta


def to_json(value: Any, level: int = 0) -> str:
    """JSON text indented by two spaces, with each list of numbers on one line (a 4x4 matrix takes
    four lines). Non-finite numbers raise ``ValueError`` (they are not JSON)."""
    pad, end = "  " * (level + 1), "  " * level
    if isinstance(value, dict) and value:
        items = [f"{pad}{json.dumps(str(k))}: {to_json(v, level + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + end + "}"
    if isinstance(value, list) and not all(isinstance(v, (int, float)) for v in value):
        return "[\n" + ",\n".join(pad + to_json(v, level + 1) for v in value) + "\n" + end + "]"
    return json.dumps(value, allow_nan=False)


def write_transforms(meta: dict[str, Any], dst: Path, *, force: bool = False) -> Path:
    """Write ``dst/transforms.json`` atomically and durably (:func:`~nerf_lightning.files.atomic_write_text`).

    Raises:
        FileExistsError: the file exists and ``force`` is false (it is left untouched).
    """
    path = dst / TRANSFORMS_FILE
    if path.exists() and not force:
        raise FileExistsError(f"{path}: already exists; pass --force to replace it")
    return atomic_write_text(to_json(meta) + "\n", path, sync_dir=True)


def convert_dataset(
    src: str | Path,
    dst: str | Path,
    *,
    images: str | Path | None = None,
    force: bool = False,
    copy: bool = False,
) -> ConversionResult:
    """Convert the LLFF capture or COLMAP model ``src`` into ``dst/transforms.json``.

    Args:
        src: LLFF capture folder, COLMAP capture folder or COLMAP model folder.
        dst: output folder (created if needed); images outside it are linked or copied into it.
        images: the image folder to reference (default: found as the module docstring says).
        force: replace an existing ``dst/transforms.json`` and different files where images go.
        copy: copy images into ``dst`` rather than hard-linking them (no effect in place).

    Raises:
        DatasetError: the source cannot be converted, or an image cannot be placed (one line).
        FileExistsError: ``dst/transforms.json``, or a different file where an image goes, exists and
            ``force`` is false (nothing is written).
    """
    src, dst = Path(src), Path(dst)
    if dst.exists() and not dst.is_dir():
        raise DatasetError(dst, "is a file; expected the folder to write transforms.json into")
    target = dst / TRANSFORMS_FILE
    if target.exists() and not force:  # before reading the source: the answer is the same, and quicker
        raise FileExistsError(f"{target}: already exists; pass --force to replace it")
    source = read_source(src, None if images is None else Path(images))
    placement = plan_placement([f.image for f in source.frames], source.images, dst, copy=copy, force=force)
    placement.run(copy=copy)  # before transforms.json: an interrupted run is rerun without --force
    meta = build_transforms(source, dst, placement)
    path = write_transforms(meta, dst, force=force)
    messages = [
        f"wrote {path}: {len(meta['frames'])} frames from {source.source_format} {source.source}, "
        f"{placement.describe()}"
    ]
    if (dst / "transforms_train.json").is_file():
        messages.append(
            f"note: {dst} also holds transforms_train.json, so format 'auto' picks blender; "
            "pass --format nerfstudio to 'data validate' and --data.dataset_format nerfstudio to training"
        )
    if (dst / POSES_FILE).is_file():
        messages.append(
            f"note: {dst} also holds {POSES_FILE}; format 'auto' now picks nerfstudio (transforms.json), "
            "--data.dataset_format llff (configs/llff.yaml) still loads it as LLFF"
        )
    return ConversionResult(path=path, transforms=meta, messages=messages)
