"""The training system: a radiance field, a sampler and a renderer, trained on ray batches."""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Literal

import lightning.pytorch as pl
import torch
from torch import Tensor
from torchmetrics import MetricCollection
from torchmetrics.image import PeakSignalNoiseRatio, StructuralSimilarityIndexMeasure

from nerf_lightning.cameras.refinement import CameraRefinement
from nerf_lightning.core.constructor_spec import INSTANTIATOR, component_hparams
from nerf_lightning.core.distributed import all_reduce_min_, buffer_versions, sync_changed_buffers, world_size
from nerf_lightning.core.errors import CheckpointError, NonFiniteLossError
from nerf_lightning.core.types import PackedSamples, Rays, SceneBox
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.evaluation.masked import update_image_metrics
from nerf_lightning.fields import HashGridField, RadianceField
from nerf_lightning.rendering.chunks import map_chunks
from nerf_lightning.rendering.packed import leading_rays_within
from nerf_lightning.rendering.renderer import RenderOutput, VolumeRenderer
from nerf_lightning.samplers import Sampler, Uniform
from nerf_lightning.system.contract import SceneDescribing, conforms
from nerf_lightning.system.image_render import ImageRender
from nerf_lightning.system.learning_rate import check_decay, decay_scheduler
from nerf_lightning.system.step_logging import logs_this_step
from nerf_lightning.system.timing import StageTimer

COMPONENTS = ("field", "sampler", "renderer", "camera_refinement")
"""The constructor arguments that are modules; the hyperparameters hold a spec of each (of
``camera_refinement`` only when there is one, so models without it keep the hyperparameters they had)."""


def image_metrics(prefix: str, sync_on_compute: bool = True) -> MetricCollection:
    """PSNR and SSIM (data range 1) of ``[B, 3, H, W]`` images; each is the mean of per-image values.

    ``sync_on_compute=False`` keeps ``compute`` local to the process (per-view scores under data
    parallelism: a synchronising ``compute`` is a collective every rank must join).
    """
    return MetricCollection(
        {
            "psnr": PeakSignalNoiseRatio(data_range=1.0, reduction="elementwise_mean", dim=(1, 2, 3),
                                         sync_on_compute=sync_on_compute),
            "ssim": StructuralSimilarityIndexMeasure(data_range=1.0, sync_on_compute=sync_on_compute),
        },
        prefix=prefix,
    )


def state_dict_differences(built: dict[str, Tensor], loaded: dict[str, Any], shown: int = 3) -> str:
    """Per component (the first part of a key: ``sampler``, ``field``...), the keys ``loaded`` lacks, has
    beyond ``built`` or holds at another shape, at most ``shown`` of each, e.g. ``model.sampler: missing
    sampler.occupancy, sampler.grid_bits``."""
    differences: dict[str, list[str]] = {}
    for key in sorted(set(built) | set(loaded)):
        if key not in loaded:
            what = f"missing {key}"
        elif key not in built:
            what = f"unexpected {key}"
        elif getattr(loaded[key], "shape", None) != built[key].shape:
            what = f"{key} is {tuple(loaded[key].shape)}, the model's {tuple(built[key].shape)}"
        else:
            continue
        differences.setdefault(key.split(".", 1)[0], []).append(what)
    parts = []
    for component, whats in differences.items():
        more = f" and {len(whats) - shown} more" if len(whats) > shown else ""
        parts.append(f"model.{component}: {', '.join(whats[:shown])}{more}")
    return "; ".join(parts)


