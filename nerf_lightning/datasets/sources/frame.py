"""What a source reader of ``nerf-lightning data convert`` returns: the frames of a capture with OpenGL
camera-to-world poses and intrinsics, checked, before anything is written
(:mod:`nerf_lightning.datasets.sources.llff`, :mod:`nerf_lightning.datasets.sources.colmap`;
:mod:`nerf_lightning.datasets.convert` writes them as ``transforms.json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Frame:
    """One image of the conversion.

    Attributes:
        image: the image file.
        camera_to_world: ``[4, 4]`` OpenGL camera-to-world in the *source's* world.
        intrinsics: ``fl_x, fl_y, cx, cy, w, h`` and, for distorted models, the coefficients and
            ``camera_model``.
        extra: other per-frame keys to write (e.g. ``colmap_im_id``).
    """

    image: Path
    camera_to_world: np.ndarray
    intrinsics: dict[str, float | int | str]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Source:
    """A source read and checked, before anything is written.

    Attributes:
        source_format: ``"colmap-binary"``, ``"colmap-text"`` or ``"llff"``.
        source: the COLMAP model folder or ``poses_bounds.npy``.
        images: the image folder.
        frames: one per image, in the source's order.
        camera_convention: the source's camera axes, in words.
        axes_change: ``[4, 4]`` ``P`` with OpenGL camera-to-world ``=`` source camera-to-world ``@ P``.
        details: further ``conversion`` entries (``cameras`` or ``bounds``); ``bounds.per_frame`` is
            keyed by image path until the output paths are known.
        notes: sentences for ``conversion.notes``.
    """

    source_format: str
    source: Path
    images: Path
    frames: list[Frame]
    camera_convention: str
    axes_change: np.ndarray
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
