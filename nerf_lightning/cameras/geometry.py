"""Cameras and ray generation.

Conventions (the one place they are defined; loaders convert into them):

* World and camera frames follow OpenGL / Blender / nerfstudio: a camera-to-world matrix
  ``[3, 4]`` maps camera coordinates where the camera looks along ``-z`` with ``+y`` up and
  ``+x`` right.
* Pixel ``(col, row)`` covers the square ``[col, col + 1) x [row, row + 1)`` in continuous image
  coordinates; its ray goes through the pixel *centre* ``(col + 0.5, row + 0.5)`` unless given a
  point ``(col + du, row + dv)`` of the square (:func:`subpixel_offsets`). Intrinsics
  ``fx, fy, cx, cy`` are in pixels of the same continuous coordinates (OpenCV's), so a
  downscale by ``s`` divides all four by ``s``.
* Lens distortion: eight coefficients per camera in OpenCV's order ``k1, k2, p1, p2, k3, k4, k5,
  k6`` and a lens model per camera, perspective (OpenCV's radial-tangential model, rational when
  ``k4..k6`` are set) or equidistant fisheye (``cv::fisheye``, ``k1..k4``); see
  :mod:`nerf_lightning.cameras.lens`. Rays go through the undistorted pixel centres.
* Ray directions are unit length, so distances along a ray are in world units.

The perspective geometry is kornia's (``undistort_points``), the fisheye inverse a few Newton steps
(:mod:`nerf_lightning.cameras.lens`), both in OpenCV's camera frame, converted to OpenGL's by flipping
``y`` and ``z``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, fields

import torch
from torch import Tensor

from nerf_lightning.cameras.lens import (
    LensModel,
    fisheye_directions,
    pad_coefficients,
    perspective_directions,
)
from nerf_lightning.core.types import Rays, SceneBox

_OPENCV_TO_OPENGL = torch.tensor([1.0, -1.0, -1.0])


@dataclass(frozen=True)
class Cameras:
    """``N`` cameras (perspective or fisheye), possibly with different intrinsics and image sizes.

    Attributes:
        camera_to_world: ``[N, 3, 4]`` OpenGL camera-to-world matrices.
        fx, fy, cx, cy: ``[N]`` intrinsics in pixels.
        width, height: ``[N]`` int64 image size in pixels.
        distortion: ``[N, 8]`` coefficients ``k1, k2, p1, p2, k3, k4, k5, k6`` (zeros for none); ``[N, 4]``
            (``k1, k2, p1, p2``, what cameras held before) or ``[N, 5]`` are padded with zeros.
        lens: ``[N]`` int64 :class:`~nerf_lightning.cameras.lens.LensModel` of each camera; ``None`` (the
            default) makes every camera ``PERSPECTIVE``.
    """

    camera_to_world: Tensor
    fx: Tensor
    fy: Tensor
    cx: Tensor
    cy: Tensor
    width: Tensor
    height: Tensor
    distortion: Tensor
    lens: Tensor | None = None

    def __post_init__(self) -> None:
        # Normalise here, so every Cameras (cache entries, tests, video paths) has the full layout.
        object.__setattr__(self, "distortion", pad_coefficients(self.distortion))
        if self.lens is None:
            lens = torch.full((self.fx.shape[0],), int(LensModel.PERSPECTIVE), dtype=torch.int64,
                              device=self.fx.device)
            object.__setattr__(self, "lens", lens)

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
            lens=self.lens,
        )

    @property
    def centers(self) -> Tensor:
        """``[N, 3]`` camera positions."""
        return self.camera_to_world[:, :, 3]

    @property
    def forward_axes(self) -> Tensor:
        """``[N, 3]`` unit viewing directions (the camera's ``-z``)."""
        return -self.camera_to_world[:, :, 2]

    def lens_models(self) -> frozenset[LensModel]:
        """The lens models whose rays need more than a pinhole unprojection: ``PERSPECTIVE`` when a
        perspective camera has a non-zero coefficient, ``FISHEYE`` when any camera is a fisheye (even
        with zero coefficients: an equidistant lens is not a pinhole).

        A host synchronisation: compute it once per split and pass it to :func:`generate_rays`.
        """
        assert self.lens is not None
        fisheye = self.lens == int(LensModel.FISHEYE)
        models = set()
        if bool((self.distortion.ne(0).any(dim=-1) & ~fisheye).any()):
            models.add(LensModel.PERSPECTIVE)
        if bool(fisheye.any()):
            models.add(LensModel.FISHEYE)
        return frozenset(models)

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
    undistort: bool | Collection[LensModel] | None = None,
    far: float | None = None,
    offsets: Tensor | None = None,
) -> Rays:
    """Rays through pixel centres (or given points of the pixels), clipped to the scene box (or running
    past it, given ``far``).

    Args:
        cameras: the cameras.
        camera_indices: ``[R]`` int64 camera of each ray.
        cols, rows: ``[R]`` integer pixel coordinates (the ray passes through ``+0.5``).
        scene_box: rays start where they enter the box and stop where they leave it.
        min_near: rays never start closer than this to the camera.
        undistort: which lens models to apply: the :meth:`Cameras.lens_models` of the cameras (the
            data module computes them once per split), ``True`` for all (always right, some work
            wasted), ``False`` for none (pinhole rays); ``None`` calls :meth:`Cameras.lens_models`
            (a host synchronisation: callers in a training loop pass it).
        far: ``None`` clips rays to the box; a distance makes every ray run from ``min_near``
            to it whatever the box (unbounded scenes, whose field contracts space beyond the box).
        offsets: ``[R, 2]`` ``(du, dv)`` in ``[0, 1)``: the ray passes through ``(col + du, row + dv)``
            instead of the centre (:func:`subpixel_offsets`); ``None`` is ``(0.5, 0.5)`` for every ray.

    Returns:
        ``Rays`` with ``R`` rays; rays missing the box have ``far <= near`` (clipped rays only).
    """
    dtype = cameras.camera_to_world.dtype
    pixels = torch.stack([cols.to(dtype), rows.to(dtype)], dim=-1)  # [R, 2]
    pixels = pixels + (0.5 if offsets is None else offsets.to(dtype))
    k = cameras.intrinsic_matrices(camera_indices)  # [R, 3, 3]
    if undistort is None:
        undistort = cameras.lens_models()
    models = frozenset(LensModel) if undistort is True else frozenset(undistort or ())
    distortion = cameras.distortion[camera_indices] if models else None  # [R, 8]
    perspective = LensModel.PERSPECTIVE in models
    directions_cv = perspective_directions(pixels, k, distortion if perspective else None)  # [R, 3]
    if LensModel.FISHEYE in models:
        assert cameras.lens is not None and distortion is not None
        fisheye = (cameras.lens[camera_indices] == int(LensModel.FISHEYE))[:, None]  # [R, 1]
        # Every ray goes through both models and keeps its own: no data-dependent indexing, no sync.
        directions_cv = torch.where(fisheye, fisheye_directions(pixels, k, distortion), directions_cv)
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


