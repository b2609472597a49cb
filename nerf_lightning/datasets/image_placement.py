"""Putting a conversion's images inside ``DST``: ``nerf-lightning data convert SRC DST`` into another folder.

The nerfstudio loader reads only images inside its dataset folder. When the source's image folder is
already inside ``DST`` (``DST`` is the capture or one of its ancestors) the images are referenced in
place and nothing is written. Otherwise each image goes to ``DST/<name of the image folder>/<image
path relative to that folder>`` (``images_8/IMG_4026.png`` stays ``images_8/IMG_4026.png``), so the
frames read exactly as after an in-place conversion:

* as a hard link where the filesystem allows it (no copy of the bytes; the source may be read-only,
  since a link only writes to ``DST``), else as a copy; ``copy=True`` always copies (to edit the
  images in ``DST`` without changing the source's, which a hard link shares);
* atomically (:mod:`nerf_lightning.files`): linked or copied to a temporary name in the same folder,
  then renamed, so an interrupted run leaves no half-written image under a real name (a hidden
  temporary ``.NAME.tmp-*`` file at most, which nothing reads);
* never over a different file unless ``force``: an existing file that is the source's own inode, or
  has the same bytes, is kept as it is (reruns are cheap); any other file (or a symbolic link) at a
  target is refused, before anything is written, naming it.

Placement happens before ``transforms.json`` is written, so a rerun after an interruption is not
refused for an existing ``transforms.json`` and reuses what was placed.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nerf_lightning.files import DiskFullError, atomic_path, atomic_write
from nerf_lightning.scenes.errors import DatasetError

_CHUNK = 1 << 20
IN_PLACE, LINKED, COPIED = "in place", "linked", "copied"


def images_inside(folder: Path, dst: Path) -> bool:
    """Whether the image folder is inside ``dst`` (symbolic links resolved), i.e. nothing is placed."""
    return folder.resolve().is_relative_to(dst.resolve())


def display_path(path: Path, dst: Path) -> str:
    """``path`` relative to ``dst`` when inside it, else absolute (``/`` separated): a path that climbs
    out of ``DST`` with ``..`` would only stay right while both folders stay where they are."""
    real, root = path.resolve(), dst.resolve()
    return Path(os.path.relpath(real, root)).as_posix() if real.is_relative_to(root) else real.as_posix()


@dataclass
class Placement:
    """Where a conversion's images are in ``DST`` and how they got there.

    Attributes:
        source_folder: the source's image folder.
        folder: the image folder inside ``DST`` the frames reference.
        targets: source image -> the file the frame references (the image itself when in place).
        in_place: the images are referenced where they are; nothing is placed.
        linked, copied: images in ``DST`` that are hard links of / copies of the source's (reused
            ones included); ``reused``: those of them already there, left untouched.
        link_error: why a hard link failed, when an image was copied for want of one.
    """

    source_folder: Path
    folder: Path
    targets: dict[Path, Path]
    in_place: bool = False
    linked: int = 0
    copied: int = 0
    reused: int = 0
    link_error: str | None = None
    _todo: dict[Path, Path] = field(default_factory=dict, repr=False)

    @property
    def mode(self) -> str:
        """``"in place"``, ``"linked"``, ``"copied"`` or ``"linked and copied"``."""
        if self.in_place:
            return IN_PLACE
        return COPIED if not self.linked else LINKED if not self.copied else f"{LINKED} and {COPIED}"

    def record(self, dst: Path) -> dict[str, Any]:
        """The ``conversion.image_placement`` entry of ``transforms.json``."""
        return {
            "mode": self.mode,
            "from": display_path(self.source_folder, dst),
            "count": self.linked + self.copied,
            "linked": self.linked,
            "copied": self.copied,
            "reused": self.reused,
        }

    def describe(self) -> str:
        """Words for the command's output line."""
        if self.in_place:
            return f"images referenced in place in {self.source_folder}"
        counts = [f"{n} {how}" for n, how in ((self.linked, "hard-linked"), (self.copied, "copied")) if n]
        text = f"images placed in {self.folder} from {self.source_folder}: {' and '.join(counts)}"
        text += f" ({self.reused} already there)" if self.reused else ""
        return text + (f"; hard links failed ({self.link_error}), copied instead" if self.link_error else "")

    def run(self, *, copy: bool = False) -> Placement:
        """Link or copy the planned images (see the module docstring), counting what was done.

        Raises:
            DatasetError: an image could not be written (one line, naming it).
            DiskFullError: the disk (or quota) is full (one line: the image, the bytes needed and free).
        """
        links = not copy
        for source, target in self._todo.items():
            try:
                if links:
                    try:
                        _link(source, target)
                        self.linked += 1
                        continue
                    except OSError as error:  # another filesystem, no link support, not allowed: copy
                        self.link_error = self.link_error or str(error.strerror or error)
                        links = error.errno != errno.EXDEV  # across filesystems every link would fail
                _copy(source, target)
                self.copied += 1
            except DiskFullError:  # one line of its own: the image, the bytes it needs, the bytes free
                raise
            except OSError as error:
                raise DatasetError(
                    target,
                    f"cannot be written from {source} ({error.strerror or error}); expected a writable DST",
                ) from None
        self._todo = {}
        return self


