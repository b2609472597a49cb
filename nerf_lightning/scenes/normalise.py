"""Where a capture is put before training: a similarity (rotation, translation, uniform scale) that
makes the scene upright, centred and of a known size, estimated from the cameras (and, when known,
sparse points or depth bounds), and the image downscale picked from a pixel budget.

Why: a capture's coordinates are whatever the tool that posed it chose (COLMAP's first camera, a
phone's arbitrary units, instant-ngp's ``colmap2nerf`` frame), while what a recipe does is not
invariant to them: densities are per world unit, the hash grid and the contraction cube are axis
aligned, and the scene box follows the coordinates. Normalising first gives every capture the same
frame, so one recipe sees every capture alike.

The rules (each stated where it is computed):

* **orientation**, the world up made ``+z`` by the smallest rotation that does it (so a rig already
  upright keeps its yaw): ``vertical`` (the default) takes the direction most perpendicular to every
  camera's right axis (hand-held cameras seldom roll, so their right axes are horizontal whatever their
  pitch), falling back to ``up`` when the right axes are nearly all parallel (a forward-facing rig);
  ``up`` takes the mean of the cameras' up axes (instant-ngp's ``colmap2nerf`` and nerfstudio's
  default), which tilts toward the content on a partial arc of cameras pitched down at it; ``average``
  makes the average camera the identity (LLFF's recentring: it looks along ``-z`` with ``+y`` up);
  ``none`` keeps the axes.
* **centre**: ``focus`` (the default), the point nearest every optical axis, leaving out cameras that
  have it behind them (outward-looking frames of a phone capture would drag it anywhere); ``points``,
  the middle of the central 90% (per upright axis) of the sparse points nearer the focus than the
  cameras are (the foreground, not the walls), falling back to ``focus`` when fewer than
  ``MIN_POINTS`` are; ``poses``, the mean camera position (nerfstudio's default; LLFF's); ``none``.
* **scale**: ``camera_distance`` (the default) makes the median distance from the cameras to the centre
  ``target_distance`` (4: the Blender scenes' and ``colmap2nerf``'s convention, so a Blender rig is a
  fixed point); ``depth_bounds`` makes the smallest near bound ``1 / 0.75`` (LLFF's convention, so an
  LLFF capture as our loader returns it is a fixed point); ``none``.
* **snapping**: each component within :class:`SnapTolerance` of the identity *is* the identity, exactly.
  A Blender-layout rig (cameras 4 units from the origin looking at it, ``+z`` up) is thus left bit for
  bit as it is, and so are its scene box and every number derived from it.

The estimate is computed in float64 on the CPU (from the training cameras, once); a
:class:`Similarity` applies to tensors on any device, in their own dtype. Shapes are in the docstrings
(``N`` cameras, ``P`` points).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import average_pose
from nerf_lightning.core.types import SceneBox
from nerf_lightning.scenes.bounds import box_corners

Orientation = Literal["vertical", "up", "average", "none"]
Centre = Literal["focus", "points", "poses", "none"]
Scale = Literal["camera_distance", "depth_bounds", "none"]

TARGET_CAMERA_DISTANCE = 4.0
"""Median camera distance to the centre after ``camera_distance`` scaling: the Blender scenes' (and
instant-ngp ``colmap2nerf``'s) convention, so their rigs need no scaling."""
BOUND_FACTOR = 0.75
"""``depth_bounds`` scaling makes the smallest near bound ``1 / BOUND_FACTOR`` (LLFF's ``bd_factor``)."""
MIN_POINTS = 16
"""Fewest foreground sparse points that ``centre="points"`` trusts; with fewer it uses the focus."""
POINT_QUANTILE = 0.05
"""``centre="points"`` takes the middle of the ``[q, 1 - q]`` quantiles of the foreground per axis."""
DEGENERATE_RIGHT_AXES = 0.17
"""``vertical`` falls back to ``up`` when the second singular value of the stacked right axes is below
this times ``sqrt(N)``: the right axes then agree to within about 10 degrees (RMS), so the direction
perpendicular to all of them is not determined (nerfstudio's threshold for the same test)."""

_Z = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)


