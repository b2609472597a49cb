"""One entry of the image cache (:mod:`nerf_lightning.scenes.cache`) on disk: its layout, reading it
back fully verified, removing it.

Layout: one folder per entry, ``<cache_dir>/<key>/``, with

* ``pixels.u8``: the uint8 RGB pixels of all images of the split, image after image, row-major
  (``[sum(H_i * W_i), 3]``, no header), memory-mapped on a hit;
* ``alphas.u8``, only for splits with an alpha channel: the opacity of every pixel, one byte each
  (255: opaque; frames without alpha are opaque), ordered as the pixels, memory-mapped on a hit;
* ``cameras.pt``: the cameras' tensors, the image names, the source file, the world normalisation,
  the instant-ngp placement and the pixel masks, one bit per pixel (``torch.save``; loaded with
  ``weights_only=True``);
* ``manifest.json``, written last: the key, :data:`CACHE_VERSION`, the settings, per-image shapes
  and byte offsets, the size and sha256 of the other files, the loader warnings and the dataset
  root they name (a hit from a copy of the dataset elsewhere names the copy), creation time.

An entry is written by :mod:`nerf_lightning.scenes.cache_build` (one image at a time, under a lock,
resumable) and is never modified once published. A hit is verified before it is used
(:func:`read_entry`); the sha256 of the pixels (and alphas) comes from
:class:`~nerf_lightning.files.DigestMemo`, so it is computed on the first hit and remembered while the
file's stat is unchanged.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shutil
import uuid
import warnings
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.files import (
    DigestMemo,
)
from nerf_lightning.scenes.scene import NgpPlacement, PackedImages, SceneSplit

CACHE_VERSION = 5
"""Bump when what a loader produces, or the entry layout, changes: old entries are then unused.
2: Blender splits refuse images of another aspect ratio (entries of such splits must not be served).
3: cameras carry eight distortion coefficients and a lens model; splits carry masks and the
instant-ngp placement.
4: splits of RGBA images carry their alpha.
5: the alpha is a memory-mapped file of its own (``alphas.u8``), not part of ``cameras.pt``."""
PIXELS_FILE, ALPHAS_FILE = "pixels.u8", "alphas.u8"
CAMERAS_FILE, MANIFEST_FILE = "cameras.pt", "manifest.json"


class CorruptEntryError(Exception):
    """A cache entry that must not be used; the message says why."""


def delete_path(path: Path) -> None:
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
        delete_path(entry)
        return
    delete_path(trash)


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

    alphas_record = manifest.get("alphas")
    files = [(PIXELS_FILE, manifest["pixels"]), (CAMERAS_FILE, manifest["cameras"])]
    if alphas_record is not None:
        _expect(alphas_record["bytes"] == total // 3, f"{MANIFEST_FILE} has {alphas_record['bytes']} alpha "
                f"bytes, its image shapes need {total // 3}")
        files.append((ALPHAS_FILE, alphas_record))
    for name, record in files:
        path = entry / name
        _expect(path.is_file(), f"{name} is missing")
        size = path.stat().st_size
        _expect(size == record["bytes"], f"{name} has {size} bytes, expected {record['bytes']}")
    # The sha256 of the pixels and alphas (a sequential read of each file the first time; remembered by
    # the file's stat afterwards) before mapping them: entries are never modified in place, so what is
    # mapped is what was hashed, now or in an earlier run with the very same stat.
    with DigestMemo(cache_dir, scope=cache_dir) as memo:
        for name, record in files:
            if name != CAMERAS_FILE:
                size, digest = memo.digest(entry / name)
                _expect(size == record["bytes"] and digest == record["sha256"], f"{name} sha256 mismatch")
    cameras_bytes = (entry / CAMERAS_FILE).read_bytes()
    _expect(
        hashlib.sha256(cameras_bytes).hexdigest() == manifest["cameras"]["sha256"],
        f"{CAMERAS_FILE} sha256 mismatch",
    )
    meta = torch.load(io.BytesIO(cameras_bytes), weights_only=True, map_location="cpu")
    scene = assemble(entry, manifest, meta, root)
    replay = manifest.get("loader_warnings", [])
    _expect(
        isinstance(replay, list) and all(isinstance(m, str) for m in replay),
        f"loader_warnings in {MANIFEST_FILE} is not a list of strings",
    )
    recorded_root = manifest.get("loader_root")
    for message in replay:
        warnings.warn(_under_root(message, recorded_root, root), UserWarning, stacklevel=4)
    return scene


def _under_root(message: str, recorded_root: object, root: Path) -> str:
    """A replayed loader message naming ``root`` where it named the root the entry was built from.

    Entries are keyed by content, so a copy of the dataset in another folder hits the entry its first
    location built; its warnings must name the files the user has now. The recorded root is replaced
    where it begins a path: at the start of the message or after a space, quote or parenthesis, and
    followed by a path separator, a colon, a closing quote or parenthesis, or the end (``/a/fox`` is
    not ``/a/foxes`` nor ``/a/fox copy``). A root of ``.`` never appears in the loader's paths and is
    left alone.
    """
    if not isinstance(recorded_root, str) or recorded_root in ("", ".") or recorded_root == str(root):
        return message
    pattern = r"(?<![^\s'\"(])" + re.escape(recorded_root) + r"(?=[\\/:'\")]|$)"
    return re.sub(pattern, lambda _: str(root), message)


def assemble(entry: Path, manifest: dict[str, Any], meta: dict[str, Any], root: Path) -> SceneSplit:
    """The split of an entry whose files were checked against ``manifest`` (or just written): its
    pixels and alphas memory-mapped, the rest from ``meta`` (what ``cameras.pt`` holds), checked to
    agree with the manifest."""
    shapes = [(int(h), int(w)) for h, w in manifest["shapes"]]
    total = 3 * sum(h * w for h, w in shapes)
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
    # Private maps of files that are never written: pages are read from the file when touched and may be
    # dropped again, so no copy of the images is made and a split larger than the memory the process may
    # use trains from the page cache.
    pixels = torch.from_file(str(entry / PIXELS_FILE), shared=False, size=total, dtype=torch.uint8)
    alphas = None
    if manifest.get("alphas") is not None:
        alphas = torch.from_file(str(entry / ALPHAS_FILE), shared=False, size=total // 3, dtype=torch.uint8)
    masks = meta["masks"]
    if masks is not None:
        _expect(isinstance(masks, torch.Tensor) and masks.numel() == (total // 3 + 7) // 8,
                f"masks in {CAMERAS_FILE} do not cover the {total // 3} pixels")
        masks = torch.from_numpy(np.unpackbits(masks.numpy(), count=total // 3).astype(bool))
    depth_range = meta["depth_range"]
    return SceneSplit(
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
