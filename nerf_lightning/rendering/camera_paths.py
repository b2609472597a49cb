"""Camera paths for novel-view videos, made from the poses of a capture.

Pure functions over OpenGL camera-to-world matrices (``[N, 3, 4]``: columns are the camera's
``+x`` right, ``+y`` up, ``+z`` backward axes and its position; it looks along ``-z``), as
defined in :mod:`nerf_lightning.cameras.geometry`. ``N`` is the number of input cameras, ``F`` the
number of frames of a path.

Which path suits a capture is decided from its cameras alone (:func:`is_forward_facing`): a
forward-facing capture gets the :func:`spiral_path`, an inward-facing (360°) one the
:func:`orbit_path`; :func:`interpolate_path` follows the cameras themselves.
"""

from __future__ import annotations

import math

import torch
from kornia.geometry.conversions import quaternion_to_rotation_matrix, rotation_matrix_to_quaternion
from torch import Tensor

from nerf_lightning.cameras.geometry import average_pose

FORWARD_FACING_DEGREES = 30.0
"""Largest spread of viewing directions (see :func:`viewing_spread`) of a forward-facing capture."""


def _unit(vectors: Tensor) -> Tensor:
    return vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def look_at(eyes: Tensor, targets: Tensor, up: Tensor) -> Tensor:
    """Cameras at ``eyes`` ``[F, 3]`` looking at ``targets`` (``[3]`` or ``[F, 3]``).

    Their ``+y`` axis is ``up`` ``[3]`` made perpendicular to the viewing direction.

    Returns:
        ``[F, 3, 4]`` camera-to-world matrices with orthonormal rotations (determinant 1).
    """
    backward = _unit(eyes - targets)  # the camera looks along -z
    right = _unit(torch.cross(up.expand_as(backward), backward, dim=-1))
    camera_up = torch.cross(backward, right, dim=-1)
    return torch.stack([right, camera_up, backward, eyes], dim=-1)


def mean_up(camera_to_world: Tensor) -> Tensor:
    """``[3]`` unit mean of the cameras' up axes (``+y``) of ``camera_to_world`` ``[N, 3, 4]``."""
    return _unit(camera_to_world[:, :, 1].mean(dim=0))


def scene_center(camera_to_world: Tensor) -> Tensor:
    """``[3]`` the point nearest, in least squares, to every camera's optical axis (``[N, 3, 4]`` in).

    The point the cameras of an inward-facing (360°) capture look at. For nearly parallel axes
    (forward-facing captures) the solution is ill-conditioned; the pseudo-inverse then picks the
    least-squares point nearest the origin.
    """
    origins = camera_to_world[:, :, 3]
    directions = _unit(-camera_to_world[:, :, 2])
    eye = torch.eye(3, dtype=origins.dtype, device=origins.device)
    projectors = eye - directions[:, :, None] * directions[:, None, :]  # [N, 3, 3] onto each axis' normal
    lhs = projectors.sum(dim=0)
    rhs = torch.einsum("nij,nj->i", projectors, origins)
    return torch.linalg.pinv(lhs, rtol=1e-6) @ rhs


def orbit_path(camera_to_world: Tensor, num_frames: int, center: Tensor | None = None) -> Tensor:
    """A full circle around ``center`` looking at it, for inward-facing (360°) captures.

    The circle lies in the plane perpendicular to the cameras' mean up axis, at their mean
    height above ``center`` and their mean horizontal distance from it; it starts at the
    azimuth of the first camera and does not repeat the first frame at the end (it loops).

    Args:
        camera_to_world: ``[N, 3, 4]`` the capture's cameras.
        num_frames: ``F``.
        center: ``[3]`` what to orbit; default :func:`scene_center`.

    Returns:
        ``[F, 3, 4]`` camera-to-world matrices.
    """
    center = scene_center(camera_to_world) if center is None else center
    up = mean_up(camera_to_world)
    offsets = camera_to_world[:, :, 3] - center  # [N, 3]
    heights = offsets @ up  # [N]
    horizontal = offsets - heights[:, None] * up
    radius = horizontal.norm(dim=-1).mean()
    first = horizontal[0] if float(horizontal[0].norm()) > 1e-6 else _any_perpendicular(up)
    axis_a = _unit(first)
    axis_b = torch.cross(up, axis_a, dim=-1)
    angles = torch.arange(num_frames, dtype=up.dtype, device=up.device) * (2 * math.pi / max(num_frames, 1))
    ring = torch.cos(angles)[:, None] * axis_a + torch.sin(angles)[:, None] * axis_b  # [F, 3]
    eyes = center + heights.mean() * up + radius * ring
    return look_at(eyes, center, up)