@dataclass(frozen=True)
class Similarity:
    """``x -> scale * rotation @ x + translation``: a rigid motion and a uniform scale.

    Images do not change under a similarity applied to the whole scene and its cameras: a point that
    projects to a pixel still does, at ``scale`` times its depth. Camera axes are rotated, never
    scaled, so poses stay rigid.

    Attributes:
        rotation: ``[3, 3]`` float64, orthonormal with determinant +1.
        translation: ``[3]`` float64.
        scale: positive.
    """

    rotation: Tensor
    translation: Tensor
    scale: float

    @staticmethod
    def identity() -> Similarity:
        return Similarity(torch.eye(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64), 1.0)

    @property
    def is_identity(self) -> bool:
        """Exactly the identity (what snapping produces), not merely close to it."""
        return (self.scale == 1.0 and bool(torch.equal(self.rotation, torch.eye(3, dtype=torch.float64)))
                and not bool(self.translation.any()))

    def matrix(self) -> Tensor:
        """``[4, 4]`` float64 homogeneous matrix ``[[scale * rotation, translation], [0, 0, 0, 1]]``."""
        out = torch.eye(4, dtype=torch.float64)
        out[:3, :3] = self.scale * self.rotation
        out[:3, 3] = self.translation
        return out

    def apply_points(self, points: Tensor) -> Tensor:
        """``[..., 3]`` points moved, in their own dtype (computed in float64). The identity returns
        ``points`` itself, so nothing about an untouched scene changes, not even rounding."""
        if self.is_identity:
            return points
        rotation, translation = self.rotation.to(points.device), self.translation.to(points.device)
        moved = self.scale * points.double() @ rotation.T + translation
        return moved.to(points.dtype)

    def apply_poses(self, camera_to_world: Tensor) -> Tensor:
        """``[N, 3, 4]`` (or ``[N, 4, 4]``) camera-to-world matrices moved: axes rotated, centres moved.
        Returns ``[N, 3, 4]`` in the input's dtype; the identity returns the ``[N, 3, 4]`` part as is."""
        poses = camera_to_world[:, :3, :4]
        if self.is_identity:
            return poses
        poses64 = poses.double()
        rotation, translation = self.rotation.to(poses.device), self.translation.to(poses.device)
        axes = rotation @ poses64[:, :, :3]
        centres = self.scale * poses64[:, :, 3] @ rotation.T + translation
        return torch.cat([axes, centres[:, :, None]], dim=-1).to(camera_to_world.dtype)

    def apply_box(self, box: SceneBox) -> SceneBox:
        """The axis-aligned box (float32) of ``box``'s eight corners moved: ``box`` itself under the identity,
        the moved box exactly when there is no rotation, a larger box around it otherwise."""
        if self.is_identity:
            return box
        moved = self.apply_points(box_corners(box))
        return SceneBox(moved.amin(dim=0).float(), moved.amax(dim=0).float())

    def as_dict(self) -> dict[str, list[list[float]] | list[float] | float]:
        """JSON-ready: ``rotation`` (3 rows), ``translation``, ``scale``; :meth:`from_dict` reads it."""
        return {"rotation": self.rotation.tolist(), "translation": self.translation.tolist(),
                "scale": float(self.scale)}

    @staticmethod
    def from_dict(values: Mapping[str, Any]) -> Similarity:
        return Similarity(torch.tensor(values["rotation"], dtype=torch.float64),
                          torch.tensor(values["translation"], dtype=torch.float64), float(values["scale"]))

    def inverse(self) -> Similarity:
        rotation = self.rotation.T
        return Similarity(rotation, -(rotation @ self.translation) / self.scale, 1.0 / self.scale)

    def then(self, other: Similarity) -> Similarity:
        """This similarity followed by ``other``."""
        return Similarity(other.rotation @ self.rotation,
                          other.scale * other.rotation @ self.translation + other.translation,
                          other.scale * self.scale)


@dataclass(frozen=True)
class SnapTolerance:
    """How near the identity each component may be and still be replaced by it exactly.

    Within these a component changes nothing a recipe is sensitive to (a degree of tilt, a few percent
    of scale, a centre a few percent of the camera distance off), and keeping the file's own
    coordinates keeps ``--data.scene_box``, camera paths and exports in them.

    Attributes:
        degrees: largest rotation angle snapped to no rotation.
        offset: largest distance of the centre from the origin, as a fraction of the median camera
            distance (before scaling), snapped to no translation.
        scale: largest ``|scale - 1|`` snapped to 1.
    """

    degrees: float = 2.0
    offset: float = 0.05
    scale: float = 0.05


