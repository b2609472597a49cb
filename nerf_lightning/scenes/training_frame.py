"""``data.normalise auto``: the frame a capture is trained in, estimated once from its training split and
applied to every split.

Only cameras move (poses; depths in world units scale), never pixels, so the image cache is untouched.
The similarity's rules (:mod:`.normalise`) are chosen per capture:

* **normalised by its loader** (LLFF: ``world_scale`` / ``world_transform`` set): left exactly as
  loaded. The loader applies the forward-facing rules below to *all* the capture's cameras; applying
  them again to the training cameras alone would move it by the few percent those differ.
* **forward-facing** (a split with depth bounds, or cameras that all look one way:
  :func:`~.normalise.is_forward_facing`): ``average`` orientation, ``poses`` centre, ``depth_bounds``
  scale. Without depth bounds the scale is kept (``none``): the mean camera position is no content
  centre, so no camera distance measures the scene.
* **inward** (object and 360-degree captures): ``vertical`` orientation, ``points`` centre when sparse
  points are given (``focus`` otherwise), ``camera_distance`` scale (4). A Blender-layout rig is a
  fixed point.

The transform is kept in each moved split's ``world_scale`` / ``world_transform`` (composed after the
loader's own, as LLFF's), which is what the exports read to map poses back to the file's coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from nerf_lightning.core.types import SceneBox
from nerf_lightning.scenes.bounds import box_holds, cube_about
from nerf_lightning.scenes.normalise import (
    Centre,
    Normalisation,
    Orientation,
    Scale,
    Similarity,
    is_forward_facing,
    normalising_similarity,
)
from nerf_lightning.scenes.scene import SceneSplit


@dataclass(frozen=True)
class TrainingFrame:
    """A capture's normalisation and the rules it was estimated with.

    Attributes:
        normalisation: the estimate; its ``transform`` maps the loader's coordinates (the file's, or
            LLFF's normalised ones) to the training frame (the identity when ``by_loader``).
        forward_facing: whether the forward-facing rules were used (module docstring).
        orientation, centre, scale: the rules used.
        by_loader: the loader had normalised the capture already; the estimate is kept for the record
            only, and the transform is the identity.
    """

    normalisation: Normalisation
    forward_facing: bool
    orientation: Orientation
    centre: Centre
    scale: Scale
    by_loader: bool = False

    @property
    def transform(self) -> Similarity:
        return self.normalisation.transform

    def content_centre(self) -> Tensor | None:
        """``[3]`` float64 centre of the content in the training frame, for inward rigs: the estimated
        centre moved (the origin, unless the translation snapped to none). ``None`` for forward-facing
        rigs, whose content lies in front of the cameras, not at their mean position: the caller takes
        the middle of the content box (the frustum box between the depth bounds) instead."""
        if self.forward_facing:
            return None
        return self.transform.apply_points(self.normalisation.centre.double())

    def record(self) -> dict[str, Any]:
        """JSON-ready description: the transform (``matrix`` 4x4 row-major, loader coordinates to training
        coordinates) and the statistics it came from."""
        n = self.normalisation
        return {
            "matrix": n.transform.matrix().tolist(),
            "transform": n.transform.as_dict(),
            "rules": {"orientation": self.orientation, "centre": self.centre, "scale": self.scale},
            "forward_facing": self.forward_facing,
            "by_loader": self.by_loader,
            "up": n.up.tolist(),
            "centre": n.centre.tolist(),
            "centre_from": n.centre_from,
            "camera_distance": n.camera_distance,
            "snapped": list(n.snapped),
        }


def estimate_training_frame(train: SceneSplit, points: Tensor | None = None) -> TrainingFrame:
    """The training frame of a capture from its training split (module docstring for the rules).

    Args:
        train: the training split as loaded.
        points: ``[P, 3]`` sparse points in the split's coordinates, or ``None`` (no loader gives them yet).
    """
    poses = train.cameras.camera_to_world
    forward = train.depth_range is not None or is_forward_facing(poses)
    orientation: Orientation
    centre: Centre
    scale: Scale
    if forward:
        orientation, centre = "average", "poses"
        scale = "depth_bounds" if train.depth_range is not None else "none"
    else:
        orientation, scale = "vertical", "camera_distance"
        centre = "points" if points is not None else "focus"
    bounds = None if train.depth_range is None else torch.tensor(train.depth_range, dtype=torch.float64)
    normalisation = normalising_similarity(poses, points=points, depth_bounds=bounds, orientation=orientation,
                                           centre=centre, scale=scale)
    by_loader = train.world_transform is not None or train.world_scale != 1.0
    if by_loader:
        normalisation = replace(normalisation, transform=Similarity.identity())
    return TrainingFrame(normalisation, forward, orientation, centre, scale, by_loader)


def moved_split(split: SceneSplit, transform: Similarity) -> SceneSplit:
    """``split`` in the frame ``transform`` maps to: poses moved, ``depth_range`` scaled, ``world_scale`` and
    ``world_transform`` composed after the loader's. The split itself under the identity (nothing
    changes, not even rounding); images, masks and alphas are shared, not copied."""
    if transform.is_identity:
        return split
    cameras = replace(split.cameras, camera_to_world=transform.apply_poses(split.cameras.camera_to_world))
    depth_range = None
    if split.depth_range is not None:
        depth_range = (split.depth_range[0] * transform.scale, split.depth_range[1] * transform.scale)
    loader = Similarity.identity()
    if split.world_transform is not None or split.world_scale != 1.0:
        matrix = (torch.eye(3, 4, dtype=torch.float64) if split.world_transform is None
                  else split.world_transform.detach().cpu().double())
        loader = Similarity(matrix[:, :3].contiguous(), matrix[:, 3].contiguous(), float(split.world_scale))
    world = loader.then(transform)
    world_transform = torch.cat([world.rotation, world.translation[:, None]], dim=1)
    return replace(split, cameras=cameras, depth_range=depth_range, world_scale=world.scale,
                   world_transform=world_transform)


@dataclass(frozen=True)
class DeclaredExtent:
    """What a capture's instant-ngp ``aabb_scale`` says, read in the training frame.

    It never decides alone: only a declaration whose box holds every training camera and the content
    cube is used at all (:attr:`consistent`); then it may set the far plane and give hints.

    Attributes:
        aabb_scale: the declared value.
        box: instant-ngp's reconstruction box (``NgpPlacement.box``), moved into the training frame.
        holds_cameras: whether it holds every training camera.
        holds_content: whether it holds the content cube.
        content_ratio: half-size of instant-ngp's unit cube (its content region when ``scale`` and
            ``offset`` are honest) over the content cube's half-size.
    """

    aabb_scale: float
    box: SceneBox
    holds_cameras: bool
    holds_content: bool
    content_ratio: float

    @property
    def consistent(self) -> bool:
        return self.holds_cameras and self.holds_content


def declared_extent(split: SceneSplit, transform: Similarity,
                    content_cube: SceneBox) -> DeclaredExtent | None:
    """The declared extent of ``split`` in the training frame, ``None`` without an ``aabb_scale``.

    Args:
        split: the training split in the training frame (:func:`moved_split`; its ``ngp`` stays in the
            file's coordinates).
        transform: loader coordinates to the training frame.
        content_cube: the content cube in the training frame.
    """
    if split.ngp is None or split.ngp.aabb_scale is None:
        return None
    box = transform.apply_box(split.ngp.box())
    unit = transform.apply_box(split.ngp.unit_cube())
    centres = split.cameras.centers.double()
    unit_half = 0.5 * float((unit.upper - unit.lower).max())
    content_half = 0.5 * float((content_cube.upper - content_cube.lower).max())
    holds_content = box_holds(box, torch.stack([content_cube.lower, content_cube.upper]))
    return DeclaredExtent(split.ngp.aabb_scale, box, box_holds(box, centres), holds_content,
                          unit_half / content_half if content_half > 0 else float("inf"))


def content_cube_about(centre: Tensor | None, content: SceneBox) -> tuple[Tensor, SceneBox]:
    """The content centre ``[3]`` (``centre``, or the middle of ``content`` when ``None``) and the
    smallest cube about it holding ``content``."""
    middle = 0.5 * (content.lower.double() + content.upper.double()) if centre is None else centre.double()
    return middle, cube_about(middle, content)
