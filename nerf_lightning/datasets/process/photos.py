"""The photos of ``data process SRC``: which files of the folder are photos, checked before any work.

Structure-from-motion with one shared camera needs every photo at the same size, and COLMAP would
only say so deep into feature extraction; an empty folder or a folder of other files would end in a
reconstruction of nothing. A photo that does not decode (truncated, empty, not an image at all) would
pass a header check and fail only when the dataset is written, after structure-from-motion. So every
photo is decoded once here, up front, and every problem is one line naming the folder or the file.
Only the folder itself is listed (not its subfolders): the photos of one capture.

Decoding is Pillow's, as the loaders and :mod:`.downscaled` do it later. A JPEG is decoded at 1/8 of
its size (``Image.draft``: the decoder still reads every byte of the compressed data, so a truncated
file fails the same way, but skips most of the inverse DCT), a PNG at full size (its decoder has no
cheaper mode, and PNGs are small next to phone JPEGs).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from nerf_lightning.scenes.errors import DatasetError

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png")
"""What the loaders decode (Pillow: PNG and JPEG); other files in SRC are ignored."""
MIN_PHOTOS = 3
"""Two views give no check of their relative pose; COLMAP needs more to map."""
EXPECTED = "expected a PNG or JPEG photo that decodes"
DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError)
"""What Pillow raises for a file it cannot decode (``UnidentifiedImageError`` is an ``OSError``)."""
SKIP_OPTION = "--skip_unreadable true"
"""How ``data process`` is told to leave undecodable photos out (named in the messages)."""


class UnreadablePhotoError(DatasetError):
    """A photo that cannot be decoded: the file is wrong, not the options, so a rerun needs other photos."""


def decode_problem(error: BaseException) -> str:
    """What a Pillow error says about a photo, for a message (``is truncated``, ``is not ...``)."""
    if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return f"cannot be read ({error.strerror})"
    if isinstance(error, UnidentifiedImageError):
        return "is not a PNG or JPEG image (Pillow does not recognise its content)"
    text = str(error)
    if "truncated" in text:  # Pillow: "image file is truncated (9 bytes not processed)"
        return "is truncated (the file ends before the image does)"
    return f"cannot be decoded ({text or type(error).__name__})"


def decode_photo(path: Path) -> tuple[tuple[int, int] | None, str | None]:
    """``((width, height), None)`` of a photo that decodes, else ``(None, what is wrong)``."""
    try:
        if path.stat().st_size == 0:
            return None, "is empty (0 bytes)"
        with Image.open(path) as image:
            size = image.size
            if image.format == "JPEG":
                image.draft(image.mode, (max(1, size[0] // 8), max(1, size[1] // 8)))
            image.load()
    except DECODE_ERRORS as error:
        return None, decode_problem(error)
    return size, None


def list_photos(src: Path, *, skip_unreadable: bool = False,
                warn: Callable[[str], None] = lambda line: None) -> list[Path]:
    """The photos of folder ``src`` in name order, each decoded once and all of one size.

    Args:
        src: the folder.
        skip_unreadable: leave out the photos that do not decode, with a ``warn`` line for each,
            instead of refusing the folder.
        warn: where those lines go.

    Raises:
        DatasetError: ``src`` does not exist or is not a folder, holds no photo (empty, or only other
            files), holds fewer than :data:`MIN_PHOTOS` (that decode, with ``skip_unreadable``), or its
            photos differ in size (one line each, naming the folder or a file).
        UnreadablePhotoError: a photo does not decode (without ``skip_unreadable``); the line names the
            first and counts the others.
    """
    if not src.exists():
        raise DatasetError(src, "no such file or folder; expected a folder of photos (.jpg, .jpeg, .png)")
    if not src.is_dir():
        raise DatasetError(src, "not a folder; expected a folder of photos (.jpg, .jpeg, .png)")
    files = sorted(p for p in src.iterdir() if p.is_file() and not p.name.startswith("."))
    photos = [p for p in files if p.suffix.lower() in PHOTO_SUFFIXES]
    if not photos:
        what = "is empty" if not files else f"holds {len(files)} file(s) but no photo"
        raise DatasetError(src, f"{what}; expected photos (.jpg, .jpeg, .png) of the scene")
    if len(photos) < MIN_PHOTOS:
        raise DatasetError(src, f"holds {len(photos)} photo(s); expected at least {MIN_PHOTOS} "
                                "overlapping photos")
    sizes: dict[tuple[int, int], Path] = {}
    readable, unreadable = [], []
    for photo in photos:
        size, problem = decode_photo(photo)
        if size is None:
            unreadable.append((photo, problem))
            continue
        readable.append(photo)
        sizes.setdefault(size, photo)
    if unreadable and not skip_unreadable:
        (first, problem), others = unreadable[0], unreadable[1:]
        names = ", ".join(p.name for p, _ in others[:3]) + (", ..." if len(others) > 3 else "")
        more = (f"; {len(others)} more of the {len(photos)} photos {'does' if len(others) == 1 else 'do'} "
                f"not decode either: {names}" if others else "")
        raise UnreadablePhotoError(first, f"{problem}; {EXPECTED}{more} ({SKIP_OPTION} leaves such photos "
                                          "out)")
    for photo, problem in unreadable:
        warn(f"nerf-lightning: warning: {photo}: {problem}; skipped ({SKIP_OPTION})")
    if len(readable) < MIN_PHOTOS:
        raise DatasetError(src, f"holds {len(readable)} photo(s) that decode ({len(unreadable)} skipped); "
                                f"expected at least {MIN_PHOTOS} overlapping photos")
    if len(sizes) > 1:
        (first_size, a), (second_size, b) = list(sizes.items())[:2]
        raise DatasetError(
            src,
            f"photos differ in size ({a.name} is {first_size[0]}x{first_size[1]}, "
            f"{b.name} is {second_size[0]}x{second_size[1]}); "
            "expected photos of one camera at one size (one shared camera is estimated)",
        )
    return readable