def subpixel_offsets(per_axis: int, pixels: int, device: torch.device | str = "cpu",
                     generator: torch.Generator | None = None) -> Tensor:
    """``[pixels * per_axis ** 2, 2]`` points ``(du, dv)`` in ``[0, 1)`` of each of ``pixels`` pixels: one
    in each cell of a ``per_axis x per_axis`` grid over the pixel, pixel after pixel, cells row-major.

    A pixel's colour is the light over its whole square, not along the ray through its centre; where
    an edge or a structure thinner than the pixel crosses it, a centre ray gives a colour the pixel
    never had. Rays through every cell of the grid, averaged, stand for the square.

    Args:
        per_axis: cells along each side of the pixel (``1``: the centre, or one point of the whole square).
        pixels: how many pixels.
        device: where the points are made.
        generator: ``None`` puts each point at its cell's centre (evaluation: the same points every time);
            a generator draws it uniformly within its cell (training: every part of the square is
            trained on, from fewer rays than a fixed grid would need).
    """
    if per_axis < 1:
        raise ValueError(f"per_axis must be >= 1, got {per_axis}")
    cells = torch.arange(per_axis * per_axis, device=device)
    corner = torch.stack([cells % per_axis, cells // per_axis], dim=-1).float()  # [K, 2]
    corner = corner.repeat(pixels, 1)  # [pixels * K, 2]
    if generator is None:
        within = torch.full_like(corner, 0.5)
    else:
        within = torch.rand(corner.shape, device=device, generator=generator)
    return (corner + within) / per_axis


def pixel_grid(width: int, height: int, device: torch.device | str = "cpu") -> tuple[Tensor, Tensor]:
    """Row-major ``(cols, rows)``, each ``[height * width]`` int64, of a whole image."""
    rows, cols = torch.meshgrid(
        torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij"
    )
    return cols.reshape(-1), rows.reshape(-1)
