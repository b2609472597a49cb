"""Building an entry of the image cache (layout: :mod:`nerf_lightning.scenes.cache_entry`).

An entry is built one image at a time (:func:`build_entry`): each image the loader prepares is quantised
and appended to ``pixels.u8`` (and ``alphas.u8``) in the build's folder ``.partial-KEY``, and hashed on
the way, so the memory a build needs is that of one image, whatever the number of images; the split it
gives back maps the files just written. One process builds a given entry at a time (a lock file
``.lock-KEY``; the others wait, then read its entry), and a build that was interrupted is continued
from the last images it recorded as written. An entry is never modified once published: it is
flushed to disk and renamed into place; a split loaded whole (:func:`write_entry`) is written into a
temporary folder and renamed (:func:`~nerf_lightning.files.atomic_folder`), and when another process
got there first its entry is kept and this one discarded. An entry that cannot fit in the cache's file
system is refused before anything is written (its size estimated from its first image: every image as
many bytes as that one), and one that fills it while being written is deleted, both as a
:class:`~nerf_lightning.files.DiskFullError` naming the entry, its size and the space free. What this
module builds is read back, verified, by :func:`~nerf_lightning.scenes.cache_entry.read_entry`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.files import (
    DiskFullError,
    FolderExistsError,
    atomic_folder,
    check_space,
    free_bytes,
    is_temporary,
)
from nerf_lightning.files.atomic import fsync_path
from nerf_lightning.files.space import disk_full_errno
from nerf_lightning.scenes.cache_entry import (
    ALPHAS_FILE,
    CAMERAS_FILE,
    MANIFEST_FILE,
    PIXELS_FILE,
    assemble,
    delete_path,
    read_entry,
)
from nerf_lightning.scenes.formats.common import ImageStream, PreparedImage, SplitImages, collect
from nerf_lightning.scenes.images import quantize_to_uint8
from nerf_lightning.scenes.scene import PackedImages, SceneSplit

_CHUNK = 1 << 24  # bytes written (and hashed) at once when an image is larger
PARTIAL_PREFIX = ".partial-"
"""A build in progress (or interrupted) of entry ``KEY`` is the folder ``.partial-KEY`` beside it."""
_PROGRESS_FILE, _MASK_BITS_FILE = "progress.jsonl", "masks.bool"
_PROGRESS_BYTES = 1 << 28
"""Bytes of pixels (and alphas, masks) written between two progress records of a build."""
_STALE_TEMP_SECONDS = 24 * 3600
_log = logging.getLogger(__name__)


def _scene_metadata(scene: SceneSplit, root: Path, masks: np.ndarray | None) -> dict[str, Any]:
    """What ``cameras.pt`` holds: the split but its pixels and alphas; ``masks`` packed one bit a pixel."""
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
        "masks": None if masks is None else torch.from_numpy(masks),
        "ngp": None if scene.ngp is None else scene.ngp.as_dict(),
    }


class _HashedFile:
    """A file written in order and hashed as it is written; opened to continue its first ``keep`` bytes
    (those are read back into the hash), anything after them cut off."""

    def __init__(self, path: Path, keep: int = 0) -> None:
        self.path = path
        self.digest = hashlib.sha256()
        self.bytes = 0
        self.file = open(path, "r+b" if keep else "wb")  # noqa: SIM115 (closed by close(), also on failure)
        if keep:
            self.file.truncate(keep)
            while self.bytes < keep:
                chunk = self.file.read(min(_CHUNK, keep - self.bytes))
                if not chunk:
                    raise OSError(f"{path}: shorter than the {keep} bytes its progress record lists")
                self.digest.update(chunk)
                self.bytes += len(chunk)

    def write(self, data: np.ndarray) -> None:
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        for start in range(0, flat.size, _CHUNK):
            chunk = memoryview(flat[start : start + _CHUNK])
            self.digest.update(chunk)
            self.file.write(chunk)
        self.bytes += int(flat.size)

    def write_opaque(self, count: int) -> None:
        """``count`` bytes of 255 (the alpha of opaque pixels)."""
        block = np.full(min(count, _CHUNK), 255, dtype=np.uint8)
        while count > 0:
            self.write(block[: min(count, _CHUNK)])
            count -= min(count, _CHUNK)

    def sync(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()

    def record(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "sha256": self.digest.hexdigest()}


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _finished_images(folder: Path) -> list[dict[str, Any]]:
    """The progress records of the images a build in ``folder`` finished, as far as its files hold them
    (a record beyond what the files hold, or one cut short, is dropped)."""
    try:
        lines = (folder / _PROGRESS_FILE).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    available = {name: _file_size(folder / name) for name in (PIXELS_FILE, ALPHAS_FILE, _MASK_BITS_FILE)}
    records: list[dict[str, Any]] = []
    pixels = masked = 0
    any_alpha = False
    for line in lines:
        try:
            record = json.loads(line)
            height, width = (int(v) for v in record["shape"])
            alpha, mask = bool(record["alpha"]), bool(record["mask"])
        except (ValueError, TypeError, KeyError):
            break
        pixels += height * width
        masked += height * width if mask else 0
        any_alpha = any_alpha or alpha
        if (3 * pixels > available[PIXELS_FILE] or masked > available[_MASK_BITS_FILE]
                or (any_alpha and pixels > available[ALPHAS_FILE])):
            break
        records.append({"shape": [height, width], "alpha": alpha, "mask": mask})
    return records


class _EntryFiles:
    """The files of an entry being built in ``folder``, image by image, continuing where a build that was
    interrupted there stopped (its images are not prepared again).

    ``pixels.u8`` gets each image's colours; ``alphas.u8`` is started by the first image with an alpha
    channel (the pixels before it opaque), so a split without one has none; ``masks.bool`` (one byte per
    pixel, packed into ``cameras.pt`` at the end) the masks. ``progress.jsonl`` lists the images whose
    bytes are on disk: it is written after the files are flushed to disk, once
    :data:`_PROGRESS_BYTES` were written since the last time and when a build is interrupted, so a
    build killed outright redoes at most that much.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(exist_ok=True)
        done = _finished_images(folder)
        self.shapes: list[tuple[int, int]] = [(r["shape"][0], r["shape"][1]) for r in done]
        self.num_pixels = sum(h * w for h, w in self.shapes)
        masked = sum(r["shape"][0] * r["shape"][1] for r in done if r["mask"])
        self.pixels = _HashedFile(folder / PIXELS_FILE, 3 * self.num_pixels)
        self.alphas = (_HashedFile(folder / ALPHAS_FILE, self.num_pixels) if any(r["alpha"] for r in done)
                       else None)
        self.masks = _HashedFile(folder / _MASK_BITS_FILE, masked) if masked else None
        self.progress = open(folder / _PROGRESS_FILE, "w", encoding="utf-8")  # noqa: SIM115 (see close)
        self.progress.writelines(json.dumps(record) + "\n" for record in done)
        self.progress.flush()
        self.pending: list[dict[str, Any]] = []
        self.pending_bytes = 0

    @property
    def done(self) -> int:
        """Images in the files (those of an earlier build included)."""
        return len(self.shapes)

    @property
    def written(self) -> int:
        """Bytes of pixels and alphas in the files."""
        return self.pixels.bytes + (0 if self.alphas is None else self.alphas.bytes)

    def add(self, rgb: Tensor, alpha: Tensor | None, mask: Tensor | None) -> None:
        """One image: ``rgb`` ``[H, W, 3]`` uint8, its ``alpha`` ``[H * W]`` uint8 and ``mask`` ``[H * W]``
        bool (either ``None``)."""
        height, width = int(rgb.shape[0]), int(rgb.shape[1])
        self.pixels.write(rgb.contiguous().numpy())
        if alpha is not None and self.alphas is None:
            self.alphas = _HashedFile(self.folder / ALPHAS_FILE)
            self.alphas.write_opaque(self.num_pixels)
        if self.alphas is not None:
            if alpha is None:
                self.alphas.write_opaque(height * width)
            else:
                self.alphas.write(alpha.contiguous().numpy())
        if mask is not None:
            self.masks = self.masks or _HashedFile(self.folder / _MASK_BITS_FILE)
            self.masks.write(mask.contiguous().numpy().view(np.uint8))
        self.shapes.append((height, width))
        self.num_pixels += height * width
        self.pending.append({"shape": [height, width], "alpha": alpha is not None, "mask": mask is not None})
        self.pending_bytes += height * width * 5
        if self.pending_bytes >= _PROGRESS_BYTES:
            self.save_progress()

    def save_progress(self) -> None:
        """Flush the files to disk, then record the images they now hold."""
        if not self.pending:
            return
        for file in self._files():
            file.sync()
        self.progress.writelines(json.dumps(record) + "\n" for record in self.pending)
        self.progress.flush()
        os.fsync(self.progress.fileno())
        self.pending, self.pending_bytes = [], 0

    def packed_masks(self) -> np.ndarray | None:
        """The masks, one bit per pixel (``np.packbits`` of all of them), read back in chunks."""
        if self.masks is None:
            return None
        self.masks.file.flush()
        packed = []
        with open(self.masks.path, "rb") as file:
            while chunk := file.read(_CHUNK):  # a multiple of 8 bytes: whole bytes of bits
                packed.append(np.packbits(np.frombuffer(chunk, dtype=np.uint8).astype(bool)))
        return np.concatenate(packed) if packed else np.zeros(0, dtype=np.uint8)

    def _files(self) -> list[_HashedFile]:
        return [f for f in (self.pixels, self.alphas, self.masks) if f is not None]

    def close(self) -> None:
        for file in self._files():
            file.close()
        self.progress.close()

    def drop_progress(self) -> None:
        """Remove the files only a build needs (the entry is complete)."""
        for name in (_PROGRESS_FILE, _MASK_BITS_FILE):
            (self.folder / name).unlink(missing_ok=True)