def plan_placement(
    images: list[Path], source_folder: Path, dst: Path, *, copy: bool = False, force: bool = False,
    folder_name: str | None = None,
) -> Placement:
    """Where each image goes (see the module docstring), checked before anything is written.

    Args:
        images: the source images, each inside ``source_folder``.
        source_folder: the source's image folder.
        dst: the output folder.
        copy: copies are wanted: a target that is a hard link of its source is replaced by a copy.
        force: a different existing file at a target is replaced rather than refused.
        folder_name: the image folder's name in ``dst`` (default: the source folder's name);
            ``data process`` places any folder of photos as ``DST/images``.

    Raises:
        DatasetError: an image outside ``source_folder``, or a target that resolves outside ``dst``
            or is a folder.
        FileExistsError: a target holds another file and ``force`` is false (one line, naming it).
    """
    if images_inside(source_folder, dst):
        return Placement(source_folder, source_folder, {image: image for image in images}, in_place=True)
    folder = dst / (folder_name or source_folder.resolve().name or "images")
    placement = Placement(source_folder, folder, {})
    conflicts: list[tuple[Path, Path]] = []
    for image in images:
        relative = Path(os.path.relpath(image, source_folder))
        if relative.parts[:1] == ("..",):
            raise DatasetError(image, f"is outside the image folder {source_folder}; expected an image in it")
        target = folder / relative
        # The folder, not the file: a link at the target itself is replaced, but a link on the way (e.g.
        # DST/images -> elsewhere) would put the image outside DST.
        if not target.parent.resolve().is_relative_to(dst.resolve()):
            raise DatasetError(target, f"resolves outside {dst}; expected a place for the image inside DST")
        placement.targets[image] = target
        kept = _identical(image, target)
        if (kept == LINKED and not copy) or kept == COPIED:
            placement.reused += 1
            placement.linked += kept == LINKED
            placement.copied += kept == COPIED
            continue
        if kept is None and os.path.lexists(target):
            if target.is_dir() and not target.is_symlink():
                raise DatasetError(target, f"is a folder; expected the image {image} or nothing there")
            conflicts.append((image, target))
        placement._todo[image] = target
    if conflicts and not force:
        image, target = conflicts[0]
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise FileExistsError(
            f"{target}: already exists and differs from {image}{more}; pass --force to replace it"
        )
    return placement


# ------------------------------------------------------------------------------------------------ files


def _identical(source: Path, target: Path) -> str | None:
    """:data:`LINKED` if ``target`` is ``source``'s inode, :data:`COPIED` if it is a regular file with the
    same bytes, ``None`` otherwise (absent, a symbolic link, another file). A link at the target is never
    kept: the loader resolves links and would refuse one pointing outside ``DST``."""
    try:
        found = target.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(found.st_mode):
        return None
    wanted = source.stat()
    if (found.st_dev, found.st_ino) == (wanted.st_dev, wanted.st_ino):
        return LINKED
    if found.st_size != wanted.st_size:
        return None
    with source.open("rb") as a, target.open("rb") as b:
        while True:
            chunk = a.read(_CHUNK)
            if chunk != b.read(_CHUNK):
                return None
            if not chunk:
                return COPIED


def _link(source: Path, target: Path) -> None:
    """Hard-link ``source`` at ``target`` (a link under a temporary name, renamed onto ``target``)."""
    with atomic_path(target, fsync=False) as temporary:  # nothing to flush: the bytes are the source's
        os.link(source, temporary)


def _copy(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` atomically, flushed to disk before the rename (mode 0666 less the
    umask: the source's read-only mode is not copied, so the copy can be replaced and edited)."""
    with atomic_write(target, size=source.stat().st_size) as out, source.open("rb") as data:
        shutil.copyfileobj(data, out, _CHUNK)