class NerfModule(pl.LightningModule):
    """Trains ``field`` on rays placed by ``sampler`` and composited by ``renderer``.

    Args:
        field: the radiance field (default ``HashGridField()``).
        sampler: where along rays the field is evaluated (default ``Uniform()``); any class
            registered in the ``nerf_lightning.samplers`` entry-point group.
        renderer: the volume renderer (default ``VolumeRenderer()``).
        learning_rate: Adam's learning rate.
        learning_rate_decay_steps: the steps over which the rate falls tenfold, exponentially, once
            ``learning_rate_decay_start`` is passed (:mod:`nerf_lightning.system.learning_rate`); 0
            keeps the rate constant.
        learning_rate_decay_start: the step the decay starts at (the rate is constant before it).
        learning_rate_decay_floor: the lowest rate the decay reaches, as a fraction of
            ``learning_rate`` (0: no floor).
        eval_chunk_rays: rays sampled and rendered at once when rendering whole images.
        eval_chunk_samples: samples per field query when rendering without gradient (whole
            images, and the samplers' no-grad density queries); ``None`` picks a size for the
            device: ``2**13`` on a CPU (cache-sized pieces render faster there than ``2**15`` and
            up), ``2**20`` elsewhere.
        on_nonfinite_loss: ``stop`` raises ``NonFiniteLossError`` before the step is applied
            (the last good checkpoint stays the last checkpoint); ``skip`` drops the step,
            counts it (``train/skipped_steps``) and goes on. Either way the check reads one
            scalar back from the device per step (the training step's one deliberate
            host-device synchronisation); under data parallelism the flag is first reduced
            over ranks, so all of them stop or skip together (a skipped step then runs a
            zero-gradient backward, since gradients are all-reduced, and updates nothing).
        camera_refinement: per-image pose corrections learned with the field
            (:class:`~nerf_lightning.cameras.refinement.CameraRefinement`); ``None`` (the default)
            trains on the poses as given. Only training rays are corrected: evaluation renders
            (validation, test, predict) use their views' given poses.

    ``step_sample_limit`` (attribute, ``None`` by default) is a hard ceiling on the samples a
    training step sends to the field: when the sampler places more, the step trains on the
    leading rays whose samples fit and leaves the rest of the batch out (logged as
    ``train/rays_left_out``). ``SampleBudget`` sets it from its ``max_samples`` and
    ``max_memory_mb`` before every step, so a sudden jump in samples per ray (an occupancy grid
    that fills up after a batch was sized for an empty one) cannot outgrow memory.

    What callbacks read or set here (``step_sample_limit``, ``stage_timer``, ``field``, ``sampler``,
    ``eval_chunk_rays``, ``render_rays``, ``render_image``) is declared as the protocols of
    :mod:`nerf_lightning.system.contract`; each callback checks its own when it is set up.

    Data parallelism: the sampler's ``update`` gets a generator seeded without the rank
    (``batch.update_seed``), and every sampler buffer it changed is then broadcast from rank 0,
    so sampler state cannot drift between ranks (``docs/distributed.md``).

    Checkpoints hold the constructor's arguments as hyperparameters, the field, sampler,
    renderer (and camera refinement, if any) each as a ``class_path``/``init_args`` spec of plain values
    (:mod:`nerf_lightning.core.constructor_spec`), so ``NerfModule.load_from_checkpoint(path)`` rebuilds
    the trained model, weights, scene box and sampler buffers from its ``state_dict``.
    """

    def __init__(
        self,
        field: RadianceField | None = None,
        sampler: Sampler | None = None,
        renderer: VolumeRenderer | None = None,
        learning_rate: float = 1e-2,
        learning_rate_decay_steps: int = 0,
        learning_rate_decay_start: int = 0,
        learning_rate_decay_floor: float = 0.0,
        eval_chunk_rays: int = 8192,
        eval_chunk_samples: int | None = None,
        on_nonfinite_loss: Literal["stop", "skip"] = "stop",
        camera_refinement: CameraRefinement | None = None,
    ) -> None:
        super().__init__()
        self.field = field if field is not None else HashGridField()
        self.sampler = sampler if sampler is not None else Uniform()
        self.renderer = renderer if renderer is not None else VolumeRenderer()
        self.learning_rate = learning_rate
        check_decay(learning_rate_decay_steps, learning_rate_decay_start, learning_rate_decay_floor)
        self.learning_rate_decay_steps = learning_rate_decay_steps
        self.learning_rate_decay_start = learning_rate_decay_start
        self.learning_rate_decay_floor = learning_rate_decay_floor
        self.eval_chunk_rays = eval_chunk_rays
        if eval_chunk_samples is not None and eval_chunk_samples <= 0:
            raise ValueError(f"eval_chunk_samples must be a positive number of samples or null, "
                             f"got {eval_chunk_samples}")
        self.eval_chunk_samples = eval_chunk_samples
        self.on_nonfinite_loss = on_nonfinite_loss
        self.camera_refinement = camera_refinement
        # Checkpoints carry how the model was built, so NerfModule.load_from_checkpoint(path) rebuilds
        # it: the plain arguments as given, each component as a class_path/init_args spec of plain
        # values (weights_only loading, see nerf_lightning.core.constructor_spec), not as a pickled module.
        self.save_hyperparameters(ignore=list(COMPONENTS), logger=False)
        components = component_hparams({name: getattr(self, name) for name in COMPONENTS
                                         if getattr(self, name) is not None})
        self.save_hyperparameters({"_instantiator": INSTANTIATOR, **self.hparams, **components}, logger=False)
        self.skipped_steps = 0
        self.step_sample_limit: int | None = None
        self._drop_gradients = False
        self.val_metrics = image_metrics("val/")
        self.test_metrics = image_metrics("test/")
        self.stage_timer = StageTimer()  # enabled by the Telemetry callback; a no-op otherwise

    # ------------------------------------------------------------------ set-up
    def setup(self, stage: str) -> None:
        datamodule = self.trainer.datamodule if self._trainer is not None else None
        if not conforms(datamodule, SceneDescribing):  # plain dataloaders: the box comes from a checkpoint
            return
        if datamodule.scene_box is not None:  # a checkpoint loaded afterwards restores its own box
            self.set_scene_box(datamodule.scene_box)
        if stage == "fit":  # before the optimizer sees the parameters
            if datamodule.pixel_footprint is not None:
                self.field.set_pixel_footprint(datamodule.pixel_footprint)
            num_images = datamodule.num_train_images
            self.field.set_num_images(num_images)
            if self.camera_refinement is not None:
                # One correction per training image; a resumed checkpoint's table (same size) loads after.
                self.camera_refinement.set_num_cameras(num_images)

    def set_scene_box(self, box: SceneBox) -> None:
        self.field.set_scene_box(box)
        self.sampler.set_scene_box(box)

    def configure_optimizers(self):
        # The fused kernel updates every tensor in one pass (CPU and CUDA), where the unfused one
        # reads and writes each parameter and its moments once per elementwise operation.
        optimizer = torch.optim.Adam(self._parameter_groups(), lr=self.learning_rate, betas=(0.9, 0.99),
                                     eps=1e-15, fused=self._fused_adam_supported())
        if self.learning_rate_decay_steps <= 0:
            return optimizer
        scheduler = decay_scheduler(optimizer, self.learning_rate_decay_steps, self.learning_rate_decay_start,
                                    self.learning_rate_decay_floor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def _parameter_groups(self) -> Any:
        """All parameters; the camera corrections, when present, in a group with their own learning rate."""
        if self.camera_refinement is None:
            return self.parameters()
        cameras = list(self.camera_refinement.parameters())
        others = [p for p in self.parameters() if all(p is not c for c in cameras)]
        return [{"params": others},
                {"params": cameras, "lr": self.camera_refinement.learning_rate, "name": "camera_refinement"}]

    def _fused_adam_supported(self) -> bool:
        device = next(self.parameters()).device
        floating = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
        return device.type in ("cpu", "cuda") and all(p.dtype in floating for p in self.parameters())

    # --------------------------------------------------------------- rendering
    def render_rays(
        self, rays: Rays, background: Tensor, generator: torch.Generator | None = None,
        max_samples: int | None = None, image_indices: Tensor | None = None,
    ) -> tuple[RenderOutput, PackedSamples]:
        """Sample, query the field and render ``R`` rays.

        Without gradient (evaluation), field queries go in pieces of ``eval_chunk_samples``.
        With ``max_samples``, only the leading ``R' <= R`` rays whose samples fit are queried
        and rendered (``samples.num_rays == R'``; ``background`` is ``[3]`` or ``[R, 3]``).
        ``image_indices [R]`` (training rays) name each ray's training image for the field's
        per-image parameters; ``None`` for views that are not training images.
        """
        timer = self.stage_timer
        field, density_fn = self.field, self.field.density
        if not torch.is_grad_enabled():
            chunk_size = self._eval_chunk_samples()
            field = partial(map_chunks, self.field, chunk_size=chunk_size)
            density_fn = partial(map_chunks, self.field.density, chunk_size=chunk_size)
        with timer.stage("sampling", self.device):
            samples = self.sampler(rays, density_fn, generator=generator)
            if max_samples is not None:
                kept = leading_rays_within(samples.ray_indices, samples.num_rays, max_samples)
                if kept < samples.num_rays:
                    samples, rays = samples.leading_rays(kept), rays[:kept]
                    background = background[:kept] if background.dim() == 2 else background
        with timer.stage("field", self.device):
            if image_indices is None or not self.field.uses_image_indices:
                density, rgb = field(samples.positions(rays), samples.directions(rays))
            else:
                per_sample = image_indices.index_select(0, samples.ray_indices)
                density, rgb = field(samples.positions(rays), samples.directions(rays), per_sample)
        with timer.stage("render", self.device):
            return self.renderer(rgb, density, samples, background), samples

    def _eval_chunk_samples(self) -> int:
        if self.eval_chunk_samples is not None:
            return self.eval_chunk_samples
        return 1 << 13 if self.device.type == "cpu" else 1 << 20

    @torch.no_grad()
    def render_image(self, batch: RayBatch) -> ImageRender:
        """Render a whole-image batch in chunks of ``eval_chunk_rays`` rays; a pixel of several rays
        (``RayBatch.rays_per_pixel``) is their mean colour, depth, opacity and samples. A batch whose rays
        name their training image (``camera_indices``: a training photo rendered as fitted) is rendered
        with that image's per-image parameters, as training steps are: its camera correction and the
        field's appearance for it; any other view is a new one."""
        assert batch.image_size is not None, "render_image needs a whole-image batch"
        if batch.camera_indices is not None:
            self._check_fitted_photo(batch.image_index)
        parts: dict[str, list[Tensor]] = {"rgb": [], "depth": [], "opacity": [], "count": []}
        refinement = self.camera_refinement
        for start in range(0, len(batch), self.eval_chunk_rays):
            rays = batch.rays[start : start + self.eval_chunk_rays]
            images = None if batch.camera_indices is None else batch.camera_indices[start : start + len(rays)]
            if images is not None and refinement is not None:
                rays = refinement.correct_rays(rays, images, learn=False)
            out, samples = self.render_rays(rays, batch.background, image_indices=images)
            parts["rgb"].append(out.rgb)
            parts["depth"].append(out.depth)
            parts["opacity"].append(out.opacity)
            parts["count"].append(samples.samples_per_ray())
        height, width = batch.image_size
        rays = {k: torch.cat(v) for k, v in parts.items()}
        if batch.rays_per_pixel > 1:
            rays["count"] = rays["count"].float()  # a pixel's mean samples per ray
        image = {k: batch.pixel_means(v).reshape(height, width, -1) for k, v in rays.items()}
        valid = batch.rays.far > batch.rays.near
        near = float(batch.rays.near[valid].min()) if bool(valid.any()) else 0.0
        far = float(batch.rays.far[valid].max()) if bool(valid.any()) else 1.0
        return ImageRender(
            target=batch.rgb.reshape(height, width, 3),
            rgb=image["rgb"].clamp(0, 1),
            depth=image["depth"],
            opacity=image["opacity"],
            samples_per_ray=image["count"],
            near=near,
            far=far,
            mask=None if batch.mask is None else batch.mask.reshape(height, width),
        )

    def _check_fitted_photo(self, index: int) -> None:
        """A one-line :class:`CheckpointError` when training photo ``index`` has no row in a per-image table
        (a checkpoint of another capture, or a model never fitted), instead of an index error deep in the
        render."""
        codes, refinement = self.field.appearance_codes, self.camera_refinement
        tables = [("appearance codes", codes.num_images if codes is not None else None),
                  ("camera corrections", refinement.num_cameras if refinement is not None else None)]
        source = (self._trainer.ckpt_path if self._trainer is not None else None) or "the model"
        for what, rows in tables:
            if rows is not None and not 0 <= index < rows:
                raise CheckpointError(f"{source}: training photo {index} has no row in its {what} ({rows} "
                                      "rows): expected the training split it was fitted on")

    # ---------------------------------------------------------------- training
    def training_step(self, batch: RayBatch, batch_idx: int) -> dict[str, Tensor | int] | None:
        self.field.set_training_step(self.global_step)
        with self.stage_timer.stage("sampling", self.device):
            self._update_sampler(batch.update_seed)
        generator = torch.Generator(device=self.device)
        generator.manual_seed(batch.sampler_seed)
        rays, refinement = batch.rays, self.camera_refinement
        refines = refinement is not None and refinement.learns_at(self.global_step)
        if refinement is not None and batch.camera_indices is not None:
            # before sampling: samples follow
            rays = refinement.correct_rays(rays, batch.camera_indices, learn=refines)
        out, samples = self.render_rays(rays, batch.background, generator, self.step_sample_limit,
                                        batch.camera_indices)
        num_rays = samples.num_rays  # fewer than len(batch) when step_sample_limit cut the batch
        with self.stage_timer.stage("render", self.device):
            rgb = batch.pixel_means(out.rgb)  # [P', 3]: the pixels whose rays the sample limit kept whole
            per_pixel_error = (rgb - batch.rgb[: rgb.shape[0]]).square().mean(dim=-1)
            mse = per_pixel_error.mean()
        loss = mse
        with self.stage_timer.stage("sampling", self.device):
            auxiliary = self.sampler.auxiliary_loss(samples, out.weights)
        if auxiliary is not None:
            loss = loss + auxiliary
            if logs_this_step(self._trainer):
                self.log("train/sampler_loss", auxiliary.detach())
        if refinement is not None:
            # A step the corrections sit out keeps them in the graph all the same (DDP's reducer expects
            # every parameter in every step); on_before_optimizer_step drops their zero gradient.
            loss = loss + (refinement.penalty_loss() if refines else refinement.corrections.sum() * 0.0)
            if logs_this_step(self._trainer):
                degrees, translation = refinement.correction_sizes()
                self.log("train/camera_correction_deg", degrees)
                self.log("train/camera_correction_translation", translation)
        finite = torch.isfinite(loss.detach()).to(torch.int32)
        if not bool(all_reduce_min_(finite, self._trainer)):  # the step's one deliberate host read
            return self._nonfinite(loss)
        self.log("train/loss", loss.detach(), prog_bar=True)  # every step: callbacks may monitor it
        if logs_this_step(self._trainer):
            self.log("train/psnr", -10.0 * torch.log10(mse.detach()), prog_bar=True)
            self.log("train/rays_per_batch", float(num_rays))
            self.log("train/samples_per_ray", len(samples) / num_rays)
            self.log("train/rays_left_out", float(len(batch) - num_rays))
        return {
            "loss": loss,
            "num_samples": len(samples),
            "num_rays": num_rays,
            "samples_per_ray": samples.samples_per_ray(),  # [R] for telemetry
            "ray_error": per_pixel_error.detach(),  # [P'] squared error of the leading pixels, for error maps
        }

    def _update_sampler(self, seed: int) -> None:
        """``sampler.update`` with a rank-independent generator; then, on several ranks, rank 0's
        values of the sampler buffers it changed (none on most steps: nothing is sent then)."""
        generator = torch.Generator(device=self.device)
        generator.manual_seed(seed)
        trainer = self._trainer
        before = buffer_versions(self.sampler) if world_size(trainer) > 1 else None
        self.sampler.update(self.global_step, self.field.density, generator=generator)
        if before is not None:
            sync_changed_buffers(self.sampler, before, trainer)

    def _nonfinite(self, loss: Tensor) -> dict[str, Tensor] | None:
        where = f" on rank {self.global_rank}" if world_size(self._trainer) > 1 else ""
        value = float(loss)
        message = (
            f"step {self.global_step}: training loss{where} is {value}"
            + (" but not finite on another rank" if math.isfinite(value) else "")
            + f" (expected a finite number; model.on_nonfinite_loss={self.on_nonfinite_loss})"
        )
        if self.on_nonfinite_loss == "stop":
            raise NonFiniteLossError(
                message + "; stopped before applying the step, earlier checkpoints are intact"
            )
        self.skipped_steps += 1
        self.log("train/skipped_steps", float(self.skipped_steps))
        if world_size(self._trainer) <= 1:
            return None  # Lightning skips backward and the optimizer step
        # Under data parallelism every rank must run backward (the gradient all-reduce is a
        # collective), so the step gets a zero loss touching every trainable parameter; its zero
        # gradients are dropped before the optimizer step, which then changes nothing.
        self._drop_gradients = True
        zero = sum((torch.nan_to_num(p.sum(), nan=0.0, posinf=0.0, neginf=0.0) * 0.0
                    for p in self.parameters() if p.requires_grad), loss.new_zeros(()))
        return {"loss": zero}

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        if self._drop_gradients:  # a skipped step under data parallelism (see `_nonfinite`)
            self._drop_gradients = False
            optimizer.zero_grad(set_to_none=True)
        refinement = self.camera_refinement
        if refinement is not None and not refinement.learns_at(self.global_step):
            # A step the corrections sit out gave them a zero gradient; without one at all, Adam skips
            # them (a zero one would still move them by its momentum and advance their step count).
            refinement.corrections.grad = None

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["skipped_steps"] = self.skipped_steps

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        """``nn.Module.load_state_dict``; weights that do not fit the components built (a sampler or
        field other than the run's, other sizes) are one :class:`CheckpointError` line naming each
        component and the keys that differ, instead of torch's list of every key."""
        try:
            return super().load_state_dict(state_dict, strict=strict, assign=assign)
        except RuntimeError as error:
            if "Error(s) in loading state_dict" not in str(error):
                raise
            path = getattr(self._trainer, "ckpt_path", None) or "checkpoint"
            raise CheckpointError(f"{path}: its weights do not fit the model built: "
                                  f"{state_dict_differences(self.state_dict(), state_dict)}; expected the "
                                  "components the run was trained with (leave out the --model option that "
                                  "changes them)") from None

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.skipped_steps = int(checkpoint.get("skipped_steps", 0))
        if self.camera_refinement is not None:  # before the state_dict is loaded
            saved = checkpoint.get("state_dict", {}).get("camera_refinement.corrections")
            try:
                self.camera_refinement.check_resumed_table(saved)
            except ValueError as error:  # one line naming the file, as for any unusable checkpoint
                path = getattr(self._trainer, "ckpt_path", None) or "checkpoint"
                raise CheckpointError(f"{path}: {error}") from None

    # -------------------------------------------------------------- evaluation
    def _evaluate(self, batch: RayBatch, metrics: MetricCollection) -> ImageRender:
        image = self.render_image(batch)
        update_image_metrics(metrics, image.rgb, image.target, image.mask)  # masked pixels do not count
        # As log_dict logs a collection, with val/psnr also in the progress bar, beside train/psnr: the
        # epoch's value, computed once when validation ends (nothing is read back per view for it).
        for name, metric in metrics.items(keep_base=False, copy_state=False):
            self.log(name, metric, on_step=False, on_epoch=True, batch_size=1, prog_bar=name == "val/psnr")
        return image

    def validation_step(self, batch: RayBatch, batch_idx: int) -> ImageRender:
        return self._evaluate(batch, self.val_metrics)

    def test_step(self, batch: RayBatch, batch_idx: int) -> ImageRender:
        return self._evaluate(batch, self.test_metrics)

    def predict_step(self, batch: RayBatch, batch_idx: int) -> ImageRender:
        return self.render_image(batch)