def _quantised(prepared: PreparedImage) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """A loader's image as the entry stores it: uint8 as :func:`~nerf_lightning.scenes.loading.load_split`
    quantises it (:class:`PackedImages`, :func:`~nerf_lightning.scenes.formats.common.pack_alphas`)."""
    rgb = quantize_to_uint8(prepared.rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected images [H, W, 3], got {tuple(rgb.shape)}")
    alpha = None if prepared.alpha is None else quantize_to_uint8(prepared.alpha).reshape(-1)
    return rgb, alpha, prepared.mask


def image_bytes(prepared: PreparedImage) -> int:
    """The bytes a loader's image takes in an entry: one per colour channel and one of alpha per pixel."""
    height, width = int(prepared.rgb.shape[0]), int(prepared.rgb.shape[1])
    return height * width * (3 if prepared.alpha is None else 4)


def _prepend(first: PreparedImage, rest: SplitImages) -> SplitImages:
    """``first``, then the images of ``rest`` (whose return value it returns)."""
    yield first
    del first  # one image in memory at a time
    return (yield from rest)


def build_entry(
    cache_dir: Path,
    key: str,
    settings: dict[str, Any],
    open_stream: Callable[[int], ImageStream],
    root: Path,
    loader_warnings: Callable[[], list[str]],
) -> tuple[SceneSplit, DiskFullError | None]:
    """Prepare a split's images one at a time straight into a new entry ``cache_dir/key``.

    The build happens in the folder ``.partial-KEY`` beside the entry, under a lock (:func:`_build_lock`):
    another process building the same entry waits for it and then reads its entry. A build that was
    interrupted there is continued: ``open_stream(done)`` is asked for the images after the ``done``
    ones it finished. The folder is renamed into place once complete; it is deleted when the build fails
    (a dataset error, a full disk), kept when it is interrupted (``KeyboardInterrupt``, ``SystemExit``).

    Args:
        open_stream: the split's stream, leaving out its first images (``skip``).
        loader_warnings: called once the last image is prepared: the loader's warnings to replay on hits.

    Returns:
        The split, its images and alphas mapping the entry's files; or, when the entry cannot fit in the
        cache's file system (nothing was written), the split with its images in memory and the
        :class:`~nerf_lightning.files.DiskFullError` that refused the entry.

    Raises:
        DatasetError: the loader's (nothing is left of the build).
        OSError: the entry could not be written (nothing is left of it; the stream is used up).
        CorruptEntryError: the entry another process built is unusable.
    """
    entry = cache_dir / key
    with _build_lock(cache_dir, key):
        if entry.exists():  # built by the process this one waited for (its hit replays the loader's warnings)
            return read_entry(entry, key, root, cache_dir), None
        return _build_locked(cache_dir, key, settings, open_stream, root, loader_warnings)


def _build_locked(
    cache_dir: Path,
    key: str,
    settings: dict[str, Any],
    open_stream: Callable[[int], ImageStream],
    root: Path,
    loader_warnings: Callable[[], list[str]],
) -> tuple[SceneSplit, DiskFullError | None]:
    entry, folder = cache_dir / key, cache_dir / f"{PARTIAL_PREFIX}{key}"
    files = _EntryFiles(folder)
    size: int | None = None
    try:
        stream = open_stream(files.done)
        images = stream.images
        try:
            first = next(images)
        except StopIteration as finished:
            if files.done == 0:  # a split without images: nothing to cache
                files.close()
                delete_path(folder)
                split: SceneSplit = finished.value
                split.images = PackedImages(torch.zeros(0, 3, dtype=torch.uint8), [])
                return split, None
            images = _nothing(finished.value)
        else:
            # The pixels of every image, as many bytes as the first one's (cameras and manifest are small).
            size = stream.count * image_bytes(first)
            try:
                check_space(entry, max(size - files.written, 0), exact=False)
            except DiskFullError as refused:
                if files.done:
                    raise  # the images before this one are on disk only: loaded again, uncached
                files.close()
                delete_path(folder)
                return collect_packed(ImageStream(stream.count, _prepend(first, images))), refused
            images = _prepend(first, images)
            del first
        while True:
            try:
                prepared = next(images)
            except StopIteration as finished:
                meta_split: SceneSplit = finished.value
                break
            files.add(*_quantised(prepared))
            del prepared
        masks = files.packed_masks()
        files.close()
        files.drop_progress()
        manifest, meta = _write_metadata(folder, key, settings, meta_split, root, files, masks,
                                         loader_warnings())
        _publish(folder, entry)
    except Exception as error:
        files.close()
        written = files.written
        delete_path(folder)
        code = disk_full_errno(error, cache_dir)
        if code is None or isinstance(error, DiskFullError):
            raise
        raise DiskFullError(entry, code=code, needed=max(size or 0, written) or None, needed_exact=False,
                            free=free_bytes(cache_dir)) from error
    except BaseException:  # interrupted: what is on disk is kept for the next build to continue
        with contextlib.suppress(OSError, ValueError):
            files.save_progress()
        files.close()
        raise
    return assemble(entry, manifest, meta, root), None


def _nothing(value: SceneSplit) -> SplitImages:
    """No images, returning ``value`` (a build that finished every image before it was interrupted)."""
    return value
    yield  # a generator


def _publish(folder: Path, entry: Path) -> None:
    """Flush the complete build in ``folder`` to disk and rename it to ``entry``."""
    for path in folder.iterdir():
        fsync_path(path)
    fsync_path(folder)
    os.rename(folder, entry)
    fsync_path(entry.parent)


@contextlib.contextmanager
def _build_lock(cache_dir: Path, key: str) -> Iterator[None]:
    """An exclusive lock on building entry ``key`` (``flock`` of ``.lock-KEY`` in ``cache_dir``), waited
    for while another process holds it. The file is removed when released; a process that locked a file
    removed meanwhile locks the new one instead, so only one process ever builds a given entry. Where
    the file system has no locks, the build goes ahead unlocked."""
    path = cache_dir / f".lock-{key}"
    while True:
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # no locks on this file system
            os.close(handle)
            yield
            return
        try:
            current = os.stat(path).st_ino == os.fstat(handle).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        os.close(handle)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(handle)


def collect_packed(stream: ImageStream) -> SceneSplit:
    """The split of ``stream`` in memory, packed as :func:`~nerf_lightning.scenes.loading.load_split`
    packs it."""
    split = collect(stream)
    split.images = PackedImages.from_images(split.images)
    return split


def write_entry(
    cache_dir: Path,
    key: str,
    settings: dict[str, Any],
    scene: SceneSplit,
    root: Path,
    loader_warnings: list[str],
) -> None:
    """Write the entry of a split loaded whole (a format without a stream, or a test)."""
    images = scene.images
    if not isinstance(images, PackedImages):
        images = PackedImages.from_images(images)
    cache_dir.mkdir(parents=True, exist_ok=True)
    clean_leftovers(cache_dir)
    size = int(images.pixels.numel()) + (0 if scene.alphas is None else int(scene.alphas.numel()))
    check_space(cache_dir / key, size, exact=False)
    starts = images.offsets.tolist()
    try:
        with atomic_folder(cache_dir / key, size=size, size_exact=False) as temp:
            files = _EntryFiles(temp)
            try:
                for index in range(len(images)):
                    begin, end = starts[index], starts[index + 1]
                    files.add(images.uint8(index),
                              None if scene.alphas is None else scene.alphas[begin:end],
                              None if scene.masks is None else scene.masks[begin:end])
                masks = files.packed_masks()
            finally:
                files.close()
            files.drop_progress()
            _write_metadata(temp, key, settings, scene, root, files, masks, loader_warnings)
    except FolderExistsError:
        _log.info("image cache: another process wrote %s first; keeping its entry", cache_dir / key)


def _write_metadata(
    temp: Path,
    key: str,
    settings: dict[str, Any],
    scene: SceneSplit,
    root: Path,
    files: _EntryFiles,
    masks: np.ndarray | None,
    loader_warnings: list[str],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``cameras.pt`` then ``manifest.json`` (last) of the entry in ``temp``; both returned as dicts."""
    meta = _scene_metadata(scene, root, masks)
    buffer = io.BytesIO()
    torch.save(meta, buffer)
    cameras_bytes = buffer.getvalue()
    (temp / CAMERAS_FILE).write_bytes(cameras_bytes)
    offsets, total = [], 0
    for height, width in files.shapes:
        offsets.append(total)
        total += height * width * 3
    manifest = {
        "key": key,
        **settings,
        "num_images": len(files.shapes),
        "shapes": [list(shape) for shape in files.shapes],
        "offsets": offsets,
        "pixels": files.pixels.record(),
        "alphas": None if files.alphas is None else files.alphas.record(),
        "cameras": {"bytes": len(cameras_bytes), "sha256": hashlib.sha256(cameras_bytes).hexdigest()},
        "loader_warnings": loader_warnings,
        "loader_root": str(root),  # the root they name; a hit from a copy names its own
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (temp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return manifest, meta






def clean_leftovers(cache_dir: Path) -> None:
    """Delete temporary folders of writes that died and builds left unfinished (untouched for a day),
    and forgotten trash."""
    now = time.time()
    for child in cache_dir.iterdir():
        partial = child.name.startswith(PARTIAL_PREFIX)
        if is_temporary(child.name) or partial or child.name.startswith(".trash-"):
            try:
                touched = max(child.stat().st_mtime, _mtime(child / _PROGRESS_FILE) if partial else 0.0)
            except OSError:
                continue
            if now - touched > _STALE_TEMP_SECONDS or child.name.startswith(".trash-"):
                delete_path(child)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
