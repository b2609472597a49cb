"""Content fingerprints of datasets: sha256 over the pose files and the images they reference.

:func:`dataset_fingerprint` identifies a whole dataset folder (recorded in each run's ``run.json``);
:func:`split_fingerprint` covers what one split is loaded from (part of the image-cache key). Both
hash, in sorted order of their paths relative to the dataset folder, each file's path, size and bytes
(streamed in 1 MiB chunks): changing, adding, removing or renaming any pose file or referenced image
changes the fingerprint; other files in the folder do not matter. Nothing is decoded, and malformed
metadata is hashed as bytes without complaint (the loaders report problems, not this module).

Files per format:

* ``blender``: every ``transforms_*.json`` (for a split: ``transforms_{split}.json``) and each frame's
  ``file_path``, or ``file_path + ".png"`` when only that exists, as the loader resolves them;
* ``nerfstudio``: ``transforms.json``, each frame's ``file_path`` and ``mask_path`` (masks are
  inputs of the split as much as its images) and its downscaled copies ``images_<k>/<file name>``
  where they exist (the loader may read them instead);
* ``llff``: ``poses_bounds.npy`` and the ``.jpg``/``.jpeg``/``.png`` files of ``images/`` and every
  ``images_<k>/`` folder.

Referenced images that do not exist are hashed as missing (by path), so that an image appearing
later changes the fingerprint too.

Each file's sha256 comes from :class:`~nerf_lightning.files.DigestMemo`: read once, then remembered
while the file's size, mtime, ctime, inode and device stay the same, in this process and, with a
``memo_dir`` (the image cache's folder), on disk for later runs. The module docstring of
:mod:`nerf_lightning.files.digests` says what that trusts.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from nerf_lightning.files import DigestMemo
from nerf_lightning.scenes.formats.llff import IMAGE_FOLDER, IMAGE_SUFFIXES, POSES_FILE
from nerf_lightning.scenes.loading import DETECTION_MARKERS, LOADERS, detect_format

_FINGERPRINT_VERSION = b"nerf-lightning dataset fingerprint v1\n"


def _relative_name(root: Path, path: str) -> str:
    """``path`` (relative to ``root``) normalised to a posix path, as the loaders name images."""
    return Path(os.path.relpath(os.path.normpath(root / path), os.path.normpath(root))).as_posix()


def _frame_paths(meta: Any, fields: tuple[str, ...] = ("file_path",)) -> list[tuple[str, str]]:
    """``(field, path)`` of the string ``fields`` values of a parsed transforms file; malformed parts are
    skipped."""
    frames = meta.get("frames") if isinstance(meta, dict) else None
    if not isinstance(frames, list):
        return []
    return [
        (field, frame[field])
        for frame in frames
        for field in fields
        if isinstance(frame, dict) and isinstance(frame.get(field), str) and frame[field]
    ]


def _transforms_files(
    root: Path, metadata: list[Path], try_png: bool, fields: tuple[str, ...] = ("file_path",)
) -> dict[str, Path | None]:
    """Metadata files plus the images their frames reference: relative name -> path (``None``: missing)."""
    files: dict[str, Path | None] = {}
    for source in metadata:
        files[source.name] = source if source.is_file() else None
        if not source.is_file():
            continue
        try:
            meta = json.loads(source.read_bytes())
        except (ValueError, UnicodeDecodeError):
            continue  # hashed as bytes; the loader reports the problem
        for field, value in _frame_paths(meta, fields):
            candidates = [value, value + ".png"] if try_png and field == "file_path" else [value]
            chosen = next((c for c in candidates if (root / c).is_file()), None)
            if chosen is None:
                files.setdefault(_relative_name(root, value), None)
            else:
                files[_relative_name(root, chosen)] = root / chosen
    return files


def _with_copies(root: Path, files: dict[str, Path | None]) -> dict[str, Path | None]:
    """``files`` plus the nerfstudio loader's downscaled copies of the images that exist
    (:func:`~nerf_lightning.scenes.formats.transforms_json.downscaled_copy`); a dataset without
    ``images_<k>`` folders keeps the fingerprint it had before copies were read."""
    folders = [f for f in (sorted(root.iterdir()) if root.is_dir() else [])
               if (m := IMAGE_FOLDER.fullmatch(f.name)) and m.group(1) and f.is_dir()]
    copies: dict[str, Path | None] = {}
    for path in (p for p in files.values() if p is not None and p.suffix.lower() != ".json"):
        for folder in folders:
            if (folder / path.name).is_file():
                copies[f"{folder.name}/{path.name}"] = folder / path.name
    return {**files, **copies}


def _llff_files(root: Path) -> dict[str, Path | None]:
    poses = root / POSES_FILE
    files: dict[str, Path | None] = {POSES_FILE: poses if poses.is_file() else None}
    folders = sorted(root.iterdir()) if root.is_dir() else []
    for folder in (f for f in folders if IMAGE_FOLDER.fullmatch(f.name) and f.is_dir()):
        for image in folder.iterdir():
            if image.suffix.lower() in IMAGE_SUFFIXES and image.is_file():
                files[f"{folder.name}/{image.name}"] = image
    return files


def _input_files(root: Path, dataset_format: str, split: str | None) -> dict[str, Path | None]:
    if dataset_format == "blender":
        if split is not None:
            metadata = [root / f"transforms_{split}.json"]
        else:
            metadata = sorted(root.glob("transforms_*.json"))
        return _transforms_files(root, metadata, try_png=True)
    if dataset_format == "nerfstudio":
        return _with_copies(root, _transforms_files(root, [root / DETECTION_MARKERS["nerfstudio"]],
                                                    try_png=False, fields=("file_path", "mask_path")))
    if dataset_format == "llff":
        return _llff_files(root)
    known = ", ".join(["auto", *LOADERS])
    raise ValueError(f"unknown dataset_format {dataset_format!r}; expected one of: {known}")


def _fingerprint(root: Path, dataset_format: str, split: str | None, memo_dir: Path | None) -> str:
    files = _input_files(root, dataset_format, split)
    digest = hashlib.sha256(_FINGERPRINT_VERSION)
    with DigestMemo(memo_dir, scope=root) as memo:
        for name in sorted(files):
            path = files[name]
            encoded = name.encode("utf-8", "surrogateescape")
            digest.update(len(encoded).to_bytes(8, "little") + encoded)
            if path is None:
                digest.update(b"missing\n")
                continue
            size, sha256 = memo.digest(path)
            digest.update(size.to_bytes(8, "little") + bytes.fromhex(sha256))
    return digest.hexdigest()


def dataset_fingerprint(
    root: str | Path, *, dataset_format: str = "auto", memo_dir: str | Path | None = None
) -> str:
    """sha256 hex digest of a dataset folder's pose/metadata files and every image they reference.

    Args:
        root: the dataset folder.
        dataset_format: a key of :data:`~nerf_lightning.scenes.loading.LOADERS`, or ``"auto"``.
        memo_dir: where file digests are remembered between runs (the image cache's folder); ``None``:
            only within this process.

    Raises:
        DatasetError: ``"auto"`` and the folder's format cannot be detected.
        ValueError: an unknown ``dataset_format``.
        OSError: a file cannot be read.
    """
    root = Path(root)
    if dataset_format == "auto":
        dataset_format = detect_format(root)
    return _fingerprint(root, dataset_format, None, None if memo_dir is None else Path(memo_dir))


def split_fingerprint(
    root: str | Path, split: str, *, dataset_format: str = "auto", memo_dir: str | Path | None = None
) -> str:
    """sha256 hex digest of the files that ``split`` of a dataset is loaded from.

    For Blender that is ``transforms_{split}.json`` and its images; for nerfstudio and LLFF, whose
    split assignment depends on the whole capture, it is :func:`dataset_fingerprint`.

    Raises:
        as :func:`dataset_fingerprint`.
    """
    root = Path(root)
    if dataset_format == "auto":
        dataset_format = detect_format(root)
    split_or_all = split if dataset_format == "blender" else None
    return _fingerprint(root, dataset_format, split_or_all, None if memo_dir is None else Path(memo_dir))
