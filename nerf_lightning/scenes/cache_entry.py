"""One entry of the image cache (:mod:`nerf_lightning.scenes.cache`) on disk: its layout, writing it
atomically, reading it back fully verified, removing it.

Layout: one folder per entry, ``<cache_dir>/<key>/``, with

* ``pixels.u8``: the uint8 RGB pixels of all images of the split, image after image, row-major
  (``[sum(H_i * W_i), 3]``, no header), memory-mapped on a hit;
* ``cameras.pt``: the cameras' tensors, the image names, the source file, the world normalisation,
  the instant-ngp placement, the pixel masks, one bit per pixel, and the alpha of RGBA images, one
  byte per pixel (``torch.save``; loaded with ``weights_only=True``);
* ``manifest.json``, written last: the key, :data:`CACHE_VERSION`, the settings, per-image shapes
  and byte offsets, the size and sha256 of the two other files, the loader warnings, creation time.

An entry is never modified: it is written into a temporary folder in the cache folder, flushed to disk
and renamed into place (:func:`~nerf_lightning.files.atomic_folder`); when another process got there
first its entry is kept and this one discarded. An entry that cannot fit in the cache's file system is
refused before anything is written, and one that fills it while being written is deleted, both as a
:class:`~nerf_lightning.files.DiskFullError` naming the entry, its size and the space free. A hit is
verified before it is used (:func:`read_entry`); the pixels' sha256 comes from
:class:`~nerf_lightning.files.DigestMemo`, so it is computed on the first hit and remembered while the
file's stat is unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import shutil
import time
import uuid
import warnings
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.files import DigestMemo, FolderExistsError, atomic_folder, check_space, is_temporary
from nerf_lightning.scenes.scene import NgpPlacement, PackedImages, SceneSplit

CACHE_VERSION = 4
"""Bump when what a loader produces, or the entry layout, changes: old entries are then unused.
2: Blender splits refuse images of another aspect ratio (entries of such splits must not be served).
3: cameras carry eight distortion coefficients and a lens model; splits carry masks and the
instant-ngp placement.
4: splits of RGBA images carry their alpha."""
PIXELS_FILE, CAMERAS_FILE, MANIFEST_FILE = "pixels.u8", "cameras.pt", "manifest.json"
_STALE_TEMP_SECONDS = 24 * 3600
_log = logging.getLogger(__name__)


class CorruptEntryError(Exception):
    """A cache entry that must not be used; the message says why."""


# ----------------------------------------------------------------------------------------------- write


def _scene_metadata(scene: SceneSplit, root: Path) -> dict[str, Any]:
    source = Path(scene.source)
    try:
        relative, source_value = True, source.relative_to(root).as_posix()
    except ValueError:
        relative, source_value = False, scene.source
    return {
        "cameras": {f.name: getattr(scene.cameras, f.name) for f in fields(Cameras)},
        "names": list(scene.names),
        "source": source_value,
        "source_relative": relative,
        "depth_range": None if scene.depth_range is None else [float(v) for v in scene.depth_range],
        "world_scale": float(scene.world_scale),
        "world_transform": scene.world_transform,
        # One bit per pixel: masks are mostly all-kept and a byte per pixel would be a third of the pixels.
        "masks": None if scene.masks is None else torch.from_numpy(np.packbits(scene.masks.numpy())),
        "ngp": None if scene.ngp is None else scene.ngp.as_dict(),
        "alphas": scene.alphas,
    }


def write_entry(
    cache_dir: Path,
    key: str,
    settings: dict[str, Any],
    scene: SceneSplit,
    root: Path,
    loader_warnings: list[str],
) -> None:
    images = scene.images
    if not isinstance(images, PackedImages):
        images = PackedImages.from_images(images)
    cache_dir.mkdir(parents=True, exist_ok=True)
    clean_leftovers(cache_dir)
    buffer = io.BytesIO()
    torch.save(_scene_metadata(scene, root), buffer)
    cameras_bytes = buffer.getvalue()
    size = images.pixels.numel() + len(cameras_bytes)  # and a manifest of a few kB: a lower bound
    check_space(cache_dir / key, size, exact=False)
    try:
        with atomic_folder(cache_dir / key, size=size, size_exact=False) as temp:
            _write_files(temp, key, settings, cameras_bytes, images, loader_warnings)
    except FolderExistsError:
        _log.info("image cache: another process wrote %s first; keeping its entry", cache_dir / key)


def _write_files(
    temp: Path,
    key: str,
    settings: dict[str, Any],
    cameras_bytes: bytes,
    images: PackedImages,
    loader_warnings: list[str],
) -> None:
    """The three files of an entry, into the (temporary) folder ``temp``; the manifest last."""
    pixels = images.pixels.contiguous().numpy().reshape(-1)
    pixel_digest = hashlib.sha256()
    with open(temp / PIXELS_FILE, "wb") as file:
        for start in range(0, pixels.size, 1 << 24):
            chunk = memoryview(pixels[start : start + (1 << 24)])
            pixel_digest.update(chunk)
            file.write(chunk)
    (temp / CAMERAS_FILE).write_bytes(cameras_bytes)
    offsets = (images.offsets * 3).tolist()
    manifest = {
        "key": key,
        **settings,
        "num_images": len(images),
        "shapes": [list(shape) for shape in images.shapes],
        "offsets": offsets[:-1],
        "pixels": {"bytes": int(pixels.size), "sha256": pixel_digest.hexdigest()},
        "cameras": {"bytes": len(cameras_bytes), "sha256": hashlib.sha256(cameras_bytes).hexdigest()},
        "loader_warnings": loader_warnings,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (temp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1), encoding="utf-8")


def _delete(path: Path) -> None:
    """Delete a folder or file, ignoring errors (it may be gone already, or undeletable)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            path.unlink()


