"""Lens models of :class:`~nerf_lightning.cameras.geometry.Cameras`: what the distortion coefficients mean and
how pixels become camera-frame directions.

Every camera carries eight coefficients in OpenCV's order, ``k1, k2, p1, p2, k3, k4, k5, k6``
(:data:`COEFFICIENTS`), and a lens model (:class:`LensModel`) that says how to read them:

* ``PERSPECTIVE``: OpenCV's pinhole model with radial (rational) and tangential distortion. With
  normalised undistorted coordinates ``(x, y)``, ``r^2 = x^2 + y^2``::

      radial = (1 + k1 r^2 + k2 r^4 + k3 r^6) / (1 + k4 r^2 + k5 r^4 + k6 r^6)
      x_d = x radial + 2 p1 x y + p2 (r^2 + 2 x^2)
      y_d = y radial + p1 (r^2 + 2 y^2) + 2 p2 x y

  COLMAP's SIMPLE_PINHOLE, PINHOLE, SIMPLE_RADIAL (``k1``), RADIAL (``k1, k2``), OPENCV
  (``k1, k2, p1, p2``) and FULL_OPENCV (all eight) are all this model with some coefficients zero.
  Undistortion is kornia's fixed-point iteration (:func:`kornia.geometry.calibration.undistort_points`).
* ``FISHEYE``: OpenCV's equidistant fisheye model (``cv::fisheye``, COLMAP's OPENCV_FISHEYE), with
  ``k1..k4`` stored in the ``k1, k2, k3, k4`` slots (``p1, p2, k5, k6`` are zero). A ray at angle
  ``theta`` from the optical axis lands at normalised radius
  ``theta_d = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8)``; kornia has no inverse
  of it, so :func:`fisheye_directions` solves for ``theta`` with a fixed number of Newton steps.

Everything here runs on the tensors' device with a fixed amount of work (no data-dependent loop, no
host synchronisation), so it can be used in a training step.
"""

from __future__ import annotations

from enum import IntEnum

import torch
from kornia.geometry.calibration import undistort_points
from kornia.geometry.camera.perspective import unproject_points
from torch import Tensor

COEFFICIENTS = ("k1", "k2", "p1", "p2", "k3", "k4", "k5", "k6")
"""The meaning of the eight distortion slots (OpenCV's order); a fisheye camera uses ``k1..k4``."""
NUM_COEFFICIENTS = len(COEFFICIENTS)
_FISHEYE_SLOTS = (0, 1, 4, 5)  # k1, k2, k3, k4
PERSPECTIVE_ITERATIONS = 20
"""Fixed-point steps of the perspective undistortion (OpenCV's default is 5; 20 reaches float32's
precision for the distortions of real phone and action-camera lenses)."""
FISHEYE_ITERATIONS = 10
"""Newton steps of the fisheye undistortion; it converges quadratically from ``theta = theta_d``."""


class LensModel(IntEnum):
    """Lens model of a camera (stored per camera as int64 in ``Cameras.lens``)."""

    PERSPECTIVE = 0
    FISHEYE = 1


def pad_coefficients(distortion: Tensor) -> Tensor:
    """``[N, D]`` coefficients in OpenCV's order (``D`` = 0, 4, 5 or 8) -> ``[N, 8]``, zeros appended.

    Four coefficients are ``k1, k2, p1, p2`` (what cameras held before there were eight), five add
    ``k3``, as in OpenCV.
    """
    count = distortion.shape[-1]
    if distortion.ndim != 2 or count not in (0, 4, 5, NUM_COEFFICIENTS):
        raise ValueError(f"expected distortion [N, 4], [N, 5] or [N, 8], got {tuple(distortion.shape)}")
    if count == NUM_COEFFICIENTS:
        return distortion
    return torch.nn.functional.pad(distortion, (0, NUM_COEFFICIENTS - count))


def fisheye_coefficients(distortion: Tensor) -> Tensor:
    """``[..., 4]`` fisheye ``k1..k4`` from ``[..., 8]`` slots."""
    return distortion[..., list(_FISHEYE_SLOTS)]


def perspective_directions(pixels: Tensor, k: Tensor, distortion: Tensor | None) -> Tensor:
    """``[R, 3]`` OpenCV camera-frame directions (``z = 1``) of ``pixels`` ``[R, 2]`` (continuous pixel
    coordinates) of perspective cameras with intrinsic matrices ``k`` ``[R, 3, 3]`` and coefficients
    ``distortion`` ``[R, 8]`` (``None``: no distortion)."""
    if distortion is not None:
        pixels = undistort_points(pixels[:, None, :], k, distortion, num_iters=PERSPECTIVE_ITERATIONS)[:, 0]
    return unproject_points(pixels, torch.ones_like(pixels[:, :1]), k)


def fisheye_theta(theta_d: Tensor, coefficients: Tensor, iterations: int = FISHEYE_ITERATIONS) -> Tensor:
    """Angle ``theta`` ``[R]`` from the optical axis whose equidistant-fisheye radius is ``theta_d`` ``[R]``.

    Newton's method on ``f(theta) = theta (1 + k1 theta^2 + k2 theta^4 + k3 theta^6 + k4 theta^8) -
    theta_d`` from ``theta = theta_d``. As in OpenCV, ``theta_d`` is first clamped to ``[0, pi / 2]``
    (the model is not invertible far past that for usual coefficients) and the result to ``[0, pi]``.

    Args:
        theta_d: ``[R]`` distorted normalised radii (``>= 0``).
        coefficients: ``[R, 4]`` ``k1..k4``.
    """
    theta_d = theta_d.clamp(0.0, torch.pi / 2)
    k1, k2, k3, k4 = coefficients.unbind(-1)
    theta = theta_d
    for _ in range(iterations):
        t2 = theta * theta
        poly = 1 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4)))
        derivative = 1 + t2 * (3 * k1 + t2 * (5 * k2 + t2 * (7 * k3 + t2 * 9 * k4)))
        # A zero or negative slope (extreme coefficients) would throw the step anywhere: keep theta.
        step = torch.where(derivative > 1e-6, (theta * poly - theta_d) / derivative.clamp_min(1e-6), 0.0)
        theta = (theta - step).clamp(0.0, torch.pi)
    return theta


def fisheye_directions(pixels: Tensor, k: Tensor, distortion: Tensor) -> Tensor:
    """``[R, 3]`` unit OpenCV camera-frame directions of ``pixels`` ``[R, 2]`` of equidistant fisheye
    cameras (``k`` ``[R, 3, 3]``, ``distortion`` ``[R, 8]``).

    Directions are built from the angle, ``(sin theta * x_d / theta_d, sin theta * y_d / theta_d,
    cos theta)``, not by dividing by ``cos theta``, so rays beyond 90 degrees from the axis stay right.
    """
    xd = (pixels[:, 0] - k[:, 0, 2]) / k[:, 0, 0]
    yd = (pixels[:, 1] - k[:, 1, 2]) / k[:, 1, 1]
    theta_d = torch.sqrt(xd * xd + yd * yd)
    theta = fisheye_theta(theta_d, fisheye_coefficients(distortion))
    # sin(theta) / theta_d -> 1 at the centre (theta ~ theta_d there): avoid 0 / 0.
    safe = theta_d > 1e-12
    ratio = torch.where(safe, torch.sin(theta) / theta_d.clamp_min(1e-12), torch.ones_like(theta_d))
    return torch.stack([xd * ratio, yd * ratio, torch.cos(theta)], dim=-1)
