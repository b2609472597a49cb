"""After ``test``: per-view PSNR/SSIM(/LPIPS) in ``eval.json`` and ``eval.md``, worst views in a PNG
(and, when asked, chosen views' panels one PNG each in ``panels/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from torchmetrics import Metric

from nerf_lightning.callbacks.prediction_writer import view_name, view_stem
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.evaluation.lpips import load_lpips
from nerf_lightning.evaluation.masked import update_image_metrics
from nerf_lightning.evaluation.report import ViewScore, report_record, write_report
from nerf_lightning.evaluation.worst_views import (
    PANELS_DIR,
    WORST_VIEWS_PNG,
    error_panel,
    write_panel,
    write_worst_views,
)
from nerf_lightning.system.module import ImageRender, image_metrics


class EvalReport(pl.Callback):
    """Writes the evaluation report of each ``test`` run into its log directory (beside ``run.json``).

    * ``eval.json``: per view (index, image name, PSNR, SSIM and LPIPS when available) and the means.
      PSNR and SSIM are computed exactly as the module's ``test/psnr`` and ``test/ssim``, whose
      logged values are the means over views.
    * ``eval.md``: the same as a table, worst view (lowest PSNR) first, means last.
    * ``worst_views.png``: the ``worst_k`` worst views, one row each: rendered | ground truth |
      absolute error. Only those ``worst_k`` panels are kept in memory while testing.
    * ``panels/<stem>.png`` (only when asked): one view's panel, rendered | ground truth | absolute
      error, without a caption, for each view of ``panel_views`` and, with ``worst_panels``, each
      of the ``worst_k`` worst views. ``<stem>`` is the prediction writer's (``003_r_3``: the index
      in the test split and the image's name; see ``eval.json`` for both).

    LPIPS (torchmetrics, ``normalize=True``) is computed only when torchvision and the backbone's
    weights are already on the machine; otherwise one info line says why it was skipped.

    Args:
        enabled: write the report (``false`` turns the callback off).
        worst_k: views in ``worst_views.png`` (``0``: no image).
        lpips: try LPIPS.
        lpips_net: LPIPS backbone, ``alex``, ``vgg`` or ``squeeze``.
        panel_views: test views (indices in the split) whose panels are written to ``panels/``
            (indices past the split's end are ignored).
        worst_panels: also write the ``worst_k`` worst views' panels to ``panels/``.
    """

    def __init__(self, enabled: bool = True, worst_k: int = 4, lpips: bool = True,
                 lpips_net: Literal["alex", "vgg", "squeeze"] = "alex", panel_views: list[int] | None = None,
                 worst_panels: bool = False) -> None:
        if worst_k < 0:
            raise ValueError(f"worst_k must be an integer >= 0, got {worst_k}")
        if any(index < 0 for index in panel_views or []):
            raise ValueError(f"panel_views must be view indices >= 0, got {panel_views}")
        self.enabled = enabled
        self.worst_k = worst_k
        self.lpips = lpips
        self.lpips_net = lpips_net
        self.panel_views = list(panel_views or [])
        self.worst_panels = worst_panels
        self._metrics = image_metrics("", sync_on_compute=False)  # one view, this process
        self._lpips_metric: Metric | None = None
        self._lpips_status: dict[str, str] = {}
        self._views: list[ViewScore] = []
        self._worst: list[tuple[ViewScore, Tensor]] = []
        self._kept: list[tuple[ViewScore, Tensor]] = []  # the panel_views' panels
        self._checkpoint_step: int | None = None

    # ----------------------------------------------------------------- set-up
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._views, self._worst, self._kept = [], [], []
        if not self.enabled:
            return
        self._metrics = self._metrics.to(pl_module.device)
        if not self._lpips_status:  # decided once per callback (and so the info line is said once)
            self._lpips_status = self._setup_lpips()
        if self._lpips_metric is not None:
            self._lpips_metric = self._lpips_metric.to(pl_module.device)

    def _setup_lpips(self) -> dict[str, str]:
        if not self.lpips:
            return {"skipped": "turned off (eval_report.lpips=false)"}
        self._lpips_metric, reason = load_lpips(self.lpips_net)
        if self._lpips_metric is None:
            rank_zero_info(f"LPIPS skipped: {reason}")
            return {"skipped": reason}
        return {"net": self.lpips_net}

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        self._checkpoint_step = checkpoint.get("global_step")  # a tested checkpoint's step (not restored)

    # -------------------------------------------------------------- per view
    def on_test_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                          batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if not self.enabled or not isinstance(outputs, ImageRender):
            return
        index = batch.image_index if isinstance(batch, RayBatch) and batch.image_index >= 0 else batch_idx
        target = outputs.target.permute(2, 0, 1)[None]
        self._metrics.reset()
        pred = update_image_metrics(self._metrics, outputs.rgb, outputs.target, outputs.mask)
        values = self._metrics.compute()
        view = ViewScore(index=index, name=view_name(trainer, "test", index), psnr=float(values["psnr"]),
                         ssim=float(values["ssim"]), lpips=self._lpips_of(pred, target))
        self._views.append(view)
        keep = index in self.panel_views
        if self.worst_k > 0 or keep:
            panel = error_panel(outputs.rgb, outputs.target)
            if keep:
                self._kept.append((view, panel))
            if self.worst_k > 0:
                self._worst.append((view, panel))
                self._worst = _worst_k(self._worst, self.worst_k)

    def _lpips_of(self, pred: Tensor, target: Tensor) -> float | None:
        if self._lpips_metric is None:
            return None
        try:
            self._lpips_metric.reset()
            return float(self._lpips_metric(pred.float(), target.float()))
        except Exception as error:  # e.g. an image too small for the backbone's pooling
            self._lpips_metric = None
            self._lpips_status = {"skipped": f"{type(error).__name__}: {error}".splitlines()[0]}
            rank_zero_info(f"LPIPS skipped: {self._lpips_status['skipped']}")
            return None

    # --------------------------------------------------------------- writing
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.enabled:
            return
        views, worst, kept = _gather(trainer, self._views, self._worst, self.worst_k, self._kept)
        log_dir = trainer.log_dir  # every rank: under DDP finding it is a collective
        if not trainer.is_global_zero:
            return
        lpips_status = self._lpips_status
        if "skipped" in lpips_status:  # also when it failed part-way: no half-filled column
            views = [ViewScore(v.index, v.name, v.psnr, v.ssim) for v in views]
        step = self._checkpoint_step if trainer.ckpt_path and self._checkpoint_step is not None \
            else trainer.global_step
        record = report_record(views, "test", lpips_status, checkpoint=trainer.ckpt_path, global_step=step)
        directory = Path(log_dir or ".")
        _, markdown = write_report(record, directory)
        if self.worst_k > 0:
            rows = [(_caption(rank, view), panel) for rank, (view, panel) in enumerate(worst, start=1)]
            write_worst_views(rows, directory / WORST_VIEWS_PNG)
        singles = [*kept, *(worst if self.worst_panels else [])]
        for view, panel in {view.index: (view, panel) for view, panel in singles}.values():
            write_panel(panel, directory / PANELS_DIR / f"{view_stem(view.index, view.name)}.png")
        mean = record["mean"]
        rank_zero_info(f"eval report: {markdown} ({len(views)} views, mean PSNR {mean['psnr']:.2f} dB)")
        self._views, self._worst, self._kept = [], [], []


def _worst_k(panels: list[tuple[ViewScore, Tensor]], k: int) -> list[tuple[ViewScore, Tensor]]:
    """The ``k`` lowest-PSNR panels, worst first, each view once."""
    by_view = {view.index: (view, panel) for view, panel in panels}
    return sorted(by_view.values(), key=lambda item: (item[0].psnr, item[0].index))[:k]


def _caption(rank: int, view: ViewScore) -> str:
    name = f" {view.name}" if view.name else ""
    return f"#{rank} view {view.index}{name}  PSNR {view.psnr:.2f}"


Panels = list[tuple[ViewScore, Tensor]]


def _gather(trainer: pl.Trainer, views: list[ViewScore], worst: Panels, k: int, kept: Panels | None = None
            ) -> tuple[list[ViewScore], Panels, Panels]:
    """Every rank's views, worst panels and kept panels (each view once: a distributed sampler may
    repeat some)."""
    kept = kept or []
    if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        gathered: list[Any] = [None] * trainer.world_size
        torch.distributed.all_gather_object(gathered, (views, worst, kept))
        views = [view for part_views, _, _ in gathered for view in part_views]
        worst = [item for _, part_worst, _ in gathered for item in part_worst]
        kept = [item for _, _, part_kept in gathered for item in part_kept]
    unique = sorted({view.index: view for view in views}.values(), key=lambda view: view.index)
    kept = sorted({view.index: (view, panel) for view, panel in kept}.values(),
                  key=lambda item: item[0].index)
    return unique, _worst_k(worst, k), kept
