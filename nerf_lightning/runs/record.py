"""``run.json``: everything needed to tell what a run was and to compare it with another."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from nerf_lightning.files import atomic_path, atomic_write_json
from nerf_lightning.runs.folders import RUN_RECORD
from nerf_lightning.samplers import load_sampler_plugins
from nerf_lightning.system.contract import RecordedData, conforms

_VERSIONED = (
    "nerf-lightning",
    "torch",
    "lightning",
    "torchmetrics",
    "kornia",
    "jsonargparse",
    "numpy",
    "tensorboard",
)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _git_state(directory: Path) -> dict[str, Any]:
    """Commit and dirtiness of the git work tree holding ``directory`` (``None`` outside git)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10, check=True
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    return found


def _machine() -> dict[str, Any]:
    gpus = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        if torch.cuda.is_available()
        else []
    )
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpus": gpus,
        "hostname": platform.node(),
    }


def _plugins() -> list[dict[str, Any]]:
    return [
        {"name": p.name, "target": p.target, "distribution": p.distribution, "version": p.version}
        for p in load_sampler_plugins().values()
    ]


STATUSES = ("running", "completed", "interrupted", "preempted", "failed")
"""The values of ``run.json``'s ``status``: ``interrupted`` is a fit stopped by Ctrl-C (or Lightning's
own stop request), ``preempted`` one stopped by SIGTERM or a scheduler's early signal; both are
meant to be resumed (``fit --ckpt_path last``)."""


def _exception_status(exception: BaseException) -> str:
    """The record's status for a stage that ended by ``exception``: the ``run_status`` it carries (the
    project's ``FitStopped``), ``interrupted`` for Ctrl-C that reached Lightning, ``preempted`` for
    Lightning's own SIGTERM stop, ``failed`` otherwise."""
    status = getattr(exception, "run_status", None)
    if status in STATUSES:
        return str(status)
    if isinstance(exception, KeyboardInterrupt):
        return "interrupted"
    if isinstance(exception, SIGTERMException):
        return "preempted"
    return "failed"


def _callback_entries(trainer: pl.Trainer) -> dict[str, Any]:
    """What the trainer's callbacks add to the record: the ``run_record_entries()`` of each that has
    one (e.g. ``Preemption``: how the run was stopped, what it resumed from)."""
    entries: dict[str, Any] = {}
    for callback in trainer.callbacks:
        contribute = getattr(callback, "run_record_entries", None)
        if callable(contribute):
            entries.update(contribute())
    return entries


def _scalar_metrics(trainer: pl.Trainer) -> dict[str, float]:
    return {
        name: float(value)
        for name, value in sorted(trainer.callback_metrics.items())
        if isinstance(value, torch.Tensor) and value.numel() == 1
    }