@dataclass(frozen=True)
class Normalisation:
    """A capture's normalising similarity and the statistics it came from.

    Attributes:
        transform: file coordinates to normalised coordinates.
        up: ``[3]`` the estimated world up, in file coordinates (unit length).
        centre: ``[3]`` the point made the origin, in file coordinates.
        camera_distance: the median distance from the cameras to ``centre``, in file units.
        centre_from: which rule set the centre (``focus``, ``points``, ``poses`` or ``none``;
            ``points`` falls back to ``focus`` with too few foreground points).
        snapped: the components that are the identity because they were within the tolerance of it
            (``rotation``, ``translation``, ``scale``; a component that was exactly the identity, such
            as the rotation of ``orientation="none"``, is listed too).
    """

    transform: Similarity
    up: Tensor
    centre: Tensor
    camera_distance: float
    centre_from: str
    snapped: tuple[str, ...] = field(default=())


# ----------------------------------------------------------------------------------------- orientation


def _unit(vector: Tensor) -> Tensor:
    return vector / vector.norm().clamp_min(1e-300)


def mean_up(camera_to_world: Tensor) -> Tensor:
    """``[3]`` unit mean of the cameras' up axes (``camera_to_world [N, 3, 4]``, OpenGL: column 1)."""
    return _unit(camera_to_world[:, :3, 1].double().mean(dim=0))


def vertical_direction(camera_to_world: Tensor) -> Tensor:
    """``[3]`` unit direction most perpendicular to every camera's right axis, on the side of the mean up.

    It is the right singular vector of the stacked right axes ``[N, 3]`` with the smallest singular
    value: the vertical of cameras that do not roll, whatever their pitch. When the right axes nearly
    all agree (:data:`DEGENERATE_RIGHT_AXES`: a forward-facing rig) that direction is not determined,
    and the mean up, made perpendicular to the dominant right axis, is returned instead.
    """
    rights = camera_to_world[:, :3, 0].double()
    up = mean_up(camera_to_world)
    _, singular, vh = torch.linalg.svd(rights, full_matrices=False)
    if singular.shape[0] < 3 or float(singular[1]) < DEGENERATE_RIGHT_AXES * math.sqrt(rights.shape[0]):
        dominant = vh[0]
        return _unit(up - dominant * torch.dot(up, dominant))
    vertical = vh[2]
    return vertical if float(torch.dot(vertical, up)) >= 0.0 else -vertical


def rotation_onto_z(direction: Tensor) -> Tensor:
    """``[3, 3]`` float64: the smallest rotation taking the unit ``direction [3]`` to ``+z`` (Rodrigues).

    Rotating about the axis ``direction x z`` keeps the yaw of a nearly upright frame. Exactly
    ``+z`` gives the identity; exactly ``-z`` (no unique smallest rotation) gives the half turn about
    ``+x``.
    """
    d = _unit(direction.double())
    axis = torch.linalg.cross(d, _Z)
    sine, cosine = float(axis.norm()), float(torch.dot(d, _Z))
    if sine == 0.0:
        return torch.eye(3, dtype=torch.float64) if cosine > 0 else torch.diag(
            torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64))
    k = axis / sine
    cross = torch.tensor([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]], dtype=torch.float64)
    return torch.eye(3, dtype=torch.float64) + sine * cross + (1.0 - cosine) * cross @ cross


def rotation_angle_degrees(rotation: Tensor) -> float:
    """The angle of a ``[3, 3]`` rotation, in degrees."""
    cosine = (float(torch.trace(rotation.double())) - 1.0) / 2.0
    return math.degrees(math.acos(max(-1.0, min(1.0, cosine))))


# -------------------------------------------------------------------------------------------- centre


def focus_of_attention(camera_to_world: Tensor, max_rounds: int = 10) -> Tensor:
    """``[3]`` float64 point nearest (least squares) the optical axes of the cameras that look at it.

    Starting from every camera, cameras that have the current point behind them are left out and the
    point solved again, until none is left out (at most ``max_rounds`` rounds; nerfstudio's rule).
    With fewer than two cameras left, the last point with two or more is kept (the mean camera
    position if there never were). Nearly parallel axes (a forward-facing rig) make the solve
    ill-posed: it is regularised toward the mean camera position.
    """
    centres = camera_to_world[:, :3, 3].double()
    axes = -camera_to_world[:, :3, 2].double()
    axes = axes / axes.norm(dim=-1, keepdim=True)
    eye = torch.eye(3, dtype=torch.float64)
    mean = centres.mean(dim=0)
    active = torch.ones(centres.shape[0], dtype=torch.bool)
    point = mean
    for _ in range(max_rounds):
        if int(active.sum()) < 2:
            break
        projectors = eye - axes[active, :, None] * axes[active, None, :]  # [M, 3, 3]
        count = float(active.sum())
        lhs = projectors.sum(dim=0) / count + 1e-9 * eye
        rhs = (projectors @ centres[active, :, None]).sum(dim=0)[:, 0] / count + 1e-9 * mean
        point = torch.linalg.solve(lhs, rhs)
        in_front = ((point - centres) * axes).sum(dim=-1) > 0
        still = active & in_front
        if bool(torch.equal(still, active)):
            break
        active = still
    return point