def _any_perpendicular(axis: Tensor) -> Tensor:
    helper = torch.zeros_like(axis)
    helper[int(axis.abs().argmin())] = 1.0
    return torch.cross(axis, helper, dim=-1)


def llff_focus_distance(near: float, far: float) -> float:
    """Distance the LLFF spiral looks at, from a capture's depth range (LLFF's own choice).

    A harmonic-style mean weighted towards ``near``: ``1 / (0.25 / (0.9 near) + 0.75 / (5 far))``.
    """
    return 1.0 / (0.25 / (0.9 * near) + 0.75 / (5.0 * far))


def spiral_path(
    camera_to_world: Tensor,
    num_frames: int,
    focus_distance: float | None = None,
    rotations: float = 2.0,
    z_rate: float = 0.5,
    radius_quantile: float = 0.9,
) -> Tensor:
    """LLFF's spiral around the average pose, for forward-facing captures.

    Positions follow ``(r_x cos t, -r_y sin t, -r_z sin(z_rate t))`` in the frame of the
    :func:`average_pose`, for ``t`` over ``rotations`` turns, where ``r`` is the
    ``radius_quantile`` of the cameras' absolute offsets from the average pose along each of its
    axes; every frame looks at the point ``focus_distance`` in front of the average pose, with
    the average pose's up axis.

    Args:
        camera_to_world: ``[N, 3, 4]`` the capture's cameras.
        num_frames: ``F``.
        focus_distance: default: how far in front of the average pose :func:`scene_center`
            lies (at least a tenth of the cameras' spread); use :func:`llff_focus_distance` when
            the capture's depth range is known.
        rotations: turns of the spiral.
        z_rate: turns of the forward-backward motion per turn.
        radius_quantile: which quantile of the cameras' offsets sets the radii.

    Returns:
        ``[F, 3, 4]`` camera-to-world matrices.
    """
    average = average_pose(camera_to_world)
    rotation, position = average[:, :3], average[:, 3]
    local = (camera_to_world[:, :, 3] - position) @ rotation  # [N, 3] offsets in the average frame
    radii = torch.quantile(local.abs(), radius_quantile, dim=0)  # [3]
    if focus_distance is None:
        spread = float(local.norm(dim=-1).max()) if len(local) else 0.0
        ahead = float((scene_center(camera_to_world) - position) @ -rotation[:, 2])
        focus_distance = max(ahead, 0.1 * spread, 1e-3)
    focus = position - focus_distance * rotation[:, 2]
    angles = torch.arange(num_frames, dtype=radii.dtype, device=radii.device) * (
        2 * math.pi * rotations / max(num_frames, 1)
    )
    waves = torch.stack([torch.cos(angles), -torch.sin(angles), -torch.sin(angles * z_rate)], dim=-1)
    offsets = waves * radii
    eyes = position + offsets @ rotation.T
    return look_at(eyes, focus, rotation[:, 1])


def viewing_spread(camera_to_world: Tensor, quantile: float = 0.9) -> float:
    """Degrees between the cameras' viewing directions (``-z``) and their mean direction, at ``quantile``.

    The ``quantile`` (not the maximum) so that a stray frame does not decide. A ring or dome of
    cameras looking inwards gives 60-180°; cameras that all look roughly the same way give a few
    degrees. ``camera_to_world`` is ``[N, 3, 4]``.
    """
    directions = _unit(-camera_to_world[:, :, 2].double())
    mean = directions.mean(dim=0)
    if float(mean.norm()) < 1e-6:  # directions that cancel out: spread all round
        return 180.0
    cosines = (directions @ _unit(mean)).clamp(-1.0, 1.0)
    return math.degrees(float(torch.quantile(torch.arccos(cosines), quantile)))


