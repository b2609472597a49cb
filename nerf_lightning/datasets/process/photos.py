"""The photos of ``data process SRC``: which files of the folder are photos, checked before any work.

Structure-from-motion with one shared camera needs every photo at the same size, and COLMAP would
only say so deep into feature extraction; an empty folder or a folder of other files would end in a
reconstruction of nothing. So every problem is found here, up front, as one line naming the folder or
the file. Only the folder itself is listed (not its subfolders): the photos of one capture.
"""

from __future__ import annotations

from pathlib import Path

from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.images import image_size

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")
"""What the loaders decode (Pillow: PNG and JPEG); other files in SRC are ignored."""


def list_photos(src: Path) -> list[Path]:
    """The photos of folder ``src`` in name order, each readable and all of one size.

    Raises:
        DatasetError: ``src`` is not a folder, holds no photo (empty, or only other files), a photo
            cannot be read, or photos differ in size (one line each, naming the folder or file).
    """
    if not src.is_dir():
        raise DatasetError(src, "not a folder; expected a folder of photos (.jpg, .jpeg, .png)")
    files = sorted(p for p in src.iterdir() if p.is_file() and not p.name.startswith("."))
    photos = [p for p in files if p.suffix.lower() in PHOTO_SUFFIXES]
    if not photos:
        what = "is empty" if not files else f"holds {len(files)} file(s) but no photo"
        raise DatasetError(src, f"{what}; expected photos (.jpg, .jpeg, .png) of the scene")
    if len(photos) < 3:  # two views give no check of their relative pose; COLMAP needs more to map
        raise DatasetError(src, f"holds {len(photos)} photo(s); expected at least 3 overlapping photos")
    sizes: dict[tuple[int, int], Path] = {}
    for photo in photos:
        size = image_size(photo, file_for_errors=str(src), frame=photo.name)
        sizes.setdefault(size, photo)
    if len(sizes) > 1:
        (first, a), (second, b) = list(sizes.items())[:2]
        raise DatasetError(
            src,
            f"photos differ in size ({a.name} is {first[0]}x{first[1]}, "
            f"{b.name} is {second[0]}x{second[1]}); "
            "expected photos of one camera at one size (one shared camera is estimated)",
        )
    return photos
