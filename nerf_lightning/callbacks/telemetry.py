"""Where the time of a training step goes, and how many samples rays cost."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path
from typing import Any, cast

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger

from nerf_lightning.system.contract import DataWaitReporting, StageTimedModule, conforms, require
from nerf_lightning.system.timing import StageTimer, synchronize

STAGES = ("data", "sampling", "field", "render", "optimizer", "other")


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this process so far: allocator peak on CUDA, peak resident set on the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is in bytes on macOS, KiB on Linux
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale


class Telemetry(pl.Callback):
    """Splits each training step's wall time into stages and logs sampling statistics.

    Stages (``telemetry/ms_<stage>``, averaged over the steps since the last log):

    - ``data``: from the end of the previous step to the start of this one (fetching the batch
      and drawing its rays);
    - ``sampling``: the sampler's ``update``, ``forward`` (including any density queries it
      makes) and ``auxiliary_loss``;
    - ``field``: the field's forward pass plus the whole backward pass (the backward of the
      renderer and of sampler networks is part of it: autograd runs them as one pass);
    - ``render``: compositing and the photometric loss;
    - ``optimizer``: the optimizer step and learning-rate schedule;
    - ``other``: whatever is left (Lightning's own bookkeeping, logging, callbacks).

    Not a stage of its own but a part of ``data``: ``telemetry/ms_data_wait``, the time the training
    thread was blocked waiting for the step's ray batch (making it itself, or waiting for the
    prefetch thread to finish it; near 0 when the batch was prefetched in time). ``data`` minus it is
    the rest between steps (Lightning's loop and fetch, the callbacks that end a step after this one).
    Logged when the data module reports it
    (:class:`DataWaitReporting`, optional: checked when ``fit`` starts); on the first step, whose
    ``data`` is not measured, it is the only part measured.

    Also logged: ``telemetry/overhead_fraction`` (share of step time outside field
    forward+backward), ``telemetry/rays_per_s``, ``telemetry/samples_per_s``,
    ``telemetry/peak_memory_mb`` and a ``telemetry/samples_per_ray`` histogram (TensorBoard).
    Every step is appended to ``<log_dir>/telemetry.jsonl`` when ``write_jsonl`` is set: its
    ``global_step``, the stages, ``step``, ``rays``, ``samples`` (seconds and counts) and, where the
    data module reports it, ``data_wait`` (seconds).

    Timing a stage needs the device to finish its work, so while this callback is active the
    module's ``StageTimer`` synchronises at stage boundaries (a few host waits per step on an
    accelerator; nothing on the CPU). Without the callback nothing is synchronised. The module must
    have that timer as ``stage_timer``
    (:class:`~nerf_lightning.system.contract.StageTimedModule`, checked when ``fit`` starts).

    Args:
        log_every_n_steps: steps between logged averages (``None``: the trainer's setting).
        histogram_every_n_steps: steps between samples-per-ray histograms, the first after step 1
            (``0`` disables).
        write_jsonl: append one record per step to ``telemetry.jsonl`` in the run directory.
    """

    def __init__(self, log_every_n_steps: int | None = None, histogram_every_n_steps: int = 100,
                 write_jsonl: bool = True) -> None:
        self.log_every_n_steps = log_every_n_steps
        self.histogram_every_n_steps = histogram_every_n_steps
        self.write_jsonl = write_jsonl
        self._timer: StageTimer | None = None
        self._step_start: float | None = None
        self._previous_end: float | None = None
        self._backward_start: float | None = None
        self._optimizer_start: float | None = None
        self._extra: dict[str, float] = {}
        self._window: list[dict[str, float]] = []
        self._file: Any = None
        self._data_waits: DataWaitReporting | None = None

    # ------------------------------------------------------------------ set-up
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            require(self, pl_module, StageTimedModule)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._timer = cast(StageTimedModule, pl_module).stage_timer
        self._timer.enabled = True
        datamodule = trainer.datamodule
        self._data_waits = datamodule if conforms(datamodule, DataWaitReporting) else None
        log_dir = trainer.log_dir  # a collective under data parallelism: every rank asks
        if self.write_jsonl and trainer.is_global_zero and log_dir is not None:  # one file, rank 0's steps
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            self._file = open(Path(log_dir) / "telemetry.jsonl", "a")  # noqa: SIM115
        self._previous_end = None

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._timer is not None:
            self._timer.enabled = False
        if self._file is not None:
            self._file.close()
            self._file = None

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.pause()

    def pause(self) -> None:
        """Count nothing until the next step starts (another callback evaluated in between)."""
        self._previous_end = None  # evaluation time is not part of any training step

    # ---------------------------------------------------------------- one step
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        synchronize(pl_module.device)
        now = time.perf_counter()
        self._extra = {"data": now - self._previous_end} if self._previous_end is not None else {}
        if self._data_waits is not None and self._data_waits.data_wait_s is not None:
            self._extra["data_wait"] = self._data_waits.data_wait_s  # this step's batch: handed out just now
        self._step_start = now
        if self._timer is not None:
            self._timer.pop()  # drop anything timed outside training steps (validation renders)

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Any) -> None:
        synchronize(pl_module.device)
        self._backward_start = time.perf_counter()

    def on_after_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        synchronize(pl_module.device)
        if self._backward_start is not None:
            self._extra["backward"] = time.perf_counter() - self._backward_start

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: Any) -> None:
        synchronize(pl_module.device)
        self._optimizer_start = time.perf_counter()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        synchronize(pl_module.device)
        now = time.perf_counter()
        self._previous_end = now
        if self._step_start is None or not isinstance(outputs, dict) or "num_samples" not in outputs:
            return
        stages = self._timer.pop() if self._timer is not None else {}
        record = {name: stages.get(name, 0.0) for name in ("sampling", "field", "render")}
        record["field"] += self._extra.get("backward", 0.0)
        record["optimizer"] = now - self._optimizer_start if self._optimizer_start is not None else 0.0
        record["data"] = self._extra.get("data", 0.0)
        step_s = now - self._step_start + record["data"]
        record["other"] = max(step_s - sum(record[name] for name in STAGES[:-1]), 0.0)
        record["step"] = step_s
        record["rays"] = float(outputs["num_rays"])
        record["samples"] = float(outputs["num_samples"])
        if "data_wait" in self._extra:
            record["data_wait"] = self._extra["data_wait"]
        self._optimizer_start = self._backward_start = None
        self._window.append(record)
        if self._file is not None:
            self._file.write(json.dumps({"global_step": trainer.global_step, **record}) + "\n")
        every = self.log_every_n_steps or trainer.log_every_n_steps or 50
        if len(self._window) >= every:
            self._log_window(trainer, pl_module)
        if self.histogram_every_n_steps and (trainer.global_step - 1) % self.histogram_every_n_steps == 0:
            self._log_histogram(trainer, outputs)

    # ----------------------------------------------------------------- logging
    def _log_window(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        window, self._window = self._window, []
        total = sum(r["step"] for r in window)
        metrics = {f"telemetry/ms_{name}": 1000.0 * sum(r[name] for r in window) / len(window)
                   for name in STAGES}
        metrics["telemetry/ms_step"] = 1000.0 * total / len(window)
        waits = [r["data_wait"] for r in window if "data_wait" in r]
        if waits:
            metrics["telemetry/ms_data_wait"] = 1000.0 * sum(waits) / len(waits)
        metrics["telemetry/overhead_fraction"] = 1.0 - sum(r["field"] for r in window) / max(total, 1e-12)
        metrics["telemetry/rays_per_s"] = sum(r["rays"] for r in window) / max(total, 1e-12)
        metrics["telemetry/samples_per_s"] = sum(r["samples"] for r in window) / max(total, 1e-12)
        metrics["telemetry/peak_memory_mb"] = peak_memory_bytes(pl_module.device) / 2**20
        pl_module.log_dict(metrics, batch_size=1)
        if self._file is not None:
            self._file.flush()

    def _log_histogram(self, trainer: pl.Trainer, outputs: dict[str, Any]) -> None:
        counts = outputs.get("samples_per_ray")
        if not isinstance(counts, torch.Tensor) or counts.numel() == 0:
            return
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_histogram("telemetry/samples_per_ray", counts.detach().float().cpu(),
                                                trainer.global_step)
