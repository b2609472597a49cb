"""After ``test``: per-view PSNR/SSIM(/LPIPS) in ``eval.json`` and ``eval.md``, worst views in a PNG
(and, when asked, chosen views' panels one PNG each in ``panels/``), training views' PSNR beside the
tested ones and one line when the model fits its training photos far better than new views."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import Tensor
from torchmetrics import Metric

from nerf_lightning.callbacks.prediction_writer import view_name, view_stem
from nerf_lightning.core.errors import CheckpointError
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.evaluation.lpips import load_lpips
from nerf_lightning.evaluation.masked import update_image_metrics
from nerf_lightning.evaluation.report import ViewScore, report_record, training_scores, write_report
from nerf_lightning.evaluation.worst_views import (
    PANELS_DIR,
    WORST_VIEWS_PNG,
    error_panel,
    write_panel,
    write_worst_views,
)
from nerf_lightning.system.contract import ImageBatches, ImageRenderingModule, ScoredSplit, conforms, missing
from nerf_lightning.system.image_render import ImageRender
from nerf_lightning.system.module import image_metrics


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

    **Training views.** At the end of ``test`` it also renders ``train_views`` views of the training
    split, spread evenly over it (:func:`evenly_spaced`: a capture's first photos are often neighbours),
    through the module's ``render_image`` from the data module's own ``image_batch``: the batches
    ``--data.test_split train`` tests, each photo as it was fitted (``as_fitted``), with its own
    per-image parameters (appearance code or colour correction, camera correction) when the model has
    them, so the score is how well the model reproduces the photo it learned, whatever that photo's
    exposure or pose error. ``eval.json`` gets
    ``train`` (their count, mean PSNR and SSIM, each view) and ``gap_db``, training minus tested mean
    PSNR; a well-posed scene reproduces new views nearly as well as the photos it was fitted to, so a
    large gap means it learned the photos, not the scene (or, with per-image appearance, that new views
    differ in exposure from the mean of the training photos: ``AppearanceHalfFit`` measures that). When
    the gap exceeds ``overfit_gap_db``, one line (:func:`overfit_warning`) says so and names what to
    check. No extra pass when the tested split is already ``train``, when ``train_views`` is 0, or when
    the module or data module cannot render single views (:class:`ImageRenderingModule`,
    :class:`ImageBatches`), or when a checkpoint of another capture holds no per-image row for a
    training photo; ``train`` then says why. Under data parallelism each rank renders a share.

    Args:
        enabled: write the report (``false`` turns the callback off).
        worst_k: views in ``worst_views.png`` (``0``: no image).
        lpips: try LPIPS.
        lpips_net: LPIPS backbone, ``alex``, ``vgg`` or ``squeeze``.
        panel_views: test views (indices in the split) whose panels are written to ``panels/``
            (indices past the split's end are ignored).
        worst_panels: also write the ``worst_k`` worst views' panels to ``panels/``.
        train_views: training views scored beside the tested ones, one whole-image render each
            (``0``: none; more than the split has: all of them).
        overfit_gap_db: the gap (training minus tested mean PSNR, dB) above which ``test`` prints the
            overfitting line. 3 dB is a factor of two in mean squared error: tested views twice as far
            from their photos as the training views are. A scene a recipe handles stays well below it,
            its tested views lying among the training views and seeing the same content (the demo
            config's 400-step demo run: 0.4 dB), while the untuned 360-degree capture that prompted the
            check was 16.4 dB apart. ``inf`` never prints it.
    """

    def __init__(self, enabled: bool = True, worst_k: int = 4, lpips: bool = True,
                 lpips_net: Literal["alex", "vgg", "squeeze"] = "alex", panel_views: list[int] | None = None,
                 worst_panels: bool = False, train_views: int = 8, overfit_gap_db: float = 3.0) -> None:
        if worst_k < 0:
            raise ValueError(f"worst_k must be an integer >= 0, got {worst_k}")
        if train_views < 0:
            raise ValueError(f"train_views must be an integer >= 0, got {train_views}")
        if math.isnan(overfit_gap_db):
            raise ValueError(f"overfit_gap_db must be a number of dB (inf: never warn), got {overfit_gap_db}")
        if any(index < 0 for index in panel_views or []):
            raise ValueError(f"panel_views must be view indices >= 0, got {panel_views}")
        self.enabled = enabled
        self.worst_k = worst_k
        self.lpips = lpips
        self.lpips_net = lpips_net
        self.panel_views = list(panel_views or [])
        self.worst_panels = worst_panels
        self.train_views = train_views
        self.overfit_gap_db = overfit_gap_db
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
        psnr, ssim, pred = self._scores(outputs)
        view = ViewScore(index=index, name=view_name(trainer, _scored_split(trainer), index), psnr=psnr,
                         ssim=ssim, lpips=self._lpips_of(pred, target))
        self._views.append(view)
        keep = index in self.panel_views
        if self.worst_k > 0 or keep:
            panel = error_panel(outputs.rgb, outputs.target)
            if keep:
                self._kept.append((view, panel))
            if self.worst_k > 0:
                self._worst.append((view, panel))
                self._worst = _worst_k(self._worst, self.worst_k)

    def _scores(self, image: ImageRender) -> tuple[float, float, Tensor]:
        """PSNR and SSIM of one rendered view, as the module's test metrics compute them, and the
        prediction as the metrics saw it (``[1, 3, H, W]``, masked pixels as the target's)."""
        self._metrics.reset()
        pred = update_image_metrics(self._metrics, image.rgb, image.target, image.mask)
        values = self._metrics.compute()
        return float(values["psnr"]), float(values["ssim"]), pred

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

    # -------------------------------------------------------- training views
    def _training_views(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> list[ViewScore] | str:
        """This rank's share of the training views, each rendered as fitted and scored as a tested view
        is; or why none are scored (the settings' reasons are the same on every rank; a photo the model
        cannot render as fitted is met by the rank whose share holds it)."""
        datamodule = trainer.datamodule
        if self.train_views == 0:
            return "turned off (eval_report.train_views=0)"
        if _scored_split(trainer) == "train":
            return "the tested views are the training views (data.test_split=train)"
        if datamodule is None:
            return "there is no data module to make single image batches (ImageBatches)"
        if not conforms(datamodule, ImageBatches):
            lacking = ", ".join(missing(datamodule, ImageBatches))
            return (f"the data module {type(datamodule).__name__} makes no single image batches "
                    f"(ImageBatches: it has no {lacking})")
        if not conforms(pl_module, ImageRenderingModule):
            return f"the module {type(pl_module).__name__} renders no single images (ImageRenderingModule)"
        indices = evenly_spaced(self.train_views, datamodule.num_train_images)
        scored = []
        for index in indices[trainer.global_rank :: trainer.world_size]:
            batch = datamodule.image_batch("train", index, pl_module.device, as_fitted=True)
            try:
                image = pl_module.render_image(batch)
            except CheckpointError as error:  # fitted on another capture: the tested views still count
                return f"the training photos cannot be rendered as fitted ({error})"
            psnr, ssim, _ = self._scores(image)
            name = view_name(trainer, "train", index)
            scored.append(ViewScore(index=index, name=name, psnr=psnr, ssim=ssim))
        return scored

    # --------------------------------------------------------------- writing
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.enabled:
            return
        training = _agreed(trainer, self._training_views(trainer, pl_module))
        views, worst, kept = _gather(trainer, self._views, self._worst, self.worst_k, self._kept)
        log_dir = trainer.log_dir  # every rank: under DDP finding it is a collective
        if not trainer.is_global_zero:
            return
        lpips_status = self._lpips_status
        if "skipped" in lpips_status:  # also when it failed part-way: no half-filled column
            views = [ViewScore(v.index, v.name, v.psnr, v.ssim) for v in views]
        step = self._checkpoint_step if trainer.ckpt_path and self._checkpoint_step is not None \
            else trainer.global_step
        train = {"skipped": training} if isinstance(training, str) else training_scores(training)
        record = report_record(views, _scored_split(trainer), lpips_status, train,
                               checkpoint=trainer.ckpt_path, global_step=step)
        directory = Path(log_dir or ".")
        _, markdown = write_report(record, directory)
        if self.worst_k > 0:
            rows = [(_caption(rank, view), panel) for rank, (view, panel) in enumerate(worst, start=1)]
            write_worst_views(rows, directory / WORST_VIEWS_PNG)
        singles = [*kept, *(worst if self.worst_panels else [])]
        for view, panel in {view.index: (view, panel) for view, panel in singles}.values():
            write_panel(panel, directory / PANELS_DIR / f"{view_stem(view.index, view.name)}.png")
        summary = f"{len(views)} views, mean PSNR {record['mean']['psnr']:.2f} dB"
        if "skipped" not in train:
            summary += f"; {train['num_views']} training views {train['psnr']:.2f} dB"
        rank_zero_info(f"eval report: {markdown} ({summary})")
        warning = overfit_warning(record, self.overfit_gap_db)
        if warning is not None:
            rank_zero_info(warning)
        self._views, self._worst, self._kept = [], [], []


def evenly_spaced(count: int, total: int) -> list[int]:
    """``count`` distinct indices of ``range(total)`` spread evenly over it: the middle of each of
    ``count`` equal parts, so neither end of a capture is favoured; all of them when ``count >= total``."""
    if count >= total:
        return list(range(total))
    return [(2 * part + 1) * total // (2 * count) for part in range(count)]


OVERFIT_CAUSES = (
    "the model fits the photos but not the scene; likely causes: the scene box or the contracted region "
    "beyond it (data.scene_box_scale, data.scene_box, data.unbounded with model.field.contraction), the "
    "near plane (rays start where they enter the scene box, so it moves with the box), too few or too "
    "clustered training views"
)
"""What the overfitting line says after the figures: the settings that most often let a field explain
each photo with geometry no other viewpoint agrees with."""


def overfit_warning(record: dict[str, Any], threshold_db: float) -> str | None:
    """The one line ``test`` prints when ``record``'s (``eval.json``'s) ``gap_db`` exceeds
    ``threshold_db``; ``None`` otherwise, or when the training views were not scored."""
    gap = record.get("gap_db")
    if gap is None or not gap > threshold_db:
        return None
    train, tested = record["train"]["psnr"], record["mean"]["psnr"]
    return (f"test: training views {train:.1f} dB, {record['split']} views {tested:.1f} dB "
            f"(gap {gap:.1f} dB > eval_report.overfit_gap_db {threshold_db:.1f}): {OVERFIT_CAUSES}")


def _worst_k(panels: list[tuple[ViewScore, Tensor]], k: int) -> list[tuple[ViewScore, Tensor]]:
    """The ``k`` lowest-PSNR panels, worst first, each view once."""
    by_view = {view.index: (view, panel) for view, panel in panels}
    return sorted(by_view.values(), key=lambda item: (item[0].psnr, item[0].index))[:k]


def _caption(rank: int, view: ViewScore) -> str:
    name = f" {view.name}" if view.name else ""
    return f"#{rank} view {view.index}{name}  PSNR {view.psnr:.2f}"


Panels = list[tuple[ViewScore, Tensor]]


def _all_gathered(trainer: pl.Trainer, items: list[Any]) -> list[Any]:
    """``items`` of every rank, rank after rank (this rank's alone without data parallelism)."""
    if trainer.world_size > 1 and torch.distributed.is_available() and torch.distributed.is_initialized():
        gathered: list[Any] = [None] * trainer.world_size
        torch.distributed.all_gather_object(gathered, items)
        return [item for part in gathered for item in part]
    return items


def _agreed(trainer: pl.Trainer, training: list[ViewScore] | str) -> list[ViewScore] | str:
    """The training views of every rank, or the first rank's reason for scoring none when any rank has
    one. Every rank joins the gather whatever it found: a rank whose share holds a photo the model
    cannot render as fitted returns a reason where the others return views, and a collective that only
    some ranks enter never completes."""
    parts: list[list[ViewScore] | str] = _all_gathered(trainer, [training])
    reasons = [part for part in parts if isinstance(part, str)]
    if reasons:
        return reasons[0]
    return _unique_views([view for part in parts if not isinstance(part, str) for view in part])


def _unique_views(views: list[ViewScore]) -> list[ViewScore]:
    return sorted({view.index: view for view in views}.values(), key=lambda view: view.index)


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
    unique = _unique_views(views)
    kept = sorted({view.index: (view, panel) for view, panel in kept}.values(),
                  key=lambda item: item[0].index)
    return unique, _worst_k(worst, k), kept


def _scored_split(trainer: pl.Trainer) -> str:
    """The split the ``test`` stage scores: the data module's ``test_split`` when it has one."""
    datamodule = trainer.datamodule
    return datamodule.test_split if conforms(datamodule, ScoredSplit) else "test"
