"""On-disk cache of prepared (decoded, composited, downscaled, quantised) images of a split.

:func:`cached_load_split` gives exactly what :func:`~nerf_lightning.scenes.loading.load_split` gives,
bitwise, but decodes a split's images only once: later calls memory-map them from the cache.

Each entry is a folder ``<cache_dir>/<key>/`` of its files (:mod:`nerf_lightning.scenes.cache_entry`: the
layout and the verified read; :mod:`nerf_lightning.scenes.cache_build`: the streamed, atomic write).
The key is the sha256 of the split's input fingerprint
(:func:`~nerf_lightning.scenes.fingerprint.split_fingerprint`: a content hash of the pose files and the
images), the format, the split, the background, the downscale factor,
:data:`~nerf_lightning.scenes.cache_entry.CACHE_VERSION` and the Pillow and torch versions (decoding and
resampling may change with them).

A miss builds the entry one image at a time (:func:`~nerf_lightning.scenes.cache_build.build_entry`):
each image is decoded, composited, downscaled, quantised and appended to the entry's files before the
next is decoded, and the split returned maps the entry; so the memory a first load needs does not grow
with the number of images (a format without a stream in
:data:`~nerf_lightning.scenes.loading.STREAMS` is loaded whole, then written).

Every hit is verified: a missing or unparsable manifest, a size or sha256 mismatch, inconsistent
contents or a read error warns (naming the folder and the problem), removes the entry and rebuilds it
from the dataset. A cache folder that cannot be written warns once and the split is loaded uncached; a
full one (:class:`~nerf_lightning.files.DiskFullError`) too, the warning naming the entry, the bytes it
needs and the bytes free (a write that fails part way loads the split again, uncached: the images
already decoded went to the entry, which is deleted).
The dataset folder itself is only read.

File digests (of the dataset's files for the key, and of an entry's pixels for the check) come from
:class:`~nerf_lightning.files.DigestMemo` with its memo in ``cache_dir/file-digests/``: a file whose
size, mtime, ctime, inode and device are those it had when hashed is not read again. A warm start thus
reads the dataset's metadata only; an entry's pixels are hashed on the first hit after they were written
(and again whenever their stat changes). Corruption that leaves a file's stat alone (media bit rot) is
then no longer caught on later hits; :mod:`nerf_lightning.files.digests` lists what the memo trusts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import PIL
import torch

from nerf_lightning.files import DiskFullError, free_bytes
from nerf_lightning.scenes.cache_build import build_entry, clean_leftovers, image_bytes, write_entry
from nerf_lightning.scenes.cache_entry import (
    CACHE_VERSION,
    MANIFEST_FILE,
    CorruptEntryError,
    read_entry,
    remove_entry,
)
from nerf_lightning.scenes.fingerprint import split_fingerprint
from nerf_lightning.scenes.formats.common import ImageStream, SplitImages
from nerf_lightning.scenes.loading import LOADERS, STREAMS, detect_format, load_split
from nerf_lightning.scenes.scene import PackedImages, SceneSplit

_log = logging.getLogger(__name__)
_warned_unwritable: set[str] = set()
ImageProgress = Callable[[str, int, int], None]
"""Told ``(split, images done, images in the split)`` as a new cache entry is built: once before the first
image is prepared and after each is written. A build continued after an interruption starts at the
images it had finished."""

MAX_DEFAULT_WORKERS = 4
"""The most threads :func:`default_workers` gives: decoding scales little further, and each one holds an
image being prepared."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/nerf-lightning``, else ``~/.cache/nerf-lightning``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nerf-lightning"


def cache_key(
    fingerprint: str, dataset_format: str, split: str, background: tuple[float, ...], downscale: int
) -> str:
    """sha256 hex of everything that determines the prepared images of a split."""
    return hashlib.sha256(
        json.dumps(
            _settings(fingerprint, dataset_format, split, background, downscale), sort_keys=True
        ).encode()
    ).hexdigest()


def _settings(
    fingerprint: str, dataset_format: str, split: str, background: tuple[float, ...], downscale: int
) -> dict[str, Any]:
    return {
        "cache_version": CACHE_VERSION,
        "fingerprint": fingerprint,
        "format": dataset_format,
        "split": split,
        "background": [float(c) for c in background],
        "downscale": downscale,
        "pillow": PIL.__version__,
        "torch": torch.__version__,
    }


