"""``--format transforms``: a checkpoint's refined training poses as a nerfstudio ``transforms.json``.

A model trained with ``--model.camera_refinement`` holds one pose correction per training image
(:mod:`nerf_lightning.cameras.refinement`). This writes the training frames with their corrected
poses in the layout ``nerf-lightning data convert`` writes
(:func:`nerf_lightning.datasets.convert.build_transforms`): intrinsics ``fl_x, fl_y, cx, cy, w, h``
(plus ``k1, k2, p1, p2`` for distorted cameras) of the image files the frames name, at the top level
when shared, and ``frames`` sorted by ``file_path``, each with its 4x4 OpenGL camera-to-world
``transform_matrix``. The nerfstudio loader reads it back.

World frame: the dataset's own. A run trains in a normalised frame when its loader normalises the
capture (LLFF scales and recentres it) or with ``--data.normalise auto`` (the data module moves every
split; :mod:`nerf_lightning.scenes.training_frame`): both are composed into
:attr:`~nerf_lightning.scenes.scene.SceneSplit.world_scale` and ``world_transform`` of the data
module's splits, and the corrected poses are mapped back out through them, so they are comparable
with the dataset's poses (for LLFF: the ``poses_bounds.npy`` world, OpenGL camera axes, as ``data
convert`` writes it). Otherwise (Blender and nerfstudio datasets with ``normalise none``) the frame
is used as it is.

Images: ``file_path`` is relative to the output's folder, which the nerfstudio loader requires to
hold the images. When the dataset folder is not inside it, the training images are hard-linked (or
copied) into ``OUT_FOLDER/<dataset folder name>/`` as ``data convert`` does
(:mod:`nerf_lightning.datasets.image_placement`). Only the training frames are written; the loader's
split rule (every 8th frame test, another val) then applies to them, so list splits explicitly to
train on the file with other evaluation views. The file is written atomically, after the images.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.datasets.convert import CAMERA_CONVENTION, build_transforms, to_json
from nerf_lightning.datasets.image_placement import Placement, display_path, plan_placement
from nerf_lightning.datasets.sources.frame import Frame, Source
from nerf_lightning.export.common import ExportError
from nerf_lightning.files import atomic_write_text
from nerf_lightning.scenes.images import image_size
from nerf_lightning.scenes.scene import SceneSplit
from nerf_lightning.system.module import NerfModule

TOOL = "nerf-lightning export --format transforms"
FORMAT_VERSION = 1


@dataclass
class TransformsExport:
    """What :func:`export_transforms` wrote: the file, its content and where the images are."""

    path: Path
    transforms: dict[str, Any]
    placement: Placement


def dataset_world_poses(camera_to_world: Tensor, world_scale: float = 1.0,
                        world_transform: Tensor | None = None) -> np.ndarray:
    """``[N, 4, 4]`` float64 camera-to-world in the dataset's world of poses ``[N, 3, 4]`` in the training
    world, where a dataset point ``x`` is ``T[:, :3] @ (s * x) + T[:, 3]`` (``s = world_scale``, ``T =
    world_transform [3, 4]``, ``None``: the identity; the loader's normalisation and the data module's
    composed).

    Inverted: ``R = T3^-1 @ R_world`` and ``t = T3^-1 @ (t_world - T[:, 3]) / s``; the rotation part
    stays a rotation since ``T3`` is one (a recentring, an uprighting) and the scale applies to
    positions only.
    """
    poses = camera_to_world.detach().cpu().double().numpy()
    transform = np.eye(3, 4) if world_transform is None else world_transform.detach().cpu().double().numpy()
    inverse = np.linalg.inv(transform[:, :3])
    rotation = inverse @ poses[:, :, :3]
    position = np.einsum("ij,nj->ni", inverse, poses[:, :, 3] - transform[:, 3]) / world_scale
    out = np.tile(np.eye(4), (poses.shape[0], 1, 1))
    out[:, :3, :3], out[:, :3, 3] = rotation, position
    return out


def _intrinsics(split: SceneSplit, index: int, size: tuple[int, int]) -> dict[str, float | int]:
    """``fl_x, fl_y, cx, cy, w, h`` (and distortion) of training camera ``index`` for its image file of
    ``size`` ``(width, height)``: a loader's downscale (``--data.downscale``, LLFF's ``images_N``) is
    undone, so the values fit the file the frame names."""
    cameras = split.cameras
    width, height = int(cameras.width[index]), int(cameras.height[index])
    factor = max(1, round(size[0] / width))
    if size[0] // factor != width or size[1] // factor != height:
        raise ExportError(f"{split.names[index]}: the image file is {size[0]}x{size[1]} pixels, which no "
                          f"integer downscale makes the {width}x{height} the model trained on; expected "
                          "the dataset the run was trained on")
    values: dict[str, float | int] = {
        "fl_x": float(cameras.fx[index]) * factor, "fl_y": float(cameras.fy[index]) * factor,
        "cx": float(cameras.cx[index]) * factor, "cy": float(cameras.cy[index]) * factor,
        "w": size[0], "h": size[1],
    }
    distortion = cameras.distortion[index].tolist()
    if any(distortion):  # OpenCV's coefficients act on normalised coordinates: no scaling
        values.update(zip(("k1", "k2", "p1", "p2"), distortion, strict=True))
    return values


def refined_frames(model: NerfModule, datamodule: NerfDataModule, checkpoint: Path | str) -> list[Frame]:
    """One :class:`~nerf_lightning.datasets.sources.frame.Frame` per training image, with its corrected
    pose in the dataset's world frame (see the module docstring).

    Raises:
        ExportError: the model has no camera refinement, or its table does not fit the training split
            (one line naming ``checkpoint``).
    """
    refinement = model.camera_refinement
    if refinement is None:
        raise ExportError(f"{checkpoint}: the model has no camera refinement; expected a checkpoint of a "
                          "run trained with --model.camera_refinement (--format transforms writes its "
                          "refined poses)")
    if refinement.num_cameras != datamodule.num_train_images:  # loads the training split if needed
        raise ExportError(f"{checkpoint}: its camera refinement holds {refinement.num_cameras} corrections "
                          f"but the training split of {datamodule.root} has {datamodule.num_train_images} "
                          "images; expected the dataset the run was trained on")
    split = datamodule.splits["train"]
    corrected = refinement.corrected_poses(split.cameras.camera_to_world.to(refinement.corrections.device))
    poses = dataset_world_poses(corrected, split.world_scale, split.world_transform)
    root = Path(datamodule.root or ".")
    frames = []
    for index, name in enumerate(split.names):
        path = root / name
        size = image_size(path, file_for_errors=split.source, frame=index)
        frames.append(Frame(image=path, camera_to_world=poses[index],
                            intrinsics=_intrinsics(split, index, size)))
    return frames


@torch.no_grad()
def export_transforms(model: NerfModule, datamodule: NerfDataModule, out: Path, checkpoint: Path | str,
                      *, force: bool = False) -> TransformsExport:
    """Write the refined training poses of ``model`` to ``out`` (see the module docstring).

    Raises:
        ExportError: as :func:`refined_frames`.
        DatasetError: an image cannot be read, placed or resolved inside ``out``'s folder.
        FileExistsError: a different file is where an image would be placed and ``force`` is false.
    """
    frames = refined_frames(model, datamodule, checkpoint)
    root, folder = Path(datamodule.root or "."), out.parent
    folder.mkdir(parents=True, exist_ok=True)
    source = Source(source_format="nerf-lightning checkpoint", source=Path(checkpoint), images=root,
                    frames=frames, camera_convention=CAMERA_CONVENTION, axes_change=np.eye(4))
    placement = plan_placement([frame.image for frame in frames], root, folder, force=force,
                               folder_name=root.resolve().name or "images")
    placement.run()  # before the JSON, as data convert: an interrupted export is rerun as it was
    meta = build_transforms(source, folder, placement)
    conversion = meta.pop("conversion")
    split = datamodule.splits["train"]
    normalised = split.world_scale != 1.0 or split.world_transform is not None
    export = {
        "tool": TOOL,
        "version": FORMAT_VERSION,
        "checkpoint": str(checkpoint),
        "dataset": display_path(root, folder),
        "split": "train",
        "images": conversion["images"],
        "image_placement": conversion["image_placement"],
        "camera_convention": CAMERA_CONVENTION,
        "poses": "each training frame's camera-to-world [R | t] corrected by the checkpoint's camera "
                 "refinement to [R_delta @ R | t + u] (rotation about the camera centre, world axes)",
        "world_frame": ("the dataset's own: the training frame's normalisation (the loader's, and "
                        "data.normalise's: rotation, scale, recentring) was undone"
                        if normalised else "the dataset's own (the run trained in it)"),
    }
    meta = {"export": export, **meta}
    atomic_write_text(to_json(meta) + "\n", out, sync_dir=True)
    return TransformsExport(path=out, transforms=meta, placement=placement)