def points_centre(points: Tensor, focus: Tensor, radius: float) -> Tensor | None:
    """``[3]`` float64 middle of the foreground sparse points, or ``None`` with fewer than ``MIN_POINTS``.

    The foreground is the points within ``radius`` of ``focus`` (the caller passes the cameras'
    median distance: what lies nearer than the cameras, not the walls behind the content); its
    middle, per axis, is halfway between the ``POINT_QUANTILE`` and ``1 - POINT_QUANTILE`` quantiles,
    which a few stray points do not move. Axes are the caller's (pass upright points: the box built on
    this centre is axis-aligned in that frame).
    """
    points = points.double().reshape(-1, 3)
    near = points[(points - focus).norm(dim=-1) <= radius]
    if near.shape[0] < MIN_POINTS:
        return None
    levels = torch.tensor([POINT_QUANTILE, 1.0 - POINT_QUANTILE], dtype=torch.float64)
    return torch.quantile(near, levels, dim=0).mean(dim=0)


# ------------------------------------------------------------------------------------- the similarity


def normalising_similarity(
    camera_to_world: Tensor,
    *,
    points: Tensor | None = None,
    depth_bounds: Tensor | None = None,
    orientation: Orientation = "vertical",
    centre: Centre = "focus",
    scale: Scale = "camera_distance",
    target_distance: float = TARGET_CAMERA_DISTANCE,
    tolerance: SnapTolerance | None = None,
) -> Normalisation:
    """The similarity that puts a capture upright, centred and at a known scale (module docstring).

    Order: rotate (``orientation``), then centre (``centre``, found in the rotated frame), then scale
    (``scale``): ``x' = s R (x - c)``. Each component within ``tolerance`` (default
    :class:`SnapTolerance`) of the identity is replaced by it exactly; ``SnapTolerance(0, 0, 0)``
    snaps only exact identities.

    Args:
        camera_to_world: ``[N, 3, 4]`` (or ``[N, 4, 4]``) OpenGL camera-to-world matrices, ``N >= 1``
            (the training cameras: the transform is then applied to every split).
        points: ``[P, 3]`` sparse points in the same frame (structure from motion), for
            ``centre="points"``.
        depth_bounds: ``[N, 2]`` or ``[2]`` near and far depths (LLFF), for ``scale="depth_bounds"``.
        orientation, centre, scale: the rules (module docstring).
        target_distance: the median camera distance after ``camera_distance`` scaling.
        tolerance: how near the identity a component is snapped to it.

    Raises:
        ValueError: no cameras, an unknown rule, ``depth_bounds`` scaling without positive bounds, or
            cameras all at the centre with ``camera_distance`` scaling.
    """
    if camera_to_world.ndim != 3 or camera_to_world.shape[0] < 1 or tuple(camera_to_world.shape[1:]) not in (
            (3, 4), (4, 4)):
        raise ValueError(f"expected camera_to_world [N, 3, 4] or [N, 4, 4] with N >= 1, got "
                         f"{list(camera_to_world.shape)}")
    tolerance = tolerance or SnapTolerance()
    poses = camera_to_world[:, :3, :4].double()
    centres = poses[:, :, 3]

    if orientation == "vertical":
        up = vertical_direction(poses)
        rotation = rotation_onto_z(up)
    elif orientation == "up":
        up = mean_up(poses)
        rotation = rotation_onto_z(up)
    elif orientation == "average":
        average = average_pose(poses)
        up = average[:, 1].clone()
        rotation = average[:, :3].T.contiguous()
    elif orientation == "none":
        up = _Z.clone()
        rotation = torch.eye(3, dtype=torch.float64)
    else:
        raise ValueError(f"orientation must be vertical, up, average or none, got {orientation!r}")

    focus = focus_of_attention(poses)
    centre_from: str = centre
    if centre == "focus":
        middle = focus
    elif centre == "points":
        middle = focus
        centre_from = "focus"
        if points is not None and points.numel():
            radius = float((centres - focus).norm(dim=-1).median())
            upright = points.double().reshape(-1, 3) @ rotation.T
            found = points_centre(upright, rotation @ focus, radius)
            if found is not None:
                middle, centre_from = rotation.T @ found, "points"
    elif centre == "poses":
        middle = centres.mean(dim=0)
    elif centre == "none":
        middle = torch.zeros(3, dtype=torch.float64)
    else:
        raise ValueError(f"centre must be focus, points, poses or none, got {centre!r}")
    distance = float((centres - middle).norm(dim=-1).median())

    if scale == "camera_distance":
        if not distance > 0.0:
            raise ValueError("the cameras are all at the centre; camera_distance scaling needs a distance")
        factor = target_distance / distance
    elif scale == "depth_bounds":
        if depth_bounds is None or not bool((torch.as_tensor(depth_bounds) > 0).all()):
            raise ValueError("depth_bounds scaling needs positive depth_bounds [N, 2] or [2]")
        nearest = float(torch.as_tensor(depth_bounds, dtype=torch.float64).reshape(-1, 2)[:, 0].min())
        factor = 1.0 / (BOUND_FACTOR * nearest)
    elif scale == "none":
        factor = 1.0
    else:
        raise ValueError(f"scale must be camera_distance, depth_bounds or none, got {scale!r}")

    snapped: list[str] = []
    if rotation_angle_degrees(rotation) <= tolerance.degrees:
        rotation = torch.eye(3, dtype=torch.float64)
        snapped.append("rotation")
    if float(middle.norm()) <= tolerance.offset * distance:
        middle = torch.zeros(3, dtype=torch.float64)
        snapped.append("translation")
    if abs(factor - 1.0) <= tolerance.scale:
        factor = 1.0
        snapped.append("scale")
    translation = -factor * (rotation @ middle)
    if not translation.any():
        translation = torch.zeros(3, dtype=torch.float64)  # no -0.0: the identity is exactly zeros
    return Normalisation(Similarity(rotation, translation, factor), up, middle, distance, centre_from,
                         tuple(snapped))


