"""Camera paths for novel-view videos, made from the poses of a capture.

Pure functions over OpenGL camera-to-world matrices (``[N, 3, 4]``: columns are the camera's
``+x`` right, ``+y`` up, ``+z`` backward axes and its position; it looks along ``-z``), as
defined in :mod:`nerf_lightning.cameras.geometry`. ``N`` is the number of input cameras, ``F`` the
number of frames of a path.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import average_pose


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