class RunRecorder(SaveConfigCallback):
    """Saves the resolved ``config.yaml`` (as LightningCLI does, but atomically) and keeps ``run.json``
    beside it.

    ``run.json`` holds the resolved config, the seed, the project's git commit and whether the tree
    was dirty, library versions, every sampler plugin with its distribution and version, the dataset
    (root, fingerprint, the training frame ``data.normalise`` chose), the machine (of rank zero), the
    number of processes (``world_size``), start and end times, the status, and the final metrics of
    each stage. It is written on rank zero, atomically, when a stage starts and again when it ends or
    fails: one ``run.json`` per run, however many processes train (metrics of evaluation
    stages are already reduced over the ranks).

    ``status`` is one of :data:`STATUSES`. A callback with a ``run_record_entries()`` method adds the
    entries it returns at each writing, and once more when training starts (after a resumed run's
    checkpoint is loaded) if it has any: ``Preemption`` records ``preemption`` (the signal, the step,
    the checkpoint kept, whether it was written within the grace period) and ``resumed`` (the
    checkpoint a run resumed from and the seconds from the signal to the resume).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Lightning writes config.yaml in place; save_config writes it atomically instead. Where
        # Lightning's own writing does more (refusing to overwrite, with a check across ranks;
        # multi-file configs), it keeps the job.
        self._writes_config = self.save_to_log_dir and self.overwrite and not self.multifile
        if self._writes_config:
            self.save_to_log_dir = False

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # ``trainer.log_dir`` is a collective under data parallelism: ask on every rank here,
        # since ``save_config`` runs on rank zero only.
        self._log_dir = trainer.log_dir
        super().setup(trainer, pl_module, stage)

    def save_config(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        log_dir = Path(getattr(self, "_log_dir", None) or ".")
        # The config was validated when it was parsed; validating it again on writing would repeat every
        # type check of every option.
        if self._writes_config:  # what Lightning would write, under a temporary name, then renamed
            with atomic_path(log_dir / self.config_filename) as temporary:
                self.parser.save(self.config, temporary, skip_unset=False, skip_validation=True,
                                 overwrite=True, multifile=False)
        config = json.loads(self.parser.dump(self.config, format="json", skip_validation=True))
        datamodule = trainer.datamodule
        described = conforms(datamodule, RecordedData)
        self.record: dict[str, Any] = {
            "stage": stage,
            "status": "running",
            "start_time": _now(),
            "end_time": None,
            "seed": config.get("seed_everything"),
            "config": config,
            "git": _git_state(Path(__file__).resolve().parent),
            "versions": _versions(),
            "sampler_plugins": _plugins(),
            "data": {
                "root": str(datamodule.root) if described and datamodule.root is not None else None,
                "fingerprint": datamodule.fingerprint() if described else None,
                # The similarity from the dataset's coordinates to the training frame, and the
                # downscale chosen from a pixel budget (None: neither was asked for).
                "frame": datamodule.frame_record() if described else None,
            },
            "machine": _machine(),
            "world_size": trainer.world_size,  # processes (ranks); ray streams depend on it
            "command": sys.argv,
            "metrics": {},
        }
        self.record.update(_callback_entries(trainer))
        self.path = log_dir / RUN_RECORD
        atomic_write_json(self.record, self.path)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero or not hasattr(self, "record"):
            return
        entries = _callback_entries(trainer)
        if entries:
            self.record.update(entries)
            atomic_write_json(self.record, self.path)

    def _finish(self, trainer: pl.Trainer, stage: str, status: str, error: str | None = None) -> None:
        if not trainer.is_global_zero or not hasattr(self, "record"):
            return
        self.record["metrics"][stage] = _scalar_metrics(trainer)
        self.record["status"] = status
        self.record["end_time"] = _now()
        self.record["global_step"] = trainer.global_step
        self.record.update(_callback_entries(trainer))
        if error is not None:
            self.record["error"] = error
        atomic_write_json(self.record, self.path)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish(trainer, "fit", "interrupted" if trainer.interrupted else "completed")

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == "validate":
            self._finish(trainer, "validate", "completed")

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish(trainer, "test", "completed")

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        status = _exception_status(exception)
        stage = str(getattr(trainer.state.fn, "value", trainer.state.fn))  # "test", not "TrainerFn.TESTING"
        if status != "failed":
            self._finish(trainer, stage, status)
            return
        message = f"{type(exception).__name__}: {exception}".splitlines()[0]
        self._finish(trainer, stage, "failed", message)


EVALUATIONS = ("validate", "test", "predict")
"""The commands that, given a run's checkpoint, record into ``RUN/<command>/run.json``."""


def load_run_record(path: str | Path) -> dict[str, Any]:
    """The ``run.json`` of a run directory (or the file itself), with the metrics of the evaluations
    recorded in the run's folder added under ``metrics`` when the run's own record has none for that
    stage: the newest completed one of ``RUN/test``, ``RUN/test-2``... (:func:`evaluations`)."""
    path = Path(path)
    if path.is_dir():
        path = path / RUN_RECORD
    record = read_record(path)
    metrics = record.setdefault("metrics", {})
    for stage in EVALUATIONS:
        if stage in metrics:
            continue
        found = newest_evaluation(path.parent, stage)
        if found is not None:
            metrics[stage] = found[1]["metrics"][stage]
    return record


def newest_evaluation(run: Path, stage: str) -> tuple[Path, dict[str, Any]] | None:
    """The newest completed evaluation of ``stage`` recorded in the run's folder that holds metrics of
    that stage (:func:`evaluations`): its folder and its record; ``None`` when there is none. Its record
    says how the metrics were obtained (the data and evaluation settings of that command).

    Raises:
        ValueError: an evaluation's ``run.json`` is not valid JSON (the message names it).
    """
    for evaluation in evaluations(run, stage):
        found = read_record(evaluation / RUN_RECORD)
        if found.get("status") == "completed" and (found.get("metrics") or {}).get(stage) is not None:
            return evaluation, found
    return None


def evaluations(run: Path, stage: str) -> list[Path]:
    """The folders ``RUN/STAGE``, ``RUN/STAGE-2``... holding a ``run.json``, the newest first (each
    ``validate``, ``test`` or ``predict`` of the run's checkpoint claims the next)."""
    def number(folder: Path) -> int:
        return 1 if folder.name == stage else int(folder.name.rsplit("-", 1)[1])

    found = [folder for folder in run.glob(f"{stage}*") if (folder / RUN_RECORD).is_file()
             and re.fullmatch(rf"{stage}(-\d+)?", folder.name)]
    return sorted(found, key=number, reverse=True)


def read_record(path: Path) -> dict[str, Any]:
    """The record in the file ``path`` as it is (no evaluation's metrics added: :func:`load_run_record`).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not valid JSON (or not text), or JSON that is not an object; the message names the file.
    """
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: no run record; expected a run directory containing {RUN_RECORD}"
        ) from None
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path}: not valid JSON ({error.msg} at line {error.lineno}); expected a run record"
        ) from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not text; expected a run record (JSON)") from None
    if not isinstance(record, dict):
        raise ValueError(f"{path}: a JSON {type(record).__name__}; expected a run record (a JSON object)")
    return record