def remove_entry(entry: Path) -> None:
    """Move ``entry`` aside (atomic, so no reader sees it half deleted) then delete it."""
    trash = entry.with_name(f".trash-{entry.name[:16]}-{uuid.uuid4().hex}")
    try:
        entry.rename(trash)
    except OSError:
        _delete(entry)
        return
    _delete(trash)


def clean_leftovers(cache_dir: Path) -> None:
    """Delete temporary folders of builds that died (older than a day) and forgotten trash."""
    now = time.time()
    for child in cache_dir.iterdir():
        if is_temporary(child.name) or child.name.startswith(".trash-"):
            try:
                old = now - child.stat().st_mtime > _STALE_TEMP_SECONDS
            except OSError:
                continue
            if old or child.name.startswith(".trash-"):
                _delete(child)


# ------------------------------------------------------------------------------------------------ read


def _expect(condition: bool, problem: str) -> None:
    if not condition:
        raise CorruptEntryError(problem)


def read_entry(entry: Path, key: str, root: Path, cache_dir: Path) -> SceneSplit:
    """The split stored in ``entry``, fully verified; raises :class:`CorruptEntryError`."""
    try:
        return _read_verified(entry, key, root, cache_dir)
    except CorruptEntryError:
        raise
    except Exception as exc:  # any read or decode failure makes the entry unusable
        raise CorruptEntryError(f"{type(exc).__name__}: {exc}") from exc


