"""Whether a path is something ``data process`` turns into a dataset (the pipeline's ``process`` stage).

A folder that already holds a dataset (a marker file of a loader: ``transforms.json``,
``transforms_train.json``, ``poses_bounds.npy``) is a dataset, whatever else it holds: it is read
as it is, never processed again. A folder with photos and no marker, or a video file, is a capture.
"""

from __future__ import annotations

from pathlib import Path

from nerf_lightning.datasets.process.photos import PHOTO_SUFFIXES
from nerf_lightning.datasets.process.video import VIDEO_SUFFIXES
from nerf_lightning.scenes.loading import DETECTION_MARKERS


def needs_processing(path: Path) -> str | None:
    """``"video"``, ``"photos"`` (a folder of photos with no dataset) or ``None`` (anything else: a
    dataset, a missing path, an empty folder)."""
    if path.is_file():
        return "video" if path.suffix.lower() in VIDEO_SUFFIXES else None
    if not path.is_dir() or any((path / marker).is_file() for marker in DETECTION_MARKERS.values()):
        return None
    photos = (p for p in path.iterdir() if p.suffix.lower() in PHOTO_SUFFIXES and p.is_file())
    return "photos" if next(photos, None) is not None else None
