"""Writes the images ``nerf-lightning predict`` renders: colour and colour-mapped depth PNGs per view."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import lightning.pytorch as pl
import numpy as np
from lightning.pytorch.callbacks import BasePredictionWriter
from lightning.pytorch.utilities import rank_zero_info
from PIL import Image

from nerf_lightning.data.batch import RayBatch
from nerf_lightning.rendering.colormap import colorize_depth, depth_range
from nerf_lightning.scenes.images import quantize_to_uint8
from nerf_lightning.system.contract import NamedSplits, conforms
from nerf_lightning.system.image_render import ImageRender

PREDICT_SPLIT = "test"
"""The split ``predict`` renders: ``NerfDataModule.predict_dataloader`` gives the test views."""

PREDICTIONS_DIR = "predictions"


class PredictionWriter(BasePredictionWriter):
    """Writes every image ``predict`` renders into ``output_dir`` (default: the run's log directory
    ``/predictions``), as soon as it is rendered.

    Per view, ``<stem>`` being its index in the split and its image's file name
    (``003_r_3``; just ``003`` without a name):

    * ``<stem>_rgb.png``: the rendered colours, 8-bit (``round(255 * rgb)``);
    * ``<stem>_depth.png``: the expected depth colour-mapped (turbo: near red, far blue, empty
      space black, as ``render --depth``) over ``depth_range``;
    * ``<stem>_depth.npy`` with ``raw_depth``: the depth itself, float32 ``[H, W]`` in world units
      (0 where the ray hit nothing: see the opacity in the PNG's brightness).

    Each file is written under a temporary name in the same folder and renamed when complete,
    so a killed run leaves no half-written image under a real name; existing files are replaced.
    Under data parallelism each rank writes the views it rendered. The callback keeps no state
    between runs (nothing in checkpoints) and does nothing outside ``predict``.

    Args:
        enabled: write the images (``false`` turns the callback off).
        output_dir: folder for the files (created); ``None``: ``<log dir>/predictions``.
        depth_range: ``[near, far]`` (world units) of the depth colours, the same for every view so
            views compare; ``None``: each view's 2 % and 98 % depth quantiles over its opaque pixels.
        raw_depth: also write the depth as ``.npy``.
    """

    def __init__(self, enabled: bool = True, output_dir: str | None = None,
                 depth_range: tuple[float, float] | None = None, raw_depth: bool = False) -> None:
        super().__init__(write_interval="batch")
        if depth_range is not None and not float(depth_range[1]) > float(depth_range[0]):
            raise ValueError(f"depth_range must be [near, far] with far > near, got {list(depth_range)}")
        self.enabled = enabled
        self.output_dir = output_dir
        self.depth_range = depth_range
        self.raw_depth = raw_depth
        self._directory: Path | None = None
        self._written = 0
        self._warnings: warnings.catch_warnings | None = None

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._written = 0
        if not self.enabled:
            return
        # Lightning tracks batch indices for prediction writers and warns that it cannot for the
        # data module's one-image batches (no batch sampler); views are named from the batch itself.
        # The filter lasts until predict ends: the process's other warnings stay as they were.
        self._warnings = warnings.catch_warnings()
        self._warnings.__enter__()
        warnings.filterwarnings("ignore", message="Couldn't infer the batch indices", category=UserWarning)
        # On every rank, once: under data parallelism finding the log directory is a collective.
        if self.output_dir is not None:
            self._directory = Path(self.output_dir)
        else:
            self._directory = Path(trainer.log_dir or ".") / PREDICTIONS_DIR
        self._directory.mkdir(parents=True, exist_ok=True)

    def write_on_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, prediction: Any,
                           batch_indices: Sequence[int] | None, batch: Any, batch_idx: int,
                           dataloader_idx: int = 0) -> None:
        if not self.enabled or self._directory is None or not isinstance(prediction, ImageRender):
            return
        index = batch.image_index if isinstance(batch, RayBatch) and batch.image_index >= 0 else batch_idx
        self.write_view(prediction, view_stem(index, view_name(trainer, PREDICT_SPLIT, index)))
        self._written += 1

    def write_view(self, image: ImageRender, stem: str) -> list[Path]:
        """Write one view's files as ``<directory>/<stem>_*``; returns their paths."""
        assert self._directory is not None, "write_view runs after on_predict_start"
        rgb = quantize_to_uint8(image.rgb.float().cpu())
        near, far = self.depth_range or depth_range(image.depth, image.opacity)
        depth_colours = quantize_to_uint8(colorize_depth(image.depth, image.opacity, near, far).cpu())
        written = [
            _write_atomically(self._directory / f"{stem}_rgb.png", _png(rgb.numpy())),
            _write_atomically(self._directory / f"{stem}_depth.png", _png(depth_colours.numpy())),
        ]
        if self.raw_depth:
            depth = image.depth[..., 0].float().cpu().numpy()
            written.append(_write_atomically(self._directory / f"{stem}_depth.npy",
                                             lambda handle: np.save(handle, depth, allow_pickle=False)))
        return written

    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore_warnings()
        if self.enabled and self._directory is not None:
            count = f"{self._written} views" if trainer.world_size == 1 else "views"  # rank zero's count only
            rank_zero_info(f"predictions: {count} written to {self._directory}")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        self._restore_warnings()

    def _restore_warnings(self) -> None:
        if self._warnings is not None:
            self._warnings.__exit__(None, None, None)
            self._warnings = None


def view_stem(index: int, name: str) -> str:
    """``003_r_3`` for view 3 of image ``test/r_3.png``; ``003`` without a name. Characters other
    than letters, digits, ``.``, ``-`` and ``_`` become ``_`` (names come from dataset files)."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).stem) if name else ""
    return f"{index:03d}_{stem}" if stem else f"{index:03d}"


def view_name(trainer: pl.Trainer, split: str, index: int) -> str:
    """The image name of view ``index`` of ``split`` (``test/r_3.png``) when the trainer's data module
    names its views (:class:`~nerf_lightning.system.contract.NamedSplits`); ``""`` otherwise."""
    datamodule = trainer.datamodule
    if not conforms(datamodule, NamedSplits) or (loaded := datamodule.splits.get(split)) is None:
        return ""
    return str(loaded.names[index]) if 0 <= index < len(loaded.names) else ""


def _png(pixels: np.ndarray) -> Callable[[IO[bytes]], None]:
    """Writes ``[H, W, 3]`` uint8 ``pixels`` as a PNG to a binary file."""
    return lambda handle: Image.fromarray(pixels).save(handle, format="PNG")


def _write_atomically(path: Path, write: Callable[[IO[bytes]], None]) -> Path:
    """``write`` into a temporary file beside ``path``, then rename it onto ``path``."""
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(temporary, "wb") as handle:
            write(handle)
        os.replace(temporary, path)
    finally:
        if temporary.exists():
            temporary.unlink()
    return path