def is_forward_facing(camera_to_world: Tensor, max_degrees: float = FORWARD_FACING_DEGREES) -> bool:
    """Whether the capture is forward-facing: 90% of its cameras look within ``max_degrees`` (30°) of
    their mean viewing direction (:func:`viewing_spread`), e.g. an LLFF capture.

    The rule looks at the cameras only, never at the dataset's format. Such cameras see the scene
    from one side: an orbit around it would show mostly sides no camera saw, so a forward-facing
    capture gets a path near its cameras (:func:`spiral_path`), an inward-facing one the
    :func:`orbit_path`. Handheld forward-facing captures stay within about 10-15° of their mean
    direction; captures that go round their subject spread over far more than 30°.
    """
    return len(camera_to_world) > 0 and viewing_spread(camera_to_world) <= max_degrees


def _catmull_rom(points: Tensor, segment: Tensor, weight: Tensor) -> Tensor:
    """Uniform Catmull-Rom through ``points [N, D]`` (``N >= 2``) at ``segment [F]`` (int64, in
    ``[0, N - 2]``) and ``weight [F]`` (in ``[0, 1]``): ``[F, D]``; the ends are extended by reflection."""
    before = 2 * points[:1] - points[1:2]
    after = 2 * points[-1:] - points[-2:-1]
    padded = torch.cat([before, points, after])  # padded[i + 1] is points[i]
    p0, p1, p2, p3 = (padded[segment + offset] for offset in range(4))
    t = weight[:, None]
    return 0.5 * (2 * p1 + (p2 - p0) * t + (2 * p0 - 5 * p1 + 4 * p2 - p3) * t**2
                  + (3 * p1 - p0 - 3 * p2 + p3) * t**3)


def interpolate_path(camera_to_world: Tensor, num_frames: int) -> Tensor:
    """A smooth path through the cameras in their order, for captures taken along a path.

    Positions follow a Catmull-Rom spline through the cameras' positions and rotations one through
    their unit quaternions (signs aligned to take the shorter way, normalised): both pass through every
    camera and turn without the kinks of straight segments. Each pair of consecutive cameras gets the same
    share of the frames; the first frame is the first camera, the last frame the last camera, and camera
    ``i`` is frame ``i (F - 1) / (N - 1)`` whenever that is a whole number. Meaningful when the cameras'
    order is the order they were taken in (a video, a walk round); shuffled views make a jumpy path.

    Args:
        camera_to_world: ``[N, 3, 4]`` the capture's cameras, in order.
        num_frames: ``F``.

    Returns:
        ``[F, 3, 4]`` camera-to-world matrices with orthonormal rotations.
    """
    count = len(camera_to_world)
    if count == 0:
        raise ValueError("an interpolated path needs at least one camera")
    if count == 1 or num_frames == 1:
        return camera_to_world[:1].expand(num_frames, 3, 4).clone()
    dtype = camera_to_world.dtype
    poses = camera_to_world.double()
    quaternions = rotation_matrix_to_quaternion(poses[:, :, :3].contiguous())  # [N, 4]
    for index in range(1, count):  # each in the hemisphere of the one before: the shorter way round
        if float(quaternions[index] @ quaternions[index - 1]) < 0:
            quaternions[index] = -quaternions[index]
    frame = torch.arange(num_frames, dtype=poses.dtype, device=poses.device)
    where = frame * ((count - 1) / (num_frames - 1))
    segment = where.floor().long().clamp(max=count - 2)
    weight = where - segment
    positions = _catmull_rom(poses[:, :, 3], segment, weight)
    rotations = quaternion_to_rotation_matrix(_unit(_catmull_rom(quaternions, segment, weight)))
    return torch.cat([rotations, positions[:, :, None]], dim=-1).to(dtype)
