"""Scene box and near plane derived from the cameras alone (no per-scene constants)."""

from __future__ import annotations

import torch
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.core.types import SceneBox


def focus_point(cameras: Cameras) -> Tensor:
    """``[3]`` point closest, in the least-squares sense, to every camera's optical axis.

    For captures whose axes are (nearly) parallel this is ill-posed; the solve is then
    regularised toward the mean camera centre.
    """
    centers = cameras.centers.double()
    axes = cameras.forward_axes.double()
    axes = axes / axes.norm(dim=-1, keepdim=True)
    eye = torch.eye(3, dtype=torch.float64)
    projectors = eye - axes[:, :, None] * axes[:, None, :]  # [N, 3, 3], orthogonal to each axis
    lhs = projectors.sum(0) + 1e-6 * eye
    rhs = (projectors @ centers[:, :, None]).sum(0)[:, 0] + 1e-6 * centers.mean(0)
    return torch.linalg.solve(lhs, rhs).float()


def scene_box_from_cameras(cameras: Cameras, scale: float = 1.0) -> SceneBox:
    """A cube around the cameras' focus point, as large as what every camera sees there.

    The half-size is the median, over cameras, of ``distance to focus * tan(half field of
    view)`` using each camera's narrower field of view: the content that all views frame.
    For a Blender scene (cameras 4 units away, 40 degree field of view) this gives about
    1.45, matching the scenes' conventional ``[-1.5, 1.5]^3``.

    Args:
        cameras: the training cameras.
        scale: multiplies the half-size (captures whose content reaches beyond the framed
            region, such as real scenes with a background, want more than 1).
    """
    center = focus_point(cameras)
    distances = (cameras.centers - center).norm(dim=-1)
    half_fov_x = torch.atan(0.5 * cameras.width.float() / cameras.fx)
    half_fov_y = torch.atan(0.5 * cameras.height.float() / cameras.fy)
    half_fov = torch.minimum(half_fov_x, half_fov_y)
    half_size = float((distances * torch.tan(half_fov)).median()) * scale
    return SceneBox(center - half_size, center + half_size)


def scene_box_from_frustums(cameras: Cameras, near: float, far: float, *, scale: float = 1.0) -> SceneBox:
    """The axis-aligned box of every camera's view frustum between depths ``near`` and ``far``.

    For forward-facing captures, whose content lies in a known depth range in front of all cameras.
    Depths are along each camera's optical axis (not along the rays): the frustum's corners are the
    image corners' rays ``(0, 0)``, ``(W, 0)``, ``(0, H)``, ``(W, H)`` at camera-space ``z = -near``
    and ``z = -far``. Lens distortion is ignored (the pinhole frustum).

    Args:
        cameras: the training cameras.
        near, far: depths along the optical axis, ``0 < near < far``.
        scale: multiplies the box's half-sizes about its centre.
    """
    if not 0.0 < near < far:
        raise ValueError(f"expected 0 < near < far, got near={near}, far={far}")
    dtype = torch.float64
    width, height = cameras.width.to(dtype), cameras.height.to(dtype)
    fx, fy = cameras.fx.to(dtype), cameras.fy.to(dtype)
    cx, cy = cameras.cx.to(dtype), cameras.cy.to(dtype)
    zeros = torch.zeros_like(width)
    us = torch.stack([zeros, width, zeros, width], dim=1)  # [N, 4] continuous pixel corners
    vs = torch.stack([zeros, zeros, height, height], dim=1)
    # OpenGL camera frame: x right, y up, looking along -z; a point at depth d has z = -d.
    x = (us - cx[:, None]) / fx[:, None]
    y = -(vs - cy[:, None]) / fy[:, None]
    unit_depth = torch.stack([x, y, -torch.ones_like(x)], dim=-1)  # [N, 4, 3]
    depths = torch.tensor([near, far], dtype=dtype)
    points = unit_depth[:, None, :, :] * depths[None, :, None, None]  # [N, 2, 4, 3]
    c2w = cameras.camera_to_world.to(dtype)
    world = torch.einsum("nij,nkcj->nkci", c2w[:, :, :3], points) + c2w[:, None, None, :, 3]
    world = world.reshape(-1, 3)
    lower, upper = world.amin(0), world.amax(0)
    center, half = 0.5 * (lower + upper), 0.5 * (upper - lower) * scale
    return SceneBox((center - half).float(), (center + half).float())


def box_around_cameras(box: SceneBox, cameras: Cameras) -> SceneBox:
    """The smallest axis-aligned box holding ``box`` and every camera centre."""
    centers = cameras.centers.float()
    return SceneBox(torch.minimum(box.lower, centers.amin(0)), torch.maximum(box.upper, centers.amax(0)))


def min_near_from_cameras(cameras: Cameras, box: SceneBox, fraction: float = 0.02) -> float:
    """Smallest distance a ray may start at: a small fraction of the box's diagonal."""
    return float((box.upper - box.lower).norm()) * fraction
