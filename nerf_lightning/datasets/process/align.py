"""How far estimated cameras are from known ones: a similarity alignment (Umeyama) and pose errors.

Structure-from-motion recovers cameras up to a similarity (its world frame, origin and scale are
arbitrary), so estimated cameras are compared with reference ones only after the similarity that best
maps the estimated centres onto the reference centres (least squares, Umeyama 1991: "Least-squares
estimation of transformation parameters between two point patterns").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Similarity:
    """``x -> scale * rotation @ x + translation``."""

    scale: float
    rotation: np.ndarray
    translation: np.ndarray

    def apply(self, points: np.ndarray) -> np.ndarray:
        """``[N, 3]`` points mapped."""
        return self.scale * points @ self.rotation.T + self.translation


def umeyama(source: np.ndarray, target: np.ndarray) -> Similarity:
    """The similarity minimising ``sum |target_i - (s R source_i + t)|^2`` over ``[N, 3]`` point sets.

    Raises:
        ValueError: fewer than 3 points, shapes that differ, or source points all in one place.
    """
    source, target = np.asarray(source, dtype=np.float64), np.asarray(target, dtype=np.float64)
    if source.shape != target.shape or source.ndim != 2 or source.shape[1] != 3 or len(source) < 3:
        raise ValueError(f"expected two [N, 3] point sets with N >= 3, got {source.shape} and {target.shape}")
    mean_source, mean_target = source.mean(0), target.mean(0)
    centred_source, centred_target = source - mean_source, target - mean_target
    variance = (centred_source**2).sum() / len(source)
    if variance <= 0:
        raise ValueError("the source points are all in one place; a similarity is not determined")
    u, sigma, vt = np.linalg.svd(centred_target.T @ centred_source / len(source))
    sign = np.eye(3)
    sign[2, 2] = np.sign(np.linalg.det(u) * np.linalg.det(vt)) or 1.0  # a rotation, not a reflection
    rotation = u @ sign @ vt
    scale = float((sigma * np.diag(sign)).sum() / variance)
    return Similarity(scale, rotation, mean_target - scale * rotation @ mean_source)


@dataclass(frozen=True)
class PoseErrors:
    """Per camera, after alignment: ``centre`` distance as a fraction of ``extent`` (the largest distance
    between two reference centres) and the angle between viewing directions in ``degrees``."""

    centre: np.ndarray
    degrees: np.ndarray
    extent: float


def pose_errors(estimated: np.ndarray, reference: np.ndarray) -> PoseErrors:
    """Errors of ``[N, 4, 4]`` estimated camera-to-world matrices against reference ones (the same
    camera axes convention for both, OpenGL here: the viewing direction is ``-z``), after aligning the
    estimated centres to the reference ones with :func:`umeyama`."""
    similarity = umeyama(estimated[:, :3, 3], reference[:, :3, 3])
    centres = similarity.apply(estimated[:, :3, 3])
    extent = float(np.linalg.norm(reference[:, None, :3, 3] - reference[None, :, :3, 3], axis=-1).max())
    directions = -estimated[:, :3, 2] @ similarity.rotation.T
    wanted = -reference[:, :3, 2]
    lengths = np.linalg.norm(directions, axis=1) * np.linalg.norm(wanted, axis=1)
    cosine = (directions * wanted).sum(1) / lengths
    return PoseErrors(
        centre=np.linalg.norm(centres - reference[:, :3, 3], axis=1) / extent,
        degrees=np.degrees(np.arccos(np.clip(cosine, -1.0, 1.0))),
        extent=extent,
    )
