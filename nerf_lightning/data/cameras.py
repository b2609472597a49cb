"""Cameras and ray generation.

Conventions (the one place they are defined; loaders convert into them):

* World and camera frames follow OpenGL / Blender / nerfstudio: a camera-to-world matrix
  ``[3, 4]`` maps camera coordinates where the camera looks along ``-z`` with ``+y`` up and
  ``+x`` right.
* Pixel ``(col, row)`` covers the square ``[col, col + 1) x [row, row + 1)`` in continuous image
  coordinates; its ray goes through the pixel *centre* ``(col + 0.5, row + 0.5)``. Intrinsics
  ``fx, fy, cx, cy`` are in pixels of the same continuous coordinates (OpenCV's), so a
  downscale by ``s`` divides all four by ``s``.
* Lens distortion is OpenCV's ``k1, k2, p1, p2`` model; rays are made by undistorting pixel
  positions before unprojection.
* Ray directions are unit length, so distances along a ray are in world units.

The geometry itself is kornia's (``undistort_points``, ``unproject_points``), applied in
OpenCV's camera frame and converted to OpenGL's by flipping ``y`` and ``z``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from kornia.geometry.calibration import undistort_points
from kornia.geometry.camera.perspective import unproject_points
from torch import Tensor

from nerf_lightning.types import Rays, SceneBox

_OPENCV_TO_OPENGL = torch.tensor([1.0, -1.0, -1.0])


@dataclass(frozen=True)
class Cameras:
    """``N`` pinhole cameras, possibly with different intrinsics and image sizes.

    Attributes:
        camera_to_world: ``[N, 3, 4]`` OpenGL camera-to-world matrices.
        fx, fy, cx, cy: ``[N]`` intrinsics in pixels.
        width, height: ``[N]`` int64 image size in pixels.
        distortion: ``[N, 4]`` OpenCV ``k1, k2, p1, p2`` (zeros for none).
    """

    camera_to_world: Tensor
    fx: Tensor
    fy: Tensor
    cx: Tensor
    cy: Tensor
    width: Tensor
    height: Tensor
    distortion: Tensor

    def __len__(self) -> int:
        return self.camera_to_world.shape[0]

    def to(self, device: torch.device | str) -> Cameras:
        return Cameras(*(getattr(self, f.name).to(device) for f in fields(self)))

    def __getitem__(self, index: slice | Tensor | list[int]) -> Cameras:
        return Cameras(*(getattr(self, f.name)[index] for f in fields(self)))

    def scaled(self, factor: float) -> Cameras:
        """The cameras of images downscaled by ``factor`` (``width // factor`` pixels wide)."""
        return Cameras(
            camera_to_world=self.camera_to_world,
            fx=self.fx / factor,
            fy=self.fy / factor,
            cx=self.cx / factor,
            cy=self.cy / factor,
            width=torch.div(self.width, factor, rounding_mode="floor").long(),
            height=torch.div(self.height, factor, rounding_mode="floor").long(),
            distortion=self.distortion,
        )

    @property
    def centers(self) -> Tensor:
        """``[N, 3]`` camera positions."""
        return self.camera_to_world[:, :, 3]

    @property
    def forward_axes(self) -> Tensor:
        """``[N, 3]`` unit viewing directions (the camera's ``-z``)."""
        return -self.camera_to_world[:, :, 2]

    def intrinsic_matrices(self, indices: Tensor) -> Tensor:
        """``[R, 3, 3]`` OpenCV intrinsic matrices of the cameras ``indices`` ``[R]``."""
        k = torch.zeros(indices.shape[0], 3, 3, dtype=self.fx.dtype, device=self.fx.device)
        k[:, 0, 0] = self.fx[indices]
        k[:, 1, 1] = self.fy[indices]
        k[:, 0, 2] = self.cx[indices]
        k[:, 1, 2] = self.cy[indices]
        k[:, 2, 2] = 1.0
        return k


def generate_rays(
    cameras: Cameras,
    camera_indices: Tensor,
    cols: Tensor,
    rows: Tensor,
    scene_box: SceneBox,
    min_near: float = 0.0,
    undistort: bool | None = None,
    far: float | None = None,
) -> Rays:
    """Rays through pixel centres, clipped to the scene box (or running past it, given ``far``).

    Args:
        cameras: the cameras.
        camera_indices: ``[R]`` int64 camera of each ray.
        cols, rows: ``[R]`` integer pixel coordinates (the ray passes through ``+0.5``).
        scene_box: rays start where they enter the box and stop where they leave it.
        min_near: rays never start closer than this to the camera.
        undistort: apply the cameras' lens distortion; ``None`` checks whether any is set
            (a host synchronisation: callers in a training loop pass it).
        far: ``None`` clips rays to the box; a distance makes every ray run from ``min_near``
            to it whatever the box (unbounded scenes, whose field contracts space beyond the box).

    Returns:
        ``Rays`` with ``R`` rays; rays missing the box have ``far <= near`` (clipped rays only).
    """
    dtype = cameras.camera_to_world.dtype
    pixels = torch.stack([cols.to(dtype) + 0.5, rows.to(dtype) + 0.5], dim=-1)  # [R, 2]
    k = cameras.intrinsic_matrices(camera_indices)  # [R, 3, 3]
    distortion = cameras.distortion[camera_indices]  # [R, 4]
    if undistort is None:
        undistort = bool(cameras.distortion.any())
    if undistort:
        pixels = undistort_points(pixels[:, None, :], k, distortion, num_iters=20)[:, 0, :]
    ones = torch.ones_like(pixels[:, :1])
    directions_cv = unproject_points(pixels, ones, k)  # [R, 3], z = 1, OpenCV frame
    directions_cam = directions_cv * _OPENCV_TO_OPENGL.to(directions_cv)
    c2w = cameras.camera_to_world[camera_indices]  # [R, 3, 4]
    directions = torch.einsum("rij,rj->ri", c2w[:, :, :3], directions_cam)
    directions = directions / directions.norm(dim=-1, keepdim=True)
    origins = c2w[:, :, 3]
    if far is not None:
        near = torch.full_like(origins[:, 0], min_near)
        return Rays(origins=origins, directions=directions, near=near, far=torch.full_like(near, far))
    entry, exit_ = scene_box.intersect(origins, directions)
    near = entry.clamp_min(min_near)
    return Rays(origins=origins, directions=directions, near=near, far=exit_)


def _unit(vectors: Tensor) -> Tensor:
    return vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def average_pose(camera_to_world: Tensor) -> Tensor:
    """``[3, 4]`` the mean camera of ``[N, 3, 4]`` camera-to-world matrices (LLFF's ``poses_avg``).

    Mean position; mean backward axis (``+z``), normalised; right axis ``mean up x backward``,
    normalised; up axis ``backward x right``: an orthonormal rotation whatever the inputs' spread. In
    the inputs' dtype and device (the LLFF loader recentres in float64, camera paths in float32).
    """
    backward = _unit(camera_to_world[:, :, 2].mean(dim=0))
    right = _unit(torch.cross(camera_to_world[:, :, 1].mean(dim=0), backward, dim=-1))
    up = torch.cross(backward, right, dim=-1)
    return torch.stack([right, up, backward, camera_to_world[:, :, 3].mean(dim=0)], dim=-1)


def pixel_grid(width: int, height: int, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Row-major ``(cols, rows)``, each ``[height * width]`` int64, of a whole image."""
    rows, cols = torch.meshgrid(
        torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij"
    )
    return cols.reshape(-1), rows.reshape(-1)
