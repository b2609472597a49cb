"""Frame-by-frame video writers: ``.mp4`` (H.264 through imageio-ffmpeg) and ``.gif`` (Pillow).

Frames are ``[H, W, 3]`` uint8 tensors or arrays, all of one size. An mp4 is encoded as frames
arrive (ffmpeg reads them from a pipe: nothing accumulates); a gif is written by Pillow at the
end, so its frames are kept, as palette images (one byte per pixel). Either is written under
a temporary name and renamed when complete (:class:`~nerf_lightning.files.PendingFile`), so a failed
render leaves no half-written file.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image
from torch import Tensor

from nerf_lightning.files import PendingFile

VIDEO_SUFFIXES = (".mp4", ".gif")


class VideoError(ValueError):
    """A video cannot be written (unknown file type, missing encoder)."""


class VideoWriter(Protocol):
    def write(self, frame: Tensor | np.ndarray) -> None: ...

    def close(self) -> None: ...

    def abort(self) -> None: ...


def check_video_path(path: Path) -> None:
    """Raise :class:`VideoError` unless ``path`` names a writable video type with its encoder installed."""
    suffix = path.suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        found = suffix or "no extension"
        raise VideoError(f"{path}: unknown video type ({found}); expected {' or '.join(VIDEO_SUFFIXES)}")
    if suffix == ".mp4":
        try:
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise VideoError(
                f"{path}: writing .mp4 needs imageio-ffmpeg (pip install 'nerf-lightning[video]'); "
                "or write a .gif"
            ) from None


def open_video(path: Path, fps: float) -> VideoWriter:
    """A writer for ``path`` (``.mp4`` or ``.gif``) at ``fps`` frames per second."""
    check_video_path(path)
    pending = PendingFile(path)  # the temporary name keeps the suffix: ffmpeg picks the container by it
    if path.suffix.lower() == ".mp4":
        return _Mp4Writer(pending, fps)
    return _GifWriter(pending, fps)


def _array(frame: Tensor | np.ndarray) -> np.ndarray:
    array = frame.numpy() if isinstance(frame, Tensor) else frame
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] != 3:
        raise ValueError(f"expected a frame [H, W, 3] uint8, got {array.shape} {array.dtype}")
    return np.ascontiguousarray(array)


class _Mp4Writer:
    """H.264 in yuv420p (plays everywhere), which needs even sizes: odd frames get an edge row/column."""

    def __init__(self, pending: PendingFile, fps: float) -> None:
        self.pending, self.path, self.fps = pending, pending.target, fps
        self._encoder: Generator[None, bytes | None, None] | None = None

    def write(self, frame: Tensor | np.ndarray) -> None:
        array = _array(frame)
        height, width = array.shape[:2]
        array = np.pad(array, ((0, height % 2), (0, width % 2), (0, 0)), mode="edge")
        if self._encoder is None:
            import imageio_ffmpeg

            self._encoder = imageio_ffmpeg.write_frames(
                str(self.pending.path), (array.shape[1], array.shape[0]), fps=self.fps, codec="libx264",
                macro_block_size=2, ffmpeg_log_level="error",
            )
            self._encoder.send(None)  # start ffmpeg
        self._encoder.send(array.tobytes())

    def close(self) -> None:
        if self._encoder is None:
            raise VideoError(f"{self.path}: no frames to write")
        self._encoder.close()  # ffmpeg finishes the file
        self.pending.commit()

    def abort(self) -> None:
        if self._encoder is not None:
            self._encoder.close()
        self.pending.discard()


class _GifWriter:
    """Looping gif; each frame is reduced to a 256-colour palette as it arrives."""

    def __init__(self, pending: PendingFile, fps: float) -> None:
        self.pending, self.path = pending, pending.target
        self.duration_ms = max(round(1000.0 / fps), 10)
        self._frames: list[Image.Image] = []

    def write(self, frame: Tensor | np.ndarray) -> None:
        self._frames.append(Image.fromarray(_array(frame)).quantize(colors=256))

    def close(self) -> None:
        if not self._frames:
            raise VideoError(f"{self.path}: no frames to write")
        first, *rest = self._frames
        try:
            first.save(self.pending.path, format="GIF", save_all=True, append_images=rest,
                       duration=self.duration_ms, loop=0)
        except BaseException:
            self.pending.discard()
            raise
        self.pending.commit()
        self._frames = []

    def abort(self) -> None:
        self._frames = []
        self.pending.discard()