def _read_verified(entry: Path, key: str, root: Path, cache_dir: Path) -> SceneSplit:
    manifest_path = entry / MANIFEST_FILE
    _expect(manifest_path.is_file(), f"{MANIFEST_FILE} is missing")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptEntryError(f"{MANIFEST_FILE} cannot be parsed ({exc})") from None
    _expect(isinstance(manifest, dict), f"{MANIFEST_FILE} is not a JSON object")
    _expect(manifest.get("key") == key, f"{MANIFEST_FILE} is for key {manifest.get('key')!r}")
    _expect(
        manifest.get("cache_version") == CACHE_VERSION,
        f"cache version {manifest.get('cache_version')!r}, expected {CACHE_VERSION}",
    )

    shapes = [(int(h), int(w)) for h, w in manifest["shapes"]]
    expected_offsets, total = [], 0
    for height, width in shapes:
        _expect(height > 0 and width > 0, f"image shape {height}x{width} in {MANIFEST_FILE}")
        expected_offsets.append(total)
        total += height * width * 3
    _expect(
        manifest["offsets"] == expected_offsets and manifest["num_images"] == len(shapes) > 0,
        f"inconsistent shapes/offsets in {MANIFEST_FILE}",
    )
    _expect(
        manifest["pixels"]["bytes"] == total,
        f"{MANIFEST_FILE} has {manifest['pixels']['bytes']} pixel bytes, its image shapes need {total}",
    )

    for name, record in ((PIXELS_FILE, manifest["pixels"]), (CAMERAS_FILE, manifest["cameras"])):
        path = entry / name
        _expect(path.is_file(), f"{name} is missing")
        size = path.stat().st_size
        _expect(size == record["bytes"], f"{name} has {size} bytes, expected {record['bytes']}")
    # The pixels' sha256 (a sequential read of the whole file the first time; remembered by the file's
    # stat afterwards) before mapping them: entries are never modified in place, so what is mapped is what
    # was hashed, now or in an earlier run with the very same stat.
    with DigestMemo(cache_dir, scope=cache_dir) as memo:
        size, digest = memo.digest(entry / PIXELS_FILE)
    _expect(size == total and digest == manifest["pixels"]["sha256"], f"{PIXELS_FILE} sha256 mismatch")
    cameras_bytes = (entry / CAMERAS_FILE).read_bytes()
    _expect(
        hashlib.sha256(cameras_bytes).hexdigest() == manifest["cameras"]["sha256"],
        f"{CAMERAS_FILE} sha256 mismatch",
    )
    meta = torch.load(io.BytesIO(cameras_bytes), weights_only=True, map_location="cpu")

    cameras = Cameras(**{f.name: meta["cameras"][f.name] for f in fields(Cameras)})
    count = len(shapes)
    tensors = [getattr(cameras, f.name) for f in fields(Cameras)]
    _expect(
        all(isinstance(t, torch.Tensor) and t.ndim >= 1 and t.shape[0] == count for t in tensors),
        f"{CAMERAS_FILE} does not hold {count} cameras",
    )
    sizes = list(zip(cameras.height.tolist(), cameras.width.tolist(), strict=True))
    _expect(sizes == shapes, f"camera sizes in {CAMERAS_FILE} differ from the image shapes")
    names = meta["names"]
    _expect(
        isinstance(names, list) and len(names) == count and all(isinstance(n, str) for n in names),
        f"{CAMERAS_FILE} does not hold {count} image names",
    )

    pixels = torch.from_file(str(entry / PIXELS_FILE), shared=False, size=total, dtype=torch.uint8)
    masks = meta["masks"]
    if masks is not None:
        _expect(isinstance(masks, torch.Tensor) and masks.numel() == (total // 3 + 7) // 8,
                f"masks in {CAMERAS_FILE} do not cover the {total // 3} pixels")
        masks = torch.from_numpy(np.unpackbits(masks.numpy(), count=total // 3).astype(bool))
    alphas = meta["alphas"]
    _expect(alphas is None or (isinstance(alphas, torch.Tensor) and alphas.dtype == torch.uint8
                               and alphas.shape == (total // 3,)),
            f"alphas in {CAMERAS_FILE} are not one byte for each of the {total // 3} pixels")
    depth_range = meta["depth_range"]
    scene = SceneSplit(
        cameras=cameras,
        images=PackedImages(pixels.view(-1, 3), shapes),
        names=names,
        source=str(root / meta["source"]) if meta["source_relative"] else meta["source"],
        depth_range=None if depth_range is None else (float(depth_range[0]), float(depth_range[1])),
        world_scale=float(meta["world_scale"]),
        world_transform=meta["world_transform"],
        masks=masks,
        ngp=None if meta["ngp"] is None else NgpPlacement.from_dict(meta["ngp"]),
        alphas=alphas,
    )
    replay = manifest.get("loader_warnings", [])
    _expect(
        isinstance(replay, list) and all(isinstance(m, str) for m in replay),
        f"loader_warnings in {MANIFEST_FILE} is not a list of strings",
    )
    for message in replay:
        warnings.warn(message, UserWarning, stacklevel=4)
    return scene
