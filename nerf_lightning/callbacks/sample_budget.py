"""Holds the number of samples per training step near a target by resizing ray batches."""

from __future__ import annotations

from typing import Any, cast

import lightning.pytorch as pl
import torch
from torch import Tensor

from nerf_lightning.core.distributed import all_reduce_sum_, world_size
from nerf_lightning.system.contract import ResizableBatches, SampleCeilingModule, require
from nerf_lightning.system.step_logging import logs_this_step


class _SavedTensorBytes:
    """Counts the bytes autograd saves for the backward pass while it is entered.

    Those saved activations are what grows with the batch and bounds how large a step fits in
    memory, on any device; counting them needs no allocator statistics (which the CPU lacks).
    """

    def __init__(self) -> None:
        self.bytes = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._active = False

    def _pack(self, tensor: Tensor) -> Tensor:
        self.bytes += tensor.numel() * tensor.element_size()
        return tensor

    @staticmethod
    def _unpack(tensor: Tensor) -> Tensor:
        return tensor

    def start(self) -> None:
        if not self._active:
            self.bytes = 0
            self._hooks.__enter__()
            self._active = True

    def stop(self) -> None:
        if self._active:
            self._hooks.__exit__(None, None, None)
            self._active = False


class SampleBudget(pl.Callback):
    """Adapts ``datamodule.rays_per_batch`` so each step spends about ``target_samples`` samples.

    After every step the samples per ray actually spent update an exponential moving average;
    the next batch gets ``target_samples / average`` rays, bounded by ``min_rays``/``max_rays``
    and by two ceilings: ``max_samples`` (the worst recent samples per ray times the rays must
    stay below it) and ``max_memory_mb`` (the memory autograd holds for the backward pass,
    measured every step as bytes saved per sample, times the worst recent samples per step).
    The new size applies on the very next step. Both ceilings also hold as hard limits within
    a step: the budget sets the model's ``step_sample_limit`` (``NerfModule``), so when the
    sampler places far more samples per ray than the recent ones (an occupancy grid filling up
    after a batch was sized for an empty one), the step trains on the leading rays that fit.

    The training step must return a dict with ``num_samples`` and ``num_rays`` (``NerfModule``
    does); the module must have ``step_sample_limit`` and the data module ``rays_per_batch``
    (:class:`~nerf_lightning.system.contract.SampleCeilingModule`,
    :class:`~nerf_lightning.system.contract.ResizableBatches`), which ``fit`` checks at its start.

    Under data parallelism the budget is global: samples, rays and saved bytes of each step are
    summed over the ranks (one small all-reduce per step), so every rank computes the same
    averages and the same batch size, ``target_samples / world_size`` samples' worth of rays
    each. ``min_rays``, ``max_rays``, ``max_samples`` and ``max_memory_mb`` bound what one
    device holds, so they apply per rank. A run resumed on another number of devices starts
    from the same global batch, split over the new number of ranks.

    Args:
        target_samples: samples per training step to hold (over all ranks together).
        min_rays, max_rays: bounds on rays per batch (of one rank).
        smoothing: weight of the newest step in the moving average of samples per ray.
        max_samples: ceiling on samples per step of one rank; the batch is sized so that even
            the largest samples per ray seen recently stays under it.
        max_memory_mb: ceiling, in MiB, on the activations a step keeps for its backward pass on
            one device (``None``: no ceiling). Measured on whatever device trains, with the same
            margin for the largest recent samples per ray.
    """

    def __init__(self, target_samples: int = 1 << 16, min_rays: int = 256, max_rays: int = 1 << 16,
                 smoothing: float = 0.3, max_samples: int = 1 << 20,
                 max_memory_mb: float | None = None) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        if min_rays < 1 or max_rays < min_rays:
            raise ValueError(f"min_rays and max_rays must satisfy 1 <= min_rays <= max_rays, got {min_rays} "
                             f"and {max_rays}")
        self.target_samples = target_samples
        self.min_rays = min_rays
        self.max_rays = max_rays
        self.smoothing = smoothing
        self.max_samples = max_samples
        self.max_memory_mb = max_memory_mb
        self.bytes_per_sample: float | None = None
        self._saved = _SavedTensorBytes()
        self.samples_per_ray: float | None = None
        self.peak_samples_per_ray: float | None = None
        self.rays_per_batch: int | None = None  # per rank
        self.world_size = 1
        self._saved_world_size: int | None = None

    def _rays_for(self, samples_per_ray: float, peak: float) -> int:
        rays = self.target_samples / self.world_size / max(samples_per_ray, 1e-3)
        rays = min(rays, self.max_samples / max(peak, 1e-3))
        if self.max_memory_mb is not None and self.bytes_per_sample:
            rays = min(rays, self.max_memory_mb * 2**20 / (self.bytes_per_sample * max(peak, 1e-3)))
        return int(min(max(rays, self.min_rays), self.max_rays))

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            require(self, pl_module, SampleCeilingModule)
            require(self, trainer.datamodule, ResizableBatches, "data module")

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.world_size = world_size(trainer)
        if self.rays_per_batch is not None:  # resumed: the saved global batch, split over the ranks
            saved = self._saved_world_size or self.world_size
            if saved != self.world_size:
                self.rays_per_batch = int(min(max(self.rays_per_batch * saved / self.world_size,
                                                  self.min_rays), self.max_rays))
            cast(ResizableBatches, trainer.datamodule).rays_per_batch = self.rays_per_batch

    def sample_ceiling(self) -> int:
        """Samples one step of one rank may hold: ``max_samples``, and under ``max_memory_mb``
        once the saved bytes per sample are measured."""
        ceiling = float(self.max_samples)
        if self.max_memory_mb is not None and self.bytes_per_sample:
            ceiling = min(ceiling, self.max_memory_mb * 2**20 / self.bytes_per_sample)
        return max(1, int(ceiling))

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        cast(SampleCeilingModule, pl_module).step_sample_limit = self.sample_ceiling()
        if self.max_memory_mb is not None:
            self._saved.start()

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor) -> None:
        self._saved.stop()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self._saved.stop()  # also when the step was skipped before any backward
        if not isinstance(outputs, dict) or "num_samples" not in outputs:
            return
        num_samples, num_rays = int(outputs["num_samples"]), int(outputs["num_rays"])
        saved_bytes = self._saved.bytes if self.max_memory_mb is not None else 0
        if world_size(trainer) > 1:  # the global step: every rank gets the same numbers
            totals = torch.tensor([num_samples, num_rays, saved_bytes], dtype=torch.int64,
                                  device=pl_module.device)
            num_samples, num_rays, saved_bytes = (int(v) for v in all_reduce_sum_(totals, trainer).tolist())
        if self.max_memory_mb is not None and num_samples > 0 and saved_bytes > 0:
            measured = saved_bytes / num_samples
            self.bytes_per_sample = measured if self.bytes_per_sample is None else max(
                measured, self.bytes_per_sample + self.smoothing * (measured - self.bytes_per_sample))
            if logs_this_step(trainer):
                pl_module.log("budget/activation_mb", self._saved.bytes / 2**20, batch_size=1)  # this rank
        spent = num_samples / max(num_rays, 1)
        if self.samples_per_ray is None or self.peak_samples_per_ray is None:
            self.samples_per_ray = self.peak_samples_per_ray = spent
        else:
            self.samples_per_ray += self.smoothing * (spent - self.samples_per_ray)
            self.peak_samples_per_ray = max(spent, 0.9 * self.peak_samples_per_ray)
        self.rays_per_batch = self._rays_for(self.samples_per_ray, self.peak_samples_per_ray)
        cast(ResizableBatches, trainer.datamodule).rays_per_batch = self.rays_per_batch
        if logs_this_step(trainer):
            pl_module.log_dict({"budget/rays": float(num_rays), "budget/samples": float(num_samples),
                                "budget/target": float(self.target_samples)}, batch_size=1)

    def state_dict(self) -> dict[str, Any]:
        return {"samples_per_ray": self.samples_per_ray, "peak_samples_per_ray": self.peak_samples_per_ray,
                "rays_per_batch": self.rays_per_batch, "bytes_per_sample": self.bytes_per_sample,
                "world_size": self.world_size}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.samples_per_ray = state_dict["samples_per_ray"]
        self.peak_samples_per_ray = state_dict["peak_samples_per_ray"]
        self.rays_per_batch = state_dict["rays_per_batch"]
        self.bytes_per_sample = state_dict.get("bytes_per_sample")
        self._saved_world_size = state_dict.get("world_size")