def is_forward_facing(camera_to_world: Tensor, min_alignment: float = 0.9) -> bool:
    """Whether every camera looks roughly one way: the mean of the unit viewing directions is at least
    ``min_alignment`` long (1: all parallel; 0.9: an RMS spread of about 25 degrees). Such rigs get the
    forward-facing rules (``average`` orientation, ``poses`` centre, ``depth_bounds`` scale when bounds
    are known); others the inward ones."""
    axes = -camera_to_world[:, :3, 2].double()
    axes = axes / axes.norm(dim=-1, keepdim=True)
    return float(axes.mean(dim=0).norm()) >= min_alignment


# ------------------------------------------------------------------------------------------- downscale


def downscale_for_pixels(width: int, height: int, target_pixels: int,
                         factors: Iterable[int] | None = None) -> int:
    """The integer downscale whose image (``width // f x height // f``) is nearest ``target_pixels``.

    Nearest in ratio (``|log(pixels / target)|``), ties to the smaller factor (more pixels); an image
    already below the target keeps ``1`` (images are never upsampled). ``factors`` restricts the choice
    (e.g. the ``images_<f>`` folders an LLFF capture has); without it every factor from 1 up to where
    a side would vanish is a candidate. Why a pixel budget instead of a fixed factor: a fixed 4 gives a
    1080x1920 phone photo 130k pixels but a 605x806 one 30k, four times fewer rays per view for the
    same recipe.

    Raises:
        ValueError: a non-positive size or target, or no usable factor among ``factors``.
    """
    if width < 1 or height < 1:
        raise ValueError(f"expected a positive image size, got {width}x{height}")
    if target_pixels < 1:
        raise ValueError(f"target_pixels must be positive, got {target_pixels}")
    largest = min(width, height)
    candidates = sorted({int(f) for f in factors} if factors is not None else range(1, largest + 1))
    candidates = [f for f in candidates if 1 <= f <= largest]
    if not candidates:
        raise ValueError(f"no usable downscale factor for a {width}x{height} image among {factors}")
    best, best_error = candidates[0], math.inf
    for factor in candidates:
        pixels = (width // factor) * (height // factor)
        error = abs(math.log(pixels / target_pixels))
        if error < best_error:
            best, best_error = factor, error
        if pixels <= target_pixels:
            break  # pixel counts only fall from here on: the error only grows
    return best
