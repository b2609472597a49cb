"""A live 3D view of training in the browser (``--viewer.enabled true``)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Timer

from nerf_lightning.callbacks.telemetry import Telemetry
from nerf_lightning.system.contract import ImageRenderingModule, require
from nerf_lightning.system.step_logging import logs_this_step
from nerf_lightning.viewer import viewer_missing

if TYPE_CHECKING:  # viser is an optional extra: imported only when the viewer is on
    from nerf_lightning.viewer.session import ViewerSession

TRAINING_FRAME_S = 0.1
"""Frame time aimed at between training steps; with ``render_share`` this sets how often frames come."""
POINTS_EVERY_S = 10.0
"""Seconds between refreshes of the occupied-space point cloud while a browser watches."""
MAX_POINTS = 30_000
PROGRESS_EVERY_S = 0.5


class Viewer(pl.Callback):
    """Serves a page showing the scene while it trains: training cameras with thumbnails, the scene
    box, the sampler's occupied space and a live render from the browser's camera (rgb, depth,
    opacity or samples per ray), with pause/resume, a resolution cap and progress (step, PSNR, rays/s).

    Frames are rendered between training steps, only while a browser is connected, and only while
    rendering stays within ``render_share`` of the wall time; their size adapts so each takes about
    :data:`TRAINING_FRAME_S`. While paused, frames follow the camera interactively (reduced while it
    moves, refined when it stops). Closing the last browser resumes a paused run, so a run is never
    left waiting for nobody. Under data parallelism only rank 0 serves, and pausing is off (one rank
    waiting would hold the others at their next collective). Paused time is not training time: it
    does not count towards ``--trainer.max_time`` (Lightning's ``Timer``), so a run paused to look
    around still trains as long as it was given.

    Args:
        enabled: serve the viewer (off by default).
        host: address to listen on; ``127.0.0.1`` keeps it to this machine (reach it from elsewhere
            with an SSH tunnel, see the README); ``0.0.0.0`` exposes it on purpose.
        port: port to listen on (the next free one when taken; ``0``: any free one).
        max_resolution: initial cap on the long side of a frame, in pixels (the page changes it).
        render_share: largest share of the wall time spent rendering while training runs.

    The module must render images and have a sampler to show
    (:class:`~nerf_lightning.system.contract.ImageRenderingModule`, checked when ``fit`` starts with the
    viewer on).

    Logged with the training metrics (rank 0): ``viewer/frames_sent`` and ``viewer/render_seconds``
    (frames and point clouds made while training ran, pauses excluded), so a run records what
    watching it cost.
    """

    def __init__(self, enabled: bool = False, host: str = "127.0.0.1", port: int = 7007,
                 max_resolution: int = 512, render_share: float = 0.08) -> None:
        if enabled and (missing := viewer_missing()) is not None:
            raise ValueError(f"enabled is true, but the viewer {missing}")
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be a port number in [0, 65535], got {port}")
        if max_resolution < 16:
            raise ValueError(f"max_resolution must be at least 16 pixels, got {max_resolution}")
        if not 0.0 < render_share <= 1.0:
            raise ValueError(f"render_share must be a share in (0, 1], got {render_share}")
        self.enabled = enabled
        self.host = host
        self.port = port
        self.max_resolution = max_resolution
        self.render_share = render_share
        self.session: ViewerSession | None = None
        self.training_render_seconds = 0.0  # frames and point clouds made while training ran (not paused)
        self._share: Any = None
        self._last_points = self._last_progress = 0.0
        self._window_start, self._window_rays, self._rays_per_s = time.perf_counter(), 0, 0.0

    # ----------------------------------------------------------------- set-up
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or not self.enabled or not trainer.is_global_zero or self.session is not None:
            return
        require(self, pl_module, ImageRenderingModule)
        from nerf_lightning.viewer.pacing import TimeShare
        from nerf_lightning.viewer.render import ViewScene
        from nerf_lightning.viewer.session import ViewerSession

        datamodule = trainer.datamodule
        train = datamodule.splits["train"]
        self.session = ViewerSession(ViewScene.from_datamodule(datamodule), train.cameras, train.images,
                                     host=self.host, port=self.port, max_resolution=self.max_resolution,
                                     training=True, can_pause=trainer.world_size == 1)
        self._share = TimeShare(self.render_share)
        self.session.announce()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.session is not None and stage == "fit":
            self.session.close()
            self.session = None

    # --------------------------------------------------------------- per step
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        session = self.session
        if session is None:
            return
        self._count_rays(outputs, batch)
        if logs_this_step(trainer):  # what watching costs, beside the run's other metrics (rank 0 only)
            pl_module.log("viewer/frames_sent", float(session.frames_sent), rank_zero_only=True)
            pl_module.log("viewer/render_seconds", self.training_render_seconds, rank_zero_only=True)
        if not session.has_clients():
            return
        now = time.perf_counter()
        if now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            session.controls.show_progress(self._progress(trainer))
        worked = self.send_waiting_frames(trainer, pl_module)
        if session.controls.paused:
            self._wait_while_paused(trainer, pl_module)
            worked = True
        if worked:
            # The time went to the viewer, not to the next step's data loading.
            for callback in trainer.callbacks:
                if isinstance(callback, Telemetry):
                    callback.pause()

    def send_waiting_frames(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> bool:
        """Frames of the model as it is for the browsers that wait, within the rendering share (a
        browser's first frame at once); whether anything was rendered. Called after each training
        step on rank 0 (and by anything that holds the step, e.g. until a browser has seen it)."""
        session = self.session
        assert session is not None
        worked = False
        for client in session.waiting(trainer.global_step, refine=False):
            if not (session.is_new(client) or self._share.allowed()):
                continue
            pixels = session.budget.pixels(TRAINING_FRAME_S)
            seconds = session.render_frame(pl_module, client, pixels, trainer.global_step)
            self._share.spent(seconds)
            self.training_render_seconds += seconds
            worked = True
        now = time.perf_counter()
        if worked and now - self._last_points >= POINTS_EVERY_S:
            start = now
            session.show_points(cast(ImageRenderingModule, pl_module).sampler.occupied_points(MAX_POINTS))
            self._last_points = time.perf_counter()
            self._share.spent(self._last_points - start)
            self.training_render_seconds += self._last_points - start
        return worked

    def _wait_while_paused(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Hold training while paused, rendering interactively; resume when the last browser leaves."""
        session = self.session
        assert session is not None
        paused_at = time.monotonic()
        session.controls.show_progress(self._progress(trainer) + " — paused")
        while session.controls.paused and not trainer.should_stop:
            if not session.has_clients():
                session.controls.set_paused(False)
                print("viewer: no browser left; training resumes", flush=True)
                break
            if not session.render_interactive(pl_module, trainer.global_step,
                                              cancelled=lambda: not session.controls.paused):
                session.controls.resumed.wait(0.02)
        self._window_start, self._window_rays = time.perf_counter(), 0  # paused time is not training time
        _not_training_time(trainer, time.monotonic() - paused_at)

    # --------------------------------------------------------------- progress
    def _count_rays(self, outputs: Any, batch: Any) -> None:
        rays = outputs.get("num_rays") if isinstance(outputs, dict) else None
        self._window_rays += int(rays) if rays is not None else len(batch)
        elapsed = time.perf_counter() - self._window_start
        if elapsed >= 1.0:
            self._rays_per_s = self._window_rays / elapsed
            self._window_start, self._window_rays = time.perf_counter(), 0

    def _progress(self, trainer: pl.Trainer) -> str:
        metrics = trainer.callback_metrics
        psnr = metrics.get("train/psnr")
        psnr_text = f"{float(psnr):.2f} dB" if psnr is not None else "-"
        return f"step {trainer.global_step} · PSNR {psnr_text} · {self._rays_per_s:,.0f} rays/s"




def _not_training_time(trainer: pl.Trainer, seconds: float) -> None:
    """Take ``seconds`` off the training time that Lightning's ``Timer`` (``max_time``) counts.

    The ``Timer`` measures wall time since training started plus the time a resumed checkpoint had
    spent (its ``_offset``); lowering that offset is the one way to leave a span out, and it is
    also what the ``Timer`` saves in checkpoints, so a resumed run does not count the span either.
    """
    for callback in trainer.callbacks:
        if isinstance(callback, Timer):
            callback._offset -= seconds
