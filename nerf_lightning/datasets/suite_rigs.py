"""Camera layouts of the scene suite and the placement of a scene in its file's world.

Every scene is built and rendered in its own *canonical* frame (world ``+z`` up, content around the
origin); a :class:`Placement` (a similarity: uniform scale, rotation, translation) maps that frame to
the coordinates written to the files. Images do not change under a similarity, so the placement only
moves the poses (and scales depths): the same pixels appear at another scale and another place, which
is what a recipe tuned to content at the origin has to survive. Its rotation turns about ``+z`` and
may then tilt the up axis, as structure-from-motion leaves a capture: COLMAP's world has no up.

Rigs (OpenGL camera-to-world matrices ``[N, 4, 4]`` in the canonical frame, world ``+z`` up):

* object scenes use the demo's orbit (:func:`nerf_lightning.datasets.demo_scene.camera_poses`);
* :func:`ring_poses`: a 360-degree capture: a golden spiral over an elevation band around a target,
  distances and aim jittered by the seed as a hand-held capture would be; no roll;
* :func:`grid_poses`: a forward-facing capture: a jittered grid of positions in a plane, every
  camera aimed at nearly the same far point; no roll;
* :class:`HandheldArc`: a phone walked part of the way round a table, in time order: a partial arc
  at varying distance and height, pitched down at a point beside the objects, with roll and yaw
  jitter, and a few frames at each end looking off into the room.

:class:`PoseError` is what structure-from-motion gets wrong: the poses a file records for the training
views, a little off the cameras the images were rendered with. :class:`Exposure` is what a phone's
automatic exposure and white balance do: each training photo a little brighter or darker, warmer or
cooler than the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from nerf_lightning.datasets.demo_shapes import Array, _rotation
from nerf_lightning.scenes.formats.nerfstudio import SPLIT_PERIOD

UP = np.array([0.0, 0.0, 1.0])


def look_at(position: Array, target: Array) -> Array:
    """``[4, 4]`` OpenGL camera-to-world of a camera at ``position [3]`` looking at ``target [3]`` with
    world ``+z`` up (the view direction must not be vertical)."""
    back = position - target
    back = back / np.linalg.norm(back)
    right = np.cross(UP, back)
    right /= np.linalg.norm(right)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = right, np.cross(back, right), back, position
    return m


def axis_rotation(axis: Array, degrees: float) -> Array:
    """``[3, 3]`` rotation by ``degrees`` (right-handed) about the unit ``axis [3]`` (Rodrigues)."""
    k = np.asarray(axis, dtype=np.float64)
    cross = np.array([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]])
    angle = math.radians(degrees)
    return np.eye(3) + math.sin(angle) * cross + (1.0 - math.cos(angle)) * (cross @ cross)


@dataclass(frozen=True)
class Placement:
    """``world = scale * R @ canonical + offset``: where the files put the canonical scene.

    ``R = T @ R_z(yaw)``: a turn about ``+z``, then a tilt ``T`` by ``tilt_degrees`` about the
    horizontal axis at azimuth ``tilt_axis_degrees``. Without a tilt up stays up (the files' ``+z`` is
    the scene's); with one the scene's up is ``R @ (0, 0, 1)``, ``tilt_degrees`` away from the files'
    ``+z``, as in a structure-from-motion world.

    Attributes:
        scale: world units per canonical unit.
        offset: world position of the canonical origin.
        yaw_degrees: rotation about ``+z``.
        tilt_degrees: how far the scene's up axis leans from the files' ``+z``.
        tilt_axis_degrees: azimuth (from ``+x`` towards ``+y``) of the horizontal axis it leans about.
    """

    scale: float = 1.0
    offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    yaw_degrees: float = 0.0
    tilt_degrees: float = 0.0
    tilt_axis_degrees: float = 0.0

    @property
    def rotation(self) -> Array:
        """``[3, 3]`` ``R = T @ R_z(yaw)`` (exactly ``R_z(yaw)`` without a tilt)."""
        turn = _rotation("z", self.yaw_degrees)
        if self.tilt_degrees == 0.0:
            return turn
        azimuth = math.radians(self.tilt_axis_degrees)
        axis = np.array([math.cos(azimuth), math.sin(azimuth), 0.0])
        return axis_rotation(axis, self.tilt_degrees) @ turn

    @property
    def up(self) -> Array:
        """``[3]`` the scene's up axis in world coordinates."""
        return self.rotation[:, 2]

    def points(self, canonical: Array) -> Array:
        """World coordinates of canonical points ``[..., 3]``."""
        return self.scale * canonical @ self.rotation.T + np.array(self.offset)

    def poses(self, canonical: Array) -> Array:
        """``[N, 4, 4]`` world camera-to-world matrices of canonical ones (rotation turned, centre placed)."""
        out = np.array(canonical, dtype=np.float64, copy=True)
        out[:, :3, :3] = self.rotation @ out[:, :3, :3]
        out[:, :3, 3] = self.points(out[:, :3, 3])
        return out


IDENTITY = Placement()


def ring_poses(count: int, seed: int, *, target: Array, radius: float, elevation_deg: tuple[float, float],
               radius_jitter: float = 0.08, aim_jitter: float = 0.03) -> Array:
    """``[count, 4, 4]`` cameras around ``target`` (a 360-degree capture).

    Elevations follow a golden spiral uniform in area over the band (seen from ``target``), azimuths
    the golden angle from a seeded start; each distance is ``radius`` times ``1 +- radius_jitter`` and
    each camera aims at ``target`` moved by up to ``aim_jitter * radius`` per axis (seeded).
    """
    rng = np.random.default_rng([seed, 360])
    lo, hi = (math.sin(math.radians(e)) for e in elevation_deg)
    sin_e = lo + (hi - lo) * (np.arange(count) + rng.uniform(0.25, 0.75, count)) / count
    azimuth = rng.uniform(0.0, 2 * math.pi) + math.pi * (3.0 - math.sqrt(5.0)) * np.arange(count)
    distance = radius * (1.0 + rng.uniform(-radius_jitter, radius_jitter, count))
    cos_e = np.sqrt(1.0 - sin_e**2)
    directions = np.stack([cos_e * np.cos(azimuth), cos_e * np.sin(azimuth), sin_e], axis=-1)
    aims = target + rng.uniform(-aim_jitter, aim_jitter, (count, 3)) * radius
    positions = target + distance[:, None] * directions
    return np.stack([look_at(p, a) for p, a in zip(positions, aims, strict=True)])


def grid_poses(columns: int, rows: int, seed: int, *, spacing: float, target: Array,
               position_jitter: float = 0.2, aim_jitter: float = 0.15) -> Array:
    """``[columns * rows, 4, 4]`` forward-facing cameras, row by row from the top left.

    Positions: a ``columns x rows`` grid of ``spacing`` in the ``xz`` plane about the origin, each
    moved by up to ``position_jitter * spacing`` per axis; each camera aims at ``target`` (far along
    ``+y``) moved by up to ``aim_jitter`` per axis (seeded).
    """
    rng = np.random.default_rng([seed, 8])
    xs = (np.arange(columns) - 0.5 * (columns - 1)) * spacing
    zs = (0.5 * (rows - 1) - np.arange(rows)) * spacing
    grid = np.array([[x, 0.0, z] for z in zs for x in xs])
    positions = grid + rng.uniform(-position_jitter, position_jitter, grid.shape) * spacing
    aims = target + rng.uniform(-aim_jitter, aim_jitter, grid.shape)
    return np.stack([look_at(p, a) for p, a in zip(positions, aims, strict=True)])


def aimed_pose(position: Array, target: Array, *, yaw_degrees: float = 0.0, pitch_degrees: float = 0.0,
               roll_degrees: float = 0.0) -> Array:
    """``[4, 4]`` OpenGL camera-to-world of a camera at ``position [3]`` looking at ``target [3]``, then
    turned by ``yaw_degrees`` about world ``+z`` (positive: to the left), its view raised by
    ``pitch_degrees`` and rolled by ``roll_degrees`` about its optical axis (positive: counter-clockwise
    as the photo shows it). The turned view direction must not be vertical."""
    forward = target - position
    azimuth = math.atan2(forward[1], forward[0]) + math.radians(yaw_degrees)
    elevation = math.asin(forward[2] / np.linalg.norm(forward)) + math.radians(pitch_degrees)
    direction = np.array([math.cos(elevation) * math.cos(azimuth), math.cos(elevation) * math.sin(azimuth),
                          math.sin(elevation)])
    m = look_at(position, position + direction)
    m[:3, :3] = m[:3, :3] @ _rotation("z", roll_degrees)  # about the camera's own back axis
    return m


def _wave(rng: np.random.Generator, s: Array, cycles: float) -> Array:
    """``[N]`` a smooth seeded wiggle in ``[-1, 1]`` over times ``s [N]`` in ``[0, 1]``: two sinusoids of
    ``cycles`` and ``2.3 * cycles`` periods over the capture, random phases (a hand's slow drift)."""
    phase = rng.uniform(0.0, 2.0 * math.pi, 2)
    return (0.6 * np.sin(2.0 * math.pi * cycles * s + phase[0])
            + 0.4 * np.sin(2.0 * math.pi * 2.3 * cycles * s + phase[1]))


@dataclass(frozen=True)
class HandheldArc:
    """A phone walked round what it films, one frame per pose, in time order (a video's): by default
    part of the way round a table (``arc_degrees`` 200); the rules below are for that default, and a
    walk of nearly 360 degrees sees every side.

    Rules (canonical frame, ``+z`` up, ``center`` the middle of what is filmed):

    * **A partial arc.** Azimuths about ``center`` go from a seeded start through exactly
      ``arc_degrees`` (first to last frame) at a walking speed that varies by up to about 45%, so the
      far side of the objects is seen only at grazing angles and the cameras' middle is well off the
      objects' middle.
    * **Distance and height drift.** Horizontal distance from ``center`` and height above it wander
      smoothly over ``distance`` and ``height`` (lower, upper), plus 1 cm of hand shake per axis.
    * **Aimed beside the objects.** Every frame looks at ``center`` moved by a seeded horizontal offset
      of ``aim_offset`` (the same for the whole capture: the user frames what they think is the
      middle) and by up to ``aim_jitter`` per axis per frame, so the look-at point is at least
      ``aim_offset - sqrt(2) * aim_jitter`` beside the content's middle (the cameras' focus is not
      where the objects are), and cameras are pitched down at it.
    * **A hand, not a tripod.** Roll drifts by up to ``roll_degrees``, with normal noise of standard
      deviation ``roll_noise_degrees`` on top, and each view turns by up to ``yaw_jitter_degrees`` left
      or right: no camera's right axis is exactly horizontal.
    * **Looking away at the ends.** The first frames turn by ``start_away`` and the last ones by
      ``end_away`` (``(yaw, raise)`` degrees each, as :func:`aimed_pose` takes them): the phone
      coming up from, and going back to, the room, as a video's first and last frames do.

    Attributes:
        frames: how many views.
        center: ``[3]`` the middle of the objects.
        arc_degrees: azimuth walked from the first frame to the last.
        distance, height: ranges (metres when the world is in metres) of the horizontal distance from
            ``center`` and of the height above it.
        aim_offset, aim_jitter: the look-at point's fixed horizontal offset and per-frame jitter.
        roll_degrees, roll_noise_degrees, yaw_jitter_degrees: the hand's unsteadiness.
        start_away, end_away: ``(yaw, raise)`` of the first and last frames, in frame order.
    """

    frames: int = 81
    center: tuple[float, float, float] = (0.0, 0.0, 0.0)
    arc_degrees: float = 200.0
    distance: tuple[float, float] = (0.6, 0.9)
    height: tuple[float, float] = (0.25, 0.55)
    aim_offset: float = 0.12
    aim_jitter: float = 0.03
    roll_degrees: float = 5.0
    roll_noise_degrees: float = 1.5
    yaw_jitter_degrees: float = 2.0
    start_away: tuple[tuple[float, float], ...] = ((60.0, 22.0), (42.0, 14.0), (22.0, 6.0))
    end_away: tuple[tuple[float, float], ...] = ((-30.0, 10.0), (-52.0, 20.0))

    def poses(self, seed: int) -> Array:
        """``[frames, 4, 4]`` canonical cameras, in time (file) order."""
        rng = np.random.default_rng([seed, 220])
        n = self.frames
        s = (np.arange(n) + 0.5) / n
        speed = 1.0 + 0.35 * _wave(rng, s, 1.2) + rng.uniform(-0.1, 0.1, n)
        walked = np.cumsum(speed) - speed[0]
        azimuth = math.radians(rng.uniform(0.0, 360.0)) + math.radians(self.arc_degrees) * walked / walked[-1]
        d_lo, d_hi = self.distance
        h_lo, h_hi = self.height
        distance = 0.5 * (d_lo + d_hi) + 0.5 * (d_hi - d_lo) * _wave(rng, s, 0.8)
        height = 0.5 * (h_lo + h_hi) + 0.5 * (h_hi - h_lo) * _wave(rng, s, 1.1)
        center = np.array(self.center, dtype=np.float64)
        around = np.stack([distance * np.cos(azimuth), distance * np.sin(azimuth), height], axis=-1)
        positions = center + around
        positions += rng.uniform(-0.01, 0.01, (n, 3))
        bias_angle = rng.uniform(0.0, 2.0 * math.pi)
        aim = center + self.aim_offset * np.array([math.cos(bias_angle), math.sin(bias_angle), 0.0])
        aims = aim + rng.uniform(-self.aim_jitter, self.aim_jitter, (n, 3))
        roll = self.roll_degrees * _wave(rng, s, 1.7) + rng.normal(0.0, self.roll_noise_degrees, n)
        yaw = rng.uniform(-self.yaw_jitter_degrees, self.yaw_jitter_degrees, n)
        pitch = np.zeros(n)
        for i, (turn, lift) in enumerate(self.start_away):
            yaw[i] += turn
            pitch[i] += lift
        for i, (turn, lift) in zip(range(n - len(self.end_away), n), self.end_away, strict=True):
            yaw[i] += turn
            pitch[i] += lift
        return np.stack([aimed_pose(p, a, yaw_degrees=float(y), pitch_degrees=float(e), roll_degrees=float(r))
                         for p, a, y, e, r in zip(positions, aims, yaw, pitch, roll, strict=True)])


@dataclass(frozen=True)
class PoseError:
    """The error structure-from-motion leaves on the poses a capture's file records: each training
    view's recorded camera is a little off the camera its photo was taken with.

    The images are rendered at the true poses; the file records, for every frame the loader trains on
    (frame ``i`` with ``i % 8`` not 0 or 4), a pose turned about the camera's own centre by an
    axis-angle vector whose components are normal with standard deviation ``rotation_pixels / f``
    radians, and moved by a vector whose components are normal with standard deviation
    ``translation_pixels / f`` times the camera's distance from ``center`` (``f``: the focal length in
    pixels of the written images). Both are sized in pixels of the written images: about
    ``rotation_pixels`` and ``translation_pixels`` of misregistration per axis at any resolution. Test
    and validation frames keep their true poses, so a test score measures the scene a recipe recovered,
    not the error of the test cameras. Seeded, independent of the cameras' own randomness.

    Attributes:
        rotation_pixels: the turn's standard deviation per axis, in pixels.
        translation_pixels: the move's standard deviation per axis, in pixels at ``center``'s depth.
        center: ``[3]`` canonical point the move is sized at (the filmed objects' middle).
    """

    rotation_pixels: float
    translation_pixels: float
    center: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        for name in ("rotation_pixels", "translation_pixels"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")

    def apply(self, poses: Array, focal_pixels: float, seed: int) -> Array:
        """The cameras as the file records them.

        Args:
            poses: ``[N, 4, 4]`` canonical cameras in file order (the nerfstudio loader's split rule
                counts frames in ``file_path`` order, which is file order for the suite's names).
            focal_pixels: the focal length of the written images, in pixels.
            seed: the scene's seed.

        Returns:
            ``[N, 4, 4]``: the training frames' cameras off, the others as given.
        """
        rng = np.random.default_rng([seed, 404])
        n = len(poses)
        turns = rng.normal(0.0, self.rotation_pixels / focal_pixels, (n, 3))
        moves = rng.normal(0.0, self.translation_pixels / focal_pixels, (n, 3))
        recorded = poses.copy()
        for i in range(n):
            if i % SPLIT_PERIOD in (0, SPLIT_PERIOD // 2):  # test and validation frames
                continue
            angle = float(np.linalg.norm(turns[i]))
            if angle > 0.0:
                recorded[i, :3, :3] = axis_rotation(turns[i] / angle, math.degrees(angle)) @ poses[i, :3, :3]
            distance = float(np.linalg.norm(poses[i, :3, 3] - np.asarray(self.center)))
            recorded[i, :3, 3] = poses[i, :3, 3] + moves[i] * distance
        return recorded


def srgb_to_linear(values: Array) -> Array:
    """Linear light of sRGB-encoded ``values`` in ``[0, 1]`` (IEC 61966-2-1)."""
    return np.where(values <= 0.04045, values / 12.92, ((values + 0.055) / 1.055) ** 2.4)


def linear_to_srgb(values: Array) -> Array:
    """sRGB encoding of linear ``values`` in ``[0, 1]`` (the inverse of :func:`srgb_to_linear`)."""
    return np.where(values <= 0.0031308, values * 12.92, 1.055 * np.power(values, 1.0 / 2.4) - 0.055)


@dataclass(frozen=True)
class Exposure:
    """What a phone's automatic exposure and white balance do to a capture: each training photo is
    exposed and white-balanced a little differently, so the same surface has another colour in each.

    Frame ``i``'s image (sRGB-encoded, in ``[0, 1]``) is taken to linear light, each channel ``c``
    multiplied by ``2 ** (e_i + w_ic)`` and encoded again, clipped at white as a sensor saturates:
    ``e_i`` (the exposure, in stops) is normal with standard deviation ``stops`` and ``w_ic`` (the white
    balance, in stops per channel) normal with standard deviation ``white_balance``. Frames the loader
    holds out (``i % 8`` 0 or 4) keep the rendered image: a test view's colours are the scene's, and a
    recipe that learns the scene apart from each photo's exposure scores on them what it would on a
    capture of fixed exposure. Seeded, independent of the cameras' and :class:`PoseError`'s randomness.

    Attributes:
        stops: standard deviation of a training photo's exposure, in stops (factors of two).
        white_balance: standard deviation of each channel's extra gain, in stops.
    """

    stops: float
    white_balance: float

    def __post_init__(self) -> None:
        for name in ("stops", "white_balance"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")

    def gains(self, frames: int, seed: int) -> Array:
        """``[frames, 3]`` each frame's linear gain per channel (1 for the frames held out)."""
        rng = np.random.default_rng([seed, 505])
        exposure = rng.normal(0.0, self.stops, (frames, 1))
        balance = rng.normal(0.0, self.white_balance, (frames, 3))
        gains = np.exp2(exposure + balance)
        held_out = np.arange(frames) % SPLIT_PERIOD
        gains[(held_out == 0) | (held_out == SPLIT_PERIOD // 2)] = 1.0
        return gains

    @staticmethod
    def apply(image: Array, gain: Array) -> Array:
        """``image [H, W, 3]`` (sRGB-encoded, ``[0, 1]``) as a photo with linear ``gain [3]`` records it."""
        return linear_to_srgb(np.clip(srgb_to_linear(np.clip(image, 0.0, 1.0)) * gain, 0.0, 1.0))
