"""Frames of a video for ``data process VIDEO DST``: evenly spread, the sharpest of each neighbourhood.

A hand-held video has far more frames than structure-from-motion needs (consecutive frames add almost
no baseline and cost matching time) and some are blurred by motion. So the video is cut into
``num_frames`` neighbourhoods of equal length; in each, :data:`CANDIDATES_PER_FRAME` frames spread
evenly are candidates and the sharpest one is kept, by the variance of the Laplacian of its grey
image (Pech-Pacheco et al. 2000: motion and defocus blur remove high frequencies, which the Laplacian
measures). Candidates of one neighbourhood come from a short stretch of time, so they show nearly the
same view and their scores compare the blur, not the content.

Decoding is ``imageio_ffmpeg.read_frames`` (the ``video`` extra), one pass over the stream; only the
candidates are converted and scored, and only one neighbourhood's best frame is held at a time, so
memory does not grow with the video. Kept frames are written as PNG (lossless: the video's own
compression is artefact enough) named ``frame_NNNNN.png`` by their frame number, so name order is
time order, which sequential matching relies on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from nerf_lightning.datasets.process.sfm import ProcessError
from nerf_lightning.scenes.errors import DatasetError

VIDEO_SUFFIXES = (".mp4", ".mov", ".m4v", ".mkv", ".avi", ".webm")
"""Files taken as a video by ``data process`` (ffmpeg reads many more; these are what cameras and
phones write)."""
DEFAULT_NUM_FRAMES = 100
"""Enough views for a NeRF (the Blender scenes train on 100) while sequential matching and mapping,
whose cost grows with the number of frames, stay practical on a CPU; ``--num_frames`` changes it."""
CANDIDATES_PER_FRAME = 3
"""Frames scored per kept frame: a blurred frame is usually next to a sharp one, and more candidates
cost decoding time for little gain."""
MIN_FRAMES = 3

_LAPLACIAN = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]]).reshape(1, 1, 3, 3)
_GREY = (0.299, 0.587, 0.114)  # ITU-R BT.601 luma weights


def _import_imageio_ffmpeg() -> ModuleType:
    try:
        import imageio_ffmpeg
    except ImportError:
        raise ProcessError("reading a video needs imageio-ffmpeg, the 'video' extra: pip install -c "
                           "constraints.txt '.[video]' in the project folder") from None
    return imageio_ffmpeg


def is_video(path: Path) -> bool:
    """Whether ``path`` is a file with a video suffix (:data:`VIDEO_SUFFIXES`)."""
    return path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES


def _reason(error: Exception) -> str:
    """The last line of ffmpeg's message, e.g. ``Invalid data found when processing input``."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    last = lines[-1] if lines else type(error).__name__
    return last.split(": ", 1)[-1] if last.lower().startswith("error") else last


def count_frames(video: Path) -> int:
    """The number of frames of ``video``.

    Raises:
        DatasetError: ffmpeg cannot decode it, or it has fewer than :data:`MIN_FRAMES` frames.
    """
    imageio_ffmpeg = _import_imageio_ffmpeg()
    try:
        count, _ = imageio_ffmpeg.count_frames_and_secs(str(video))
    except (RuntimeError, OSError) as error:
        raise DatasetError(video, f"cannot be decoded as a video ({_reason(error)})") from None
    if count < MIN_FRAMES:
        raise DatasetError(video, f"has {count} video frame(s); expected at least {MIN_FRAMES}")
    return int(count)


def neighbourhoods(total: int, num_frames: int, per_frame: int = CANDIDATES_PER_FRAME) -> list[list[int]]:
    """Candidate frame numbers, grouped: ``min(num_frames, total)`` groups of consecutive candidates
    spread evenly over ``0 .. total - 1`` (every frame a candidate when there are few)."""
    count = min(total, num_frames * per_frame)
    candidates = np.unique(np.linspace(0, total - 1, count).round().astype(np.int64))
    groups = np.array_split(candidates, min(num_frames, len(candidates)))
    return [[int(i) for i in group] for group in groups if len(group)]


def sharpness(frame: np.ndarray) -> float:
    """Variance of the Laplacian of a ``[H, W, 3]`` uint8 frame's grey image (higher: sharper)."""
    rgb = torch.from_numpy(frame.astype(np.float32))  # a copy: decoded frames are read-only buffers
    grey = (rgb * torch.tensor(_GREY)).sum(-1)[None, None]
    return float(torch.nn.functional.conv2d(grey, _LAPLACIAN).var())


@dataclass(frozen=True)
class Kept:
    """The frame kept for a neighbourhood: its ``number`` in the video, its pixels and its score."""

    number: int
    frame: np.ndarray
    score: float


def select_sharpest(frames: Iterable[np.ndarray], groups: list[list[int]],
                    on_frame: Callable[[], None] = lambda: None) -> Iterator[Kept]:
    """The sharpest candidate of each group, yielded as soon as the group's last candidate is read.

    Args:
        frames: the video's frames in order (frame ``i`` is the ``i``-th item).
        groups: candidate frame numbers, groups in order (:func:`neighbourhoods`).
        on_frame: called after each frame read (progress).
    """
    group_of = {number: g for g, group in enumerate(groups) for number in group}
    best: Kept | None = None
    current = 0
    for number, frame in enumerate(frames):
        on_frame()
        g = group_of.get(number)
        if g is None:
            continue
        if g != current and best is not None:  # a stream shorter than counted may skip a group's end
            yield best
            best = None
        current = g
        score = sharpness(frame)
        if best is None or score > best.score:
            best = Kept(number, frame, score)
        if number == groups[g][-1]:
            yield best
            best = None
        if number >= groups[-1][-1]:
            return
    if best is not None:
        yield best


def _decoded(video: Path) -> Iterator[np.ndarray]:
    """``video``'s frames as ``[H, W, 3]`` uint8 arrays; :class:`DatasetError` when ffmpeg fails."""
    imageio_ffmpeg = _import_imageio_ffmpeg()
    try:
        reader = imageio_ffmpeg.read_frames(str(video), pix_fmt="rgb24")
        meta = next(reader)
        width, height = meta["size"]
        for raw in reader:
            yield np.frombuffer(raw, dtype=np.uint8).reshape(height, width, 3)
    except (RuntimeError, OSError, StopIteration) as error:
        raise DatasetError(video, f"cannot be decoded as a video ({_reason(error)})") from None


def extract_frames(video: Path, out: Path, num_frames: int, *, total: int | None = None,
                   on_frame: Callable[[], None] = lambda: None) -> list[str]:
    """Write the kept frames of ``video`` into folder ``out`` (replaced); their file names, in order.
    ``total``: the video's frame count when known (:func:`count_frames`).

    Raises:
        DatasetError: the video cannot be decoded or gives fewer than :data:`MIN_FRAMES` frames.
    """
    from PIL import Image

    total = count_frames(video) if total is None else total
    groups = neighbourhoods(total, num_frames)
    width = max(5, len(str(total - 1)))
    if out.exists():
        for stale in out.iterdir():
            stale.unlink()
    out.mkdir(parents=True, exist_ok=True)
    names = []
    for kept in select_sharpest(_decoded(video), groups, on_frame):
        name = f"frame_{kept.number:0{width}d}.png"
        Image.fromarray(kept.frame).save(out / name)
        names.append(name)
    if len(names) < MIN_FRAMES:
        raise DatasetError(video, f"gave {len(names)} decodable frame(s); expected at least {MIN_FRAMES}")
    return names
