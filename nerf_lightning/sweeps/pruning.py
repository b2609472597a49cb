"""Pruning a trial while its fit runs: Optuna's pruner judges the trial's validation PSNR at slots of
training time, and a trial it prunes is stopped.

The fit writes each validation as it happens to a file in its run folder
(:class:`~nerf_lightning.callbacks.ValidationCurve`: training seconds and the ``val/*`` metrics); the
worker reads the lines added since its last look while it waits for the fit, and reports each to
Optuna at the *slot* of training time it fell in (``train_s // prune_every_s``), the first validation of
a slot standing for it. Slots of time, not steps: samplers differ in what a step costs, and a pruner
compares trials at one step number. Optuna's pruner, on the study's storage, decides; the storage never
reaches the fit. A pruned trial's fit is sent SIGTERM and stops as a preempted fit does (its last step
kept in ``last.ckpt``), and the trial is recorded as pruned.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nerf_lightning.sweeps.spec import SweepSpec

CURVE_FILE = "validation_curve.jsonl"
"""In a trial's run folder: its fit's validations (``ValidationCurve``'s ``path``)."""
CURVE_CALLBACK = "nerf_lightning.callbacks.ValidationCurve"
METRIC = "val/psnr"
"""What the pruner judges."""
VALIDATION_SCHEDULE = "trainer.callbacks.TimedValidation"
"""The base config's validation by time, set to validate once per slot when pruning (when it has one)."""


def _median(optuna: Any, spec: SweepSpec) -> Any:
    # No judgement in the first slot: every trial starts from the same untrained field.
    return optuna.pruners.MedianPruner(n_startup_trials=spec.prune_startup_trials, n_warmup_steps=1)


def _hyperband(optuna: Any, spec: SweepSpec) -> Any:
    return optuna.pruners.HyperbandPruner(min_resource=1, max_resource=max(1, slots(spec)))


def _none(optuna: Any, spec: SweepSpec) -> Any:
    return optuna.pruners.NopPruner()


PRUNERS: dict[str, Callable[[Any, SweepSpec], Any]] = {"none": _none, "median": _median,
                                                         "hyperband": _hyperband}
"""The sweep file's ``pruner`` -> the Optuna pruner it makes."""


def slots(spec: SweepSpec) -> int:
    """How many slots of ``prune_every_s`` a trial's training time holds."""
    days, hours, minutes, seconds = (int(part) for part in spec.max_time.split(":"))
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return math.ceil(total / spec.prune_every_s)


def fit_args(spec: SweepSpec, run: Path) -> list[str]:
    """Arguments that make a trial's fit write its validations to ``run/validation_curve.jsonl``; none
    without a pruner. They go after every other argument of the fit: ``--trainer.callbacks.path`` sets
    the callback added last."""
    if spec.pruner == "none":
        return []
    return [f"--trainer.callbacks+={CURVE_CALLBACK}", "--trainer.callbacks.path", str(run / CURVE_FILE)]


def schedule_values(spec: SweepSpec) -> dict[str, Any]:
    """Config values that validate by time once per slot, for the base config's ``TimedValidation``
    (when it has one and the space does not set them): the pruner then has a value in every slot."""
    if spec.pruner == "none" or not _has_callback(spec.base, "TimedValidation"):
        return {}
    keys = {f"{VALIDATION_SCHEDULE}.first_after_s", f"{VALIDATION_SCHEDULE}.every_s"}
    return {key: spec.prune_every_s for key in keys if key not in {p.key for p in spec.params}}


def _has_callback(config: dict[str, Any], name: str) -> bool:
    callbacks = (config.get("trainer") or {}).get("callbacks") or []
    return any(isinstance(c, dict) and str(c.get("class_path", "")).rsplit(".", 1)[-1] == name
               for c in callbacks)


class CurveReader:
    """The lines a fit appended to its validation curve since the last :meth:`read`, whole lines only (a
    line being written is read next time)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        return [json.loads(line) for line in data[:end].splitlines() if line.strip()]


class TrialReporter:
    """Reports a trial's validations to Optuna, one per slot of training time, and says when its pruner
    would stop the trial."""

    def __init__(self, trial: Any, reader: CurveReader, prune_every_s: float) -> None:
        self.trial = trial
        self.reader = reader
        self.prune_every_s = prune_every_s
        self.reported: dict[int, float] = {}

    def report_new(self, judge: bool = True) -> bool:
        """Report what the fit validated since the last call; with ``judge``, whether to prune now."""
        for point in self.reader.read():
            value = (point.get("metrics") or {}).get(METRIC)
            if value is None:
                continue
            slot = int(float(point["train_s"]) // self.prune_every_s)
            if slot in self.reported:  # the slot's first validation stands for it
                continue
            self.trial.report(float(value), slot)
            self.reported[slot] = float(value)
            if judge and self.trial.should_prune():
                return True
        return False
