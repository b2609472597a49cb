"""Where a scene is: its box, the pixel footprint at its content, and the near and far planes of its rays.

One pure function of the training split, :func:`place_scene`, so the rule is read in one place and
``NerfDataModule.setup`` only stores what it returns. The box always comes from the training cameras
(or an explicit one): a test or validation view never moves it.

Without a training frame (``normalise="none"``) the box is the content's as derived from the cameras
(LLFF: the training frustums between the depth bounds), grown to hold the cameras when the scene is
unbounded. With one (``normalise="auto"``) the unbounded inner region is a cube about the content centre
(:func:`~nerf_lightning.scenes.bounds.inner_cube`), the near plane comes from the content alone and a
consistent declared ``aabb_scale`` may shorten the far plane; it never sets the box.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from lightning.pytorch.utilities import rank_zero_info

from nerf_lightning.core.types import SceneBox
from nerf_lightning.scenes.bounds import (
    box_around_cameras,
    far_through_box,
    inner_cube,
    min_near_from_cameras,
    pixel_footprint,
    scene_box_from_cameras,
    scene_box_from_frustums,
)
from nerf_lightning.scenes.scene import SceneSplit
from nerf_lightning.scenes.training_frame import (
    DeclaredExtent,
    TrainingFrame,
    content_cube_about,
    declared_extent,
)

BOUNDED_HINT_AABB_SCALE = 2.0
"""A consistent declared ``aabb_scale`` at most this says the capture is bounded (a hint, logged)."""
UNBOUNDED_HINT_AABB_SCALE = 8.0
"""A consistent declared ``aabb_scale`` at least this says the capture is unbounded (a hint, logged)."""
CONTENT_RATIO_HINT = 4.0
"""instant-ngp's unit cube more than this times larger or smaller than the content cube is logged."""


@dataclass(frozen=True)
class ScenePlacement:
    """What :func:`place_scene` decided.

    Attributes:
        scene_box: the box rays are clipped to (bounded) or the inner region a contraction keeps at full
            resolution (unbounded), in the coordinates the scene trains in.
        pixel_footprint: the width of one training pixel at the content (before an unbounded box grows
            around the cameras); a field sizes its finest detail from it.
        min_near: the nearest a ray may start.
        far: how far unbounded rays run; ``None`` for a bounded scene (rays end at the box).
        declared: instant-ngp's declared extent where it was found consistent (training frame only).
    """

    scene_box: SceneBox
    pixel_footprint: float
    min_near: float
    far: float | None
    declared: DeclaredExtent | None


def place_scene(train: SceneSplit, *, explicit_box: list[float] | None = None, box_scale: float = 1.0,
                unbounded: bool = False, far_scale: float = 1000.0, frame: TrainingFrame | None = None,
                inner_region_cameras: float = 1.0) -> ScenePlacement:
    """The box, footprint, near and far of the scene ``train`` (its cameras already in the training frame
    when ``frame`` is given). Options as ``NerfDataModule`` names them: ``scene_box``, ``scene_box_scale``,
    ``unbounded``, ``far_scale``, ``inner_region_cameras``; ``explicit_box`` is
    ``[xmin, ymin, zmin, xmax, ymax, zmax]``."""
    if explicit_box is not None:
        bounds = torch.tensor(explicit_box, dtype=torch.float32)
        box = SceneBox(bounds[:3], bounds[3:])
    elif train.depth_range is not None:
        box = scene_box_from_frustums(train.cameras, *train.depth_range, scale=box_scale)
    else:
        box = scene_box_from_cameras(train.cameras, box_scale)
    footprint = pixel_footprint(train.cameras, box)  # at the content, before an unbounded box grows
    if frame is not None:
        return _in_training_frame(train, frame, box, footprint, unbounded, far_scale, inner_region_cameras)
    if unbounded and explicit_box is None:
        # The cameras go inside the box (mip-NeRF 360's convention): contracted space starts beyond
        # them, so what lies between a camera and the content keeps full resolution instead of being
        # squeezed into the shell, where floaters cost a view nothing.
        box = box_around_cameras(box, train.cameras)
    far = _diagonal(box) * far_scale if unbounded else None
    return ScenePlacement(box, footprint, min_near_from_cameras(train.cameras, box), far, None)


def _in_training_frame(train: SceneSplit, frame: TrainingFrame, content_box: SceneBox, footprint: float,
                       unbounded: bool, far_scale: float, inner_region_cameras: float) -> ScenePlacement:
    """Bounded: the content box, and the near plane from it, as without a frame. Unbounded: the inner
    region about the content centre; near from the content cube (the content sets how near rays may
    start, not the camera-grown box); far ``far_scale`` inner-box diagonals, or less where a consistent
    declared ``aabb_scale`` says where the capture ends."""
    centre, content_cube = content_cube_about(frame.content_centre(), content_box)
    declared = _read_declared_extent(train, frame, content_cube)
    if not unbounded:
        if declared is not None and declared.aabb_scale >= UNBOUNDED_HINT_AABB_SCALE:
            rank_zero_info(f"data.normalise auto: {train.source} declares aabb_scale "
                           f"{declared.aabb_scale:g}, content far beyond the box; data.unbounded true "
                           "with a contraction may fit it")
        return ScenePlacement(content_box, footprint, min_near_from_cameras(train.cameras, content_box),
                              None, declared)
    box = inner_cube(content_box, centre, train.cameras, inner_region_cameras)
    far = _diagonal(box) * far_scale
    if declared is not None:
        reach = SceneBox(torch.minimum(declared.box.lower, box.lower),
                         torch.maximum(declared.box.upper, box.upper))
        far = min(far, far_through_box(train.cameras, reach))
        if declared.aabb_scale <= BOUNDED_HINT_AABB_SCALE:
            rank_zero_info(f"data.normalise auto: {train.source} declares aabb_scale "
                           f"{declared.aabb_scale:g} and its box holds every camera: the capture may be "
                           "bounded (data.unbounded false would train it in a box)")
    return ScenePlacement(box, footprint, min_near_from_cameras(train.cameras, content_cube), far, declared)


def _read_declared_extent(train: SceneSplit, frame: TrainingFrame,
                          content_cube: SceneBox) -> DeclaredExtent | None:
    """instant-ngp's declared extent, when the capture gives one that holds every camera and the content
    cube; otherwise ``None`` (with one warning when it was given but does not). It never sets the box:
    ``aabb_scale`` times instant-ngp's unit cube spreads a field thin, and a file's ``scale`` /
    ``offset`` are not always honest. It informs the far plane and logs hints."""
    declared = declared_extent(train, frame.transform, content_cube)
    if declared is None:
        return None
    if not declared.consistent:
        what = " and ".join(name for name, held in (("every camera", declared.holds_cameras),
                                                    ("the content", declared.holds_content)) if not held)
        warnings.warn(f"data.normalise auto: the aabb_scale {declared.aabb_scale:g} box of "
                      f"{train.source} does not hold {what}; it is ignored", stacklevel=2)
        return None
    if not 1.0 / CONTENT_RATIO_HINT <= declared.content_ratio <= CONTENT_RATIO_HINT:
        rank_zero_info(f"data.normalise auto: instant-ngp's unit cube of {train.source} is "
                       f"{declared.content_ratio:.3g} times the content cube (its scale and offset may "
                       "not frame the content); the content cube is kept")
    return declared


def _diagonal(box: SceneBox) -> float:
    return float((box.upper - box.lower).norm())
