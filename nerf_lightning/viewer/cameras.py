"""Browser cameras and the project's cameras: one conversion, both ways.

viser, like OpenCV, describes a camera by ``wxyz`` (the rotation ``R`` of ``P_world = R p_camera + t``)
and ``position`` (``t``) with the camera looking along ``+z``, ``+y`` down and ``+x`` right, and a
*vertical* field of view in radians. The project's cameras are OpenGL's
(``nerf_lightning/cameras/geometry.py``): ``-z`` forward, ``+y`` up. The two frames differ by
flipping ``y`` and ``z``, so ``R_opengl = R_opencv @ diag(1, -1, -1)`` and the position is shared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from kornia.geometry.conversions import quaternion_to_rotation_matrix, rotation_matrix_to_quaternion
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras

_FLIP_YZ = torch.tensor([1.0, -1.0, -1.0])


@dataclass(frozen=True)
class ViewCamera:
    """A pinhole camera of the browser's view, independent of the resolution it is rendered at.

    Attributes:
        camera_to_world: ``[3, 4]`` OpenGL camera-to-world matrix (float32, CPU).
        vertical_fov: vertical field of view in radians.
        aspect: width over height of the browser's canvas.
    """

    camera_to_world: Tensor
    vertical_fov: float
    aspect: float

    @staticmethod
    def from_viser(wxyz: np.ndarray, position: np.ndarray, vertical_fov: float, aspect: float) -> ViewCamera:
        """The camera a viser client reports (OpenCV ``wxyz``/``position``, vertical fov, aspect)."""
        rotation = quaternion_to_rotation_matrix(torch.as_tensor(np.asarray(wxyz), dtype=torch.float32))
        opengl = rotation * _FLIP_YZ  # scales columns: R @ diag(1, -1, -1)
        translation = torch.as_tensor(np.asarray(position), dtype=torch.float32)[:, None]
        return ViewCamera(torch.cat([opengl, translation], dim=1), float(vertical_fov), float(aspect))

    def size(self, pixels: int, max_side: int) -> tuple[int, int]:
        """``(width, height)`` of about ``pixels`` pixels with this aspect, neither side above ``max_side``
        nor below 1."""
        height = math.sqrt(max(pixels, 1) / self.aspect)
        width = height * self.aspect
        shrink = min(1.0, max_side / max(width, height))
        return max(1, round(width * shrink)), max(1, round(height * shrink))

    def cameras(self, width: int, height: int) -> Cameras:
        """One pinhole :class:`Cameras` rendering this view at ``width x height`` pixels."""
        focal = 0.5 * height / math.tan(0.5 * self.vertical_fov)

        def one(value: float, dtype: torch.dtype = torch.float32) -> Tensor:
            return torch.tensor([value], dtype=dtype)

        return Cameras(camera_to_world=self.camera_to_world[None].clone(), fx=one(focal), fy=one(focal),
                       cx=one(0.5 * width), cy=one(0.5 * height), width=one(width, torch.int64),
                       height=one(height, torch.int64), distortion=torch.zeros(1, 8))


def viser_pose(camera_to_world: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(wxyz [4], position [3])`` in viser's convention of an OpenGL camera-to-world ``[3, 4]``."""
    pose = camera_to_world.detach().float().cpu()
    opencv = pose[:, :3] * _FLIP_YZ
    wxyz = rotation_matrix_to_quaternion(opencv.contiguous())
    return wxyz.numpy().astype(np.float64), pose[:, 3].numpy().astype(np.float64)


def vertical_fov(cameras: Cameras, index: int) -> float:
    """Vertical field of view (radians) of camera ``index``, from its height and ``fy``."""
    return 2.0 * math.atan(0.5 * float(cameras.height[index]) / float(cameras.fy[index]))


def up_direction(cameras: Cameras) -> np.ndarray:
    """The scene's up: the mean of the cameras' up axes (world ``+z`` when they cancel out).

    Captures are not all ``+z``-up (COLMAP worlds point anywhere); orbiting around the cameras'
    own up keeps the browser's horizon level.
    """
    ups = cameras.camera_to_world[:, :3, 1].float()
    mean = ups.mean(dim=0)
    norm = float(mean.norm())
    return (mean / norm).numpy().astype(np.float64) if norm > 1e-3 else np.array([0.0, 0.0, 1.0])
