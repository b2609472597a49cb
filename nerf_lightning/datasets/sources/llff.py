"""An LLFF capture as a source of ``nerf-lightning data convert``: which image folder, and the rows of
``poses_bounds.npy`` as OpenGL camera-to-world poses and intrinsics of those images.

:func:`read_llff` checks the capture exactly as the LLFF loader does
(:func:`nerf_lightning.scenes.formats.llff.scan_llff`) and returns a
:class:`~nerf_lightning.datasets.sources.frame.Source` before anything is written;
:mod:`nerf_lightning.datasets.convert` turns it into ``transforms.json`` and documents the conventions.
Unlike the loader it keeps the capture's world frame (no rescaling or recentring).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from nerf_lightning.datasets.sources.frame import Frame, Source
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.formats.llff import IMAGE_FOLDER, check_image_aspect, llff_to_opengl, scan_llff
from nerf_lightning.scenes.images import image_size
from nerf_lightning.scenes.problems import Problems

LLFF_TO_OPENGL_AXES = np.array(
    [[0.0, -1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
)
"""``P`` with OpenGL camera-to-world ``= LLFF camera-to-world @ P`` (``[col1, -col0, col2, col3]``)."""


def _llff_folders(root: Path) -> dict[int, Path]:
    """Downscale factor -> ``images/`` (1) or ``images_N/`` (``N``) folders of an LLFF capture."""
    folders: dict[int, Path] = {}
    for child in root.iterdir() if root.is_dir() else []:
        match = IMAGE_FOLDER.fullmatch(child.name)
        if match and child.is_dir():
            factor = int(match.group(1) or 1)
            if factor >= 1:
                folders[factor] = child
    return dict(sorted(folders.items()))


def _llff_factor(root: Path, images: Path | None) -> int:
    """The downscale factor of the image folder to reference (see :mod:`nerf_lightning.datasets.convert`)."""
    folders = _llff_folders(root)
    if images is None:
        if not folders:
            raise DatasetError(
                root / "images", "folder not found; expected the capture's images in images/ or images_N/"
            )
        return next(iter(folders))
    for factor, folder in folders.items():
        if folder.resolve() == images.resolve():
            return factor
    available = ", ".join(f"{f.name}/" for f in folders.values()) or "none"
    raise DatasetError(
        images,
        f"is not an image folder of the capture {root}; expected images/ or images_N/ in it "
        f"(available: {available})",
    )


def read_llff(root: Path, images: Path | None = None) -> Source:
    """Read and check an LLFF capture (see :mod:`nerf_lightning.datasets.convert`).

    Raises:
        DatasetError: what the LLFF loader would report for the capture and folder, in one line.
    """
    factor = _llff_factor(root, images)
    scan = scan_llff(root, factor, Problems())
    assert scan is not None  # strict: problems raise
    matrices = scan.array[:, :15].reshape(-1, 3, 5)
    hwf, bounds = matrices[:, :, 4], scan.array[:, 15:]
    poses = llff_to_opengl(matrices[:, :, :4])  # [N, 3, 4]
    frames: list[Frame] = []
    for index, path in enumerate(scan.files):
        width, height = image_size(path, file_for_errors=str(scan.source), frame=index)
        check_image_aspect(scan, index, width, height)
        _, full_w, focal = hwf[index]
        f = float(focal * width / full_w)
        pose = np.eye(4)
        pose[:3] = poses[index]
        frames.append(Frame(path, pose, {"fl_x": f, "fl_y": f, "cx": 0.5 * width, "cy": 0.5 * height,
                                         "w": width, "h": height}))
    details = {
        "bounds": {
            "near": float(bounds[:, 0].min()),
            "far": float(bounds[:, 1].max()),
            "per_frame": {
                frame.image: [float(near), float(far)]
                for frame, (near, far) in zip(frames, bounds, strict=True)
            },
        }
    }
    notes = [
        "The capture's world frame, origin and units are kept (applied_transform is the identity).",
        "transform_matrix columns are LLFF's [down, right, back, position] columns permuted to "
        "[right, up, back, position] = [col1, -col0, col2, col3].",
        f"Intrinsics are those of the images in {scan.folder.name}/: fl_x = fl_y = focal * w / W of "
        "poses_bounds.npy, cx = w / 2, cy = h / 2, as the LLFF loader computes them.",
        "The LLFF loader also rescales the capture (smallest near bound -> 1/0.75) and recentres it on "
        "the average camera; this file does not: the nerfstudio loader uses the poses as they are.",
        "bounds (near/far) are not read by nerf-lightning's nerfstudio loader, which derives the scene "
        "box from the cameras; for forward-facing captures the LLFF loader's depth-bounded box is "
        "usually the better fit (or set --data.scene_box).",
    ]
    return Source(
        source_format="llff",
        source=scan.source,
        images=scan.folder,
        frames=frames,
        camera_convention="LLFF camera-to-world columns [down, right, back, position]",
        axes_change=LLFF_TO_OPENGL_AXES,
        details=details,
        notes=notes,
    )
