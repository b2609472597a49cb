"""Scene box and near plane derived from the cameras alone (no per-scene constants); with
``data.normalise auto``, the inner region of an unbounded capture and the far plane a declared
instant-ngp box allows, in the normalised frame."""

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


def pixel_footprint(cameras: Cameras, box: SceneBox) -> float:
    """World-space width of one training pixel at the centre of ``box``: the median, over cameras, of
    ``distance from the camera to the box's centre / focal length in pixels``.

    What a training ray can resolve there: detail finer than this is seen by no training pixel alone,
    so a field that stores it (a hash grid's finest levels) fits it to the training views only.
    The median keeps a few close-up or distant photos from setting it.
    """
    centre = 0.5 * (box.lower + box.upper).double().cpu()
    distances = (cameras.centers.double().cpu() - centre).norm(dim=-1)
    focal = 0.5 * (cameras.fx + cameras.fy).double().cpu().reshape(-1)
    return float((distances / focal).median())


def min_near_from_cameras(cameras: Cameras, box: SceneBox, fraction: float = 0.02) -> float:
    """Smallest distance a ray may start at: a small fraction of the box's diagonal."""
    return float((box.upper - box.lower).norm()) * fraction


# ------------------------------------------------------------------- the normalised frame (normalise auto)


def cube_about(centre: Tensor, box: SceneBox) -> SceneBox:
    """The smallest cube centred on ``centre`` ``[3]`` that holds ``box``: half-size the largest distance,
    per axis, from ``centre`` to a face of ``box`` (``box``'s own half-size when it is a cube about
    ``centre``)."""
    centre = centre.double().cpu()
    half = _half_about(centre, box)
    return SceneBox((centre - half).float(), (centre + half).float())


def _half_about(centre: Tensor, box: SceneBox) -> float:
    lower, upper = box.lower.double().cpu(), box.upper.double().cpu()
    return float(torch.maximum(upper - centre, centre - lower).max())


def inner_cube(content: SceneBox, centre: Tensor, cameras: Cameras, camera_share: float) -> SceneBox:
    """The inner (uncontracted) region of an unbounded capture in its normalised frame: a cube centred on
    the content, half-size ``max(h_c, camera_share * r_cam)``.

    ``h_c`` is the half-size of :func:`cube_about` ``(centre, content)``, ``r_cam`` the largest distance
    (max norm, the contraction's) of a camera from ``centre``. Why a cube about the content and not the
    box of the content and the cameras (``box_around_cameras``): cameras on one side of the content
    (a partial arc, an aim beside the objects) would put the content off-centre in that box and let
    contraction start just behind it, and a non-cubic box makes the grid cells and the contracted
    shell anisotropic. ``camera_share`` 1 holds every camera (mip-NeRF 360's and nerfacto's
    convention, symmetric about the content here); 0 leaves the cameras in the contracted shell.

    Args:
        content: the content box (the box a bounded recipe would train in).
        centre: ``[3]`` the content centre.
        cameras: the training cameras.
        camera_share: ``rho >= 0``.
    """
    if not camera_share >= 0.0:
        raise ValueError(f"camera_share must be a number >= 0, got {camera_share}")
    centre = centre.double().cpu()
    content_half = _half_about(centre, content)
    reach = float((cameras.centers.double().cpu() - centre).abs().amax()) if len(cameras) else 0.0
    half = max(content_half, camera_share * reach)
    return SceneBox((centre - half).float(), (centre + half).float())


def box_holds(box: SceneBox, points: Tensor, tolerance: float = 1e-6) -> bool:
    """Whether every point of ``points`` ``[..., 3]`` lies in ``box`` (relative ``tolerance`` of its size)."""
    lower, upper = box.lower.double().cpu(), box.upper.double().cpu()
    slack = tolerance * float((upper - lower).max())
    points = points.double().cpu().reshape(-1, 3)
    return bool(((points >= lower - slack) & (points <= upper + slack)).all())


def far_through_box(cameras: Cameras, box: SceneBox, margin: float = 1.1) -> float:
    """A far distance past which no ray of ``cameras`` is still in ``box``: ``margin`` times the largest
    distance from a camera to a corner of the box (every ray from inside a convex box leaves it before
    its farthest corner)."""
    corners = box_corners(box)
    centres = cameras.centers.double().cpu()
    return margin * float((centres[:, None, :] - corners[None]).norm(dim=-1).max())


def box_corners(box: SceneBox) -> Tensor:
    """``[8, 3]`` float64 corners of ``box`` (on the CPU); corner ``i`` takes ``upper`` on axis ``k`` where
    bit ``k`` of ``i`` is set."""
    lower, upper = box.lower.double().cpu(), box.upper.double().cpu()
    bits = torch.tensor([[(i >> k) & 1 for k in range(3)] for i in range(8)], dtype=torch.bool)
    return torch.where(bits, upper, lower)