def default_workers() -> int:
    """Threads preparing images on a first load: the CPU cores this process may use, at most
    :data:`MAX_DEFAULT_WORKERS` (each holds one image being prepared)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_WORKERS))


def cached_load_split(
    root: str | Path,
    split: str,
    *,
    dataset_format: str = "auto",
    background: tuple[float, float, float] = (1.0, 1.0, 1.0),
    downscale: int = 1,
    cache_dir: str | Path | None = None,
    num_workers: int | None = None,
    progress: ImageProgress | None = None,
) -> SceneSplit:
    """:func:`~nerf_lightning.scenes.loading.load_split` through the image cache (same arguments).

    Args:
        cache_dir: folder of the cache entries; ``None`` is :func:`default_cache_dir`.
        num_workers: threads preparing images when the entry is built (the result is the same whatever
            their number); ``None``: :func:`default_workers`.
        progress: told how the build of a new entry goes (:data:`ImageProgress`); not called on a hit.

    Returns:
        The split, equal to ``load_split(...)``'s bitwise; its images are
        :class:`~nerf_lightning.scenes.scene.PackedImages` over a memory map of the entry (and its
        alphas a memory map too), whether the entry was there or just built; in memory only when the
        entry could not be written.

    Raises:
        as :func:`~nerf_lightning.scenes.loading.load_split` (a problem with the cache never raises).
    """
    root = Path(root)
    if dataset_format == "auto":
        dataset_format = detect_format(root)
    if dataset_format not in LOADERS:
        known = ", ".join(["auto", *LOADERS])
        raise ValueError(f"unknown dataset_format {dataset_format!r}; expected one of: {known}")
    background = tuple(float(c) for c in background)

    def uncached() -> SceneSplit:
        return load_split(
            root, split, dataset_format=dataset_format, background=background, downscale=downscale
        )

    if isinstance(downscale, bool) or not isinstance(downscale, int) or len(background) != 3:
        return uncached()  # the loader reports the bad setting
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    try:
        fingerprint = split_fingerprint(root, split, dataset_format=dataset_format, memo_dir=cache_dir)
    except OSError:
        return uncached()  # an unreadable input: the loader reports it
    settings = _settings(fingerprint, dataset_format, split, background, downscale)
    key = cache_key(fingerprint, dataset_format, split, background, downscale)
    entry = cache_dir / key

    if _exists(entry):
        try:
            scene = read_entry(entry, key, root, cache_dir)
        except CorruptEntryError as exc:
            warnings.warn(
                f"image cache entry {entry} is unusable ({exc}); removing it and rebuilding it "
                "from the dataset",
                UserWarning,
                stacklevel=2,
            )
            remove_entry(entry)
        else:
            _log.info("image cache hit: %s", entry)
            return scene

    _log.info("image cache miss: building %s", entry)
    stream = STREAMS.get(dataset_format)
    if stream is None:  # a format that loads whole splits only: load, then write the entry
        scene, loader_warnings = _load_recording_warnings(uncached)
        try:
            write_entry(cache_dir, key, settings, scene, root, loader_warnings)
        except OSError as exc:
            _warn_unusable(cache_dir, exc)
        return scene
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        clean_leftovers(cache_dir)
    except OSError as exc:
        _warn_unusable(cache_dir, exc)
        return uncached()
    failure: OSError | CorruptEntryError | None = None
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                workers = default_workers() if num_workers is None else max(1, int(num_workers))
                scene, refused = build_entry(
                    cache_dir, key, settings,
                    lambda skip: _reporting(stream(root, split, background=background, downscale=downscale,
                                                   skip=skip, workers=workers), split, skip, progress),
                    root, lambda: _user_messages(caught))
            except (OSError, CorruptEntryError) as exc:
                failure = exc
    finally:
        if failure is None:  # the loader's warnings, as it gave them (the load is given up otherwise)
            for w in caught:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    if failure is not None:  # nothing is left of the entry; its images are loaded again, uncached
        _warn_unusable(cache_dir, failure)
        return uncached()
    if refused is not None:  # the split was loaded in memory instead
        _warn_unusable(cache_dir, refused)
    return scene


def _warn_unusable(cache_dir: Path, exc: Exception) -> None:
    """One warning per cache folder: its entry cannot be written, the split is loaded without it."""
    if str(cache_dir) in _warned_unwritable:
        return
    _warned_unwritable.add(str(cache_dir))
    if isinstance(exc, DiskFullError):
        problem = f"image cache entry {exc}"  # names the entry, the bytes it needs and the bytes free
    elif isinstance(exc, CorruptEntryError):
        problem = f"image cache entry in {cache_dir} is unusable ({exc})"
    else:
        problem = f"image cache folder {cache_dir} cannot be written ({exc})"
    warnings.warn(f"{problem}; loading images without the cache", UserWarning, stacklevel=3)


def cache_entry_path(
    root: str | Path,
    split: str,
    *,
    dataset_format: str = "auto",
    background: tuple[float, float, float] = (1.0, 1.0, 1.0),
    downscale: int = 1,
    cache_dir: str | Path | None = None,
) -> Path:
    """The folder :func:`cached_load_split` keeps ``split``'s entry in for these arguments (it may not
    exist yet).

    Raises:
        DatasetError: ``"auto"`` and the folder's format cannot be detected.
        ValueError: an unknown ``dataset_format``.
        OSError: a dataset file cannot be read.
    """
    root = Path(root)
    if dataset_format == "auto":
        dataset_format = detect_format(root)
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    fingerprint = split_fingerprint(root, split, dataset_format=dataset_format, memo_dir=cache_dir)
    key = cache_key(fingerprint, dataset_format, split, tuple(float(c) for c in background), downscale)
    return cache_dir / key


@dataclass(frozen=True)
class WarmedSplit:
    """One split after :func:`warm_cache`: its entry folder, whether it is there now and was before."""

    split: str
    entry: Path
    num_images: int
    bytes: int
    cached: bool
    was_cached: bool

    def line(self) -> str:
        size = f"{self.num_images} images, {self.bytes / 2**20:.1f} MB"
        if not self.cached:
            return f"{self.split}: {size}, NOT cached: {self.entry.parent} cannot be written"
        return f"{self.split}: {size} in {self.entry} ({'already cached' if self.was_cached else 'cached'})"


def _reporting(stream: ImageStream, split: str, skip: int, progress: ImageProgress | None) -> ImageStream:
    """``stream``, telling ``progress`` of each image once the build has taken it (written it) and asked
    for the next."""
    if progress is None:
        return stream

    def images() -> SplitImages:
        done = skip
        progress(split, done, stream.count)
        generator = stream.images
        while True:
            try:
                prepared = next(generator)
            except StopIteration as finished:
                return finished.value
            yield prepared
            done += 1
            progress(split, done, stream.count)

    return ImageStream(stream.count, images())


def warm_cache(
    root: str | Path,
    splits: tuple[str, ...] = ("train", "val", "test"),
    *,
    dataset_format: str = "auto",
    background: tuple[float, float, float] = (1.0, 1.0, 1.0),
    downscale: int = 1,
    cache_dir: str | Path | None = None,
    progress: ImageProgress | None = None,
) -> list[WarmedSplit]:
    """Put ``splits`` of a dataset into the image cache now (``nerf-lightning data cache``), so that
    training, testing and rendering with the same settings only memory-map them.

    The room the entries not there yet need is checked first (:func:`entry_bytes_estimate`): when the
    cache's file system has less free, nothing is decoded beyond the first image of each split.

    Raises:
        DiskFullError: the entries to build need more room than is free (naming the cache folder, the
            bytes needed and the bytes free).
        as :func:`cached_load_split`.
    """
    options: dict[str, Any] = {"dataset_format": dataset_format, "background": background,
                               "downscale": downscale, "cache_dir": cache_dir}
    entries = {split: cache_entry_path(root, split, **options) for split in splits}
    to_build = [split for split, entry in entries.items() if not (entry / MANIFEST_FILE).is_file()]
    if to_build:
        folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        needed = sum(entry_bytes_estimate(root, split, dataset_format=dataset_format, background=background,
                                          downscale=downscale) for split in to_build)
        free = free_bytes(folder)
        if free is not None and needed > free:
            raise DiskFullError(folder, needed=needed, needed_exact=False, free=free)
    warmed = []
    for split in splits:
        entry = entries[split]
        was_cached = split not in to_build
        scene = cached_load_split(root, split, **options, progress=progress)
        pixels = scene.images.pixels if isinstance(scene.images, PackedImages) else None
        size = int(pixels.numel()) if pixels is not None else sum(int(i.numel()) for i in scene.images)
        warmed.append(WarmedSplit(split, entry, len(scene.images), size, (entry / MANIFEST_FILE).is_file(),
                                  was_cached))
    return warmed


def entry_bytes_estimate(
    root: str | Path,
    split: str,
    *,
    dataset_format: str = "auto",
    background: tuple[float, float, float] = (1.0, 1.0, 1.0),
    downscale: int = 1,
) -> int:
    """The bytes of ``split``'s cache entry, estimated from its first image alone (only that one is
    decoded): its pixels (and alpha) times the number of images; the cameras and manifest are small.

    For a format without a stream in :data:`~nerf_lightning.scenes.loading.STREAMS`, 0 (not estimated).

    Raises:
        as :func:`~nerf_lightning.scenes.loading.load_split`.
    """
    root = Path(root)
    if dataset_format == "auto":
        dataset_format = detect_format(root)
    stream = STREAMS.get(dataset_format)
    if stream is None:
        return 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the loader's warnings are given when the split is loaded
        images = stream(root, split, background=tuple(float(c) for c in background), downscale=downscale)
        try:
            first = next(images.images)
        except StopIteration:
            return 0
        finally:
            images.images.close()
    return images.count * image_bytes(first)


# ----------------------------------------------------------------------------------------------- build


def _load_recording_warnings(load: Any) -> tuple[SceneSplit, list[str]]:
    """Run ``load``, re-emit its warnings as usual and return the UserWarning messages (for hits)."""
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scene = load()
    finally:
        for w in caught:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    return scene, _user_messages(caught)


def _user_messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


def _exists(path: Path) -> bool:
    try:
        path.stat()
    except OSError:  # missing, or a cache folder we may not look into
        return False
    return True
