"""A fit that a scheduler or the user stops keeps its last step: SIGTERM (Kubernetes, SLURM, spot
reclaimers), a scheduler's early-warning signal (SLURM's ``--signal``) or Ctrl-C finishes the current
step, writes ``last.ckpt`` at that step and ends the fit with an exit code that says so."""

from __future__ import annotations

import _thread
import datetime as dt
import math
import os
import re
import signal
import subprocess
import threading
import time
from types import FrameType
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.rank_zero import rank_zero_info, rank_zero_warn

from nerf_lightning.callbacks.checkpoint import NerfCheckpoint
from nerf_lightning.core.distributed import all_reduce_sum_
from nerf_lightning.core.exit_codes import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE

_REFUSED_EARLY_SIGNALS = {"SIGINT", "SIGTERM", "SIGKILL", "SIGSTOP"}
_WATCH_EVERY_S = 0.1
"""How often the grace-period watchdog looks at the clock (the signal handler itself takes no lock)."""


def _clock(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="seconds")


class FitStopped(SystemExit):
    """Ends ``trainer.fit`` when :class:`Preemption` stops it; a ``SystemExit`` with the exit code, so
    that code is the process's unless a caller catches it (``NerfCLI`` does, and returns it).

    Attributes:
        code: the exit code.
        run_status: what the run record's ``status`` becomes: ``preempted`` or ``interrupted``.
        message: one line saying what was stopped, what was kept and how to resume.
    """

    def __init__(self, code: int, run_status: str, message: str) -> None:
        super().__init__(code)
        self.run_status = run_status
        self.message = message

    def __str__(self) -> str:
        return self.message


class Preemption(pl.Callback):
    """Stops a fit on SIGTERM, on the early signal or on Ctrl-C after the current training step, with
    last.ckpt written at that step, and exits with a code that asks a scheduler to run it again (75
    by default, :data:`PREEMPTED_EXIT_CODE`; Ctrl-C: 130, :data:`INTERRUPTED_EXIT_CODE`).

    SIGTERM is what Kubernetes, SLURM and spot-instance reclaimers send some seconds before they kill
    a job; ``early_signal`` (SIGUSR1 by default) is what SLURM sends ahead of the time limit when the
    job asks for it (``sbatch --signal=SIGUSR1@90``). Either one, or Ctrl-C (SIGINT), lets the step
    in progress finish; then ``last.ckpt`` is written at that step through the run's checkpoint
    callback (:class:`NerfCheckpoint`, atomically), the run record's status becomes ``preempted``
    (``interrupted`` for Ctrl-C) with what was kept, and ``trainer.fit`` ends by raising
    :class:`FitStopped`. A second Ctrl-C stops at once, keeping the last checkpoint written before.
    ``fit --ckpt_path last`` then resumes the run from that checkpoint, exactly (see
    ``docs/runs.md``).

    ``grace_period`` bounds the time from the signal to the exit: a step (or a validation, or the
    checkpoint write itself) still running when it is over is abandoned, the previous ``last.ckpt``
    stands (atomic writes leave it whole) and the record says so. Keep it below the scheduler's own
    grace (Kubernetes' ``terminationGracePeriodSeconds``, 30 s by default; SLURM's ``KillWait``).

    Under data parallelism every rank learns of a signal that any rank received at the end of the
    same step (one all-reduce of two integers per training step), every rank stops after that step,
    and rank 0 writes the checkpoint once. With Lightning's ``SLURMEnvironment`` and its
    ``auto_requeue`` (Lightning's default under SLURM), the early signal also requeues the job
    (``scontrol requeue``, as Lightning's own handler does) once the checkpoint is written; this
    callback takes that signal over from Lightning, whose handler would save a separate
    ``hpc_ckpt_N.ckpt`` from inside the signal handler, in the middle of a step.

    The handlers are installed when training starts (sanity check or first step) and Lightning puts
    the previous ones back when the fit ends: a signal during set-up (loading the dataset, building
    the model) still ends the process the usual way, with nothing trained yet to lose.

    Args:
        enabled: handle the signals; ``false`` leaves SIGTERM to Lightning (which stops after the
            step *without* a checkpoint and exits 0) and Ctrl-C to Python.
        early_signal: the name of the scheduler's early-warning signal (``SIGUSR1``, ``SIGUSR2``...),
            handled as SIGTERM is; ``null`` for none.
        exit_code: the exit code of a preempted fit (1-255).
        grace_period: seconds from the signal within which the fit must have written its checkpoint
            and be on its way out.
    """

    def __init__(self, enabled: bool = True, early_signal: str | None = "SIGUSR1",
                 exit_code: int = PREEMPTED_EXIT_CODE, grace_period: float = 20.0) -> None:
        if early_signal is not None:
            known = {member.name for member in signal.Signals}
            if early_signal not in known or early_signal in _REFUSED_EARLY_SIGNALS:
                raise ValueError(f"early_signal must name a signal a scheduler sends ahead of time (SIGUSR1, "
                                 f"SIGUSR2, ...) other than {', '.join(sorted(_REFUSED_EARLY_SIGNALS))}, "
                                 f"got {early_signal!r}")
        if not 1 <= exit_code <= 255:
            raise ValueError(f"exit_code must be 1-255 (0 would tell the scheduler the run finished), "
                             f"got {exit_code}")
        if not (math.isfinite(grace_period) and grace_period > 0):
            raise ValueError(f"grace_period must be a positive number of seconds, got {grace_period}")
        self.enabled = enabled
        self.early_signal = early_signal
        self.exit_code = exit_code
        self.grace_period = float(grace_period)
        self._trainer: pl.Trainer | None = None
        self._installed = False
        self._request: str | None = None  # the first signal this rank received
        self._requested_at: float | None = None
        self._interrupts = 0
        self._lock = threading.Lock()  # between the main thread and the watchdog, never in the handler
        self._settled = threading.Event()  # the stop is decided (or the fit is over): no expiry
        self._expired = False
        self._expiry_raised = False
        self._watchdog: threading.Thread | None = None
        self._stop_state: dict[str, Any] | None = None  # what the checkpoint written at the stop records
        self._stopped: dict[str, Any] | None = None  # for the run record
        self._resumed_stop: dict[str, Any] | None = None
        self._resumed_at: float | None = None
        self._resumed_from: dict[str, Any] | None = None

    # ------------------------------------------------------------------ signals
    @property
    def signals(self) -> list[signal.Signals]:
        """The signals handled while training: SIGTERM, SIGINT and ``early_signal``."""
        handled = [signal.SIGTERM, signal.SIGINT]
        if self.early_signal is not None:
            handled.append(signal.Signals[self.early_signal])
        return handled

    def _install(self, trainer: pl.Trainer) -> None:
        if (self._installed or not self.enabled or trainer.state.fn != TrainerFn.FITTING
                or threading.current_thread() is not threading.main_thread()):
            return
        # Lightning installed its own handlers just before training (and puts the ones from before the
        # fit back at its end); these replace its SIGTERM handler, which broadcasts from inside the
        # handler and stops the fit after the step with exit code 0 and no checkpoint.
        for signum in self.signals:
            signal.signal(signum, self._on_signal)
        self._trainer = trainer
        self._installed = True
        self._watchdog = threading.Thread(target=self._watch, name="preemption-grace", daemon=True)
        self._watchdog.start()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """The handler: notes the request, in plain attributes. It writes nothing and takes no lock (it
        runs between two bytecodes of the main thread, which may be in the middle of a write or hold
        a lock); it raises :class:`FitStopped` only for a second Ctrl-C and when the watchdog says the
        grace period is over."""
        if self._expired and not self._expiry_raised:
            self._expiry_raised = True
            raise self._stop_exception(self._request or "SIGTERM", why="grace")
        name = signal.Signals(signum).name
        if name == "SIGINT":
            self._interrupts += 1
            if self._interrupts > 1:  # a second Ctrl-C: stop at once
                raise self._stop_exception("SIGINT", why="at once")
        if self._request is None:
            self._request, self._requested_at = name, time.time()

    def _watch(self) -> None:
        """The watchdog thread: when the grace period since the request is over and the stop is not
        settled, it makes the main thread raise :class:`FitStopped` through the handler, by simulating
        SIGTERM (``_thread.interrupt_main``: harmless once the handlers are put back, as Python ignores
        a simulated signal whose handler is the default one). The main thread runs the handler at its
        next Python instruction: at once in a step (Python between tensor operations), when the call
        returns if it is blocked in one system call or collective."""
        while not self._settled.wait(_WATCH_EVERY_S):
            requested_at = self._requested_at
            if requested_at is None or time.time() < requested_at + self.grace_period:
                continue
            with self._lock:
                if not self._settled.is_set():
                    self._expired = True
                    _thread.interrupt_main(signal.SIGTERM)
            return

    def _end_watch(self) -> None:
        with self._lock:
            self._settled.set()

    # ------------------------------------------------------------------ hooks
    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install(trainer)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install(trainer)
        interval = self._interval()
        if interval is not None and trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics({"preemption/interval_s": interval}, step=trainer.global_step)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if not self._installed:
            return
        request = self._agreed_request(trainer)
        if request is None:
            return
        if self._request is None:  # another rank received it: this rank's grace starts now
            self._request, self._requested_at = request, time.time()
        self._write_checkpoint(trainer)
        with self._lock:
            if self._expired:  # the watchdog fired while writing: its exception is on its way
                return
            self._settled.set()
        exception = self._stop_exception(request, why="step")
        if request == self.early_signal and trainer.is_global_zero:
            self._requeue_on_slurm(trainer)
        raise exception

    def _agreed_request(self, trainer: pl.Trainer) -> str | None:
        """The signal any rank received (SIGTERM or the early signal before SIGINT), the same on every
        rank: an all-reduce of two flags under data parallelism, every step."""
        preempt = self._request is not None and self._request != "SIGINT"
        interrupt = self._request == "SIGINT"
        if trainer.world_size > 1:
            flags = torch.tensor([int(preempt), int(interrupt)], dtype=torch.int32,
                                 device=trainer.strategy.root_device)
            preempt, interrupt = (bool(value) for value in all_reduce_sum_(flags, trainer).tolist())
        if preempt:
            return self._request if self._request not in (None, "SIGINT") else "SIGTERM"
        return "SIGINT" if interrupt else None

    def _checkpoint_callback(self, trainer: pl.Trainer) -> NerfCheckpoint | None:
        return next((callback for callback in trainer.checkpoint_callbacks
                     if isinstance(callback, NerfCheckpoint) and callback.save_last), None)

    def _write_checkpoint(self, trainer: pl.Trainer) -> None:
        """``last.ckpt`` at this step through the run's :class:`NerfCheckpoint` (every rank calls it;
        rank 0 writes), unless it was written at this step already; nothing without such a callback."""
        checkpoint = self._checkpoint_callback(trainer)
        if checkpoint is None:
            return
        step = trainer.global_step
        self._stop_state = {"signal": self._request, "received_at": self._requested_at, "step": step}
        if checkpoint.last_step_in_last != step:
            checkpoint.save_last_now(trainer)

    def _kept_checkpoint(self) -> tuple[str, int] | None:
        """The newest checkpoint a resume can start from: this run's ``last.ckpt`` and its step, else
        the checkpoint this run resumed from; ``None`` when there is neither."""
        trainer = self._trainer
        checkpoint = self._checkpoint_callback(trainer) if trainer is not None else None
        if checkpoint is not None and checkpoint.last_step_in_last >= 0 and checkpoint.last_model_path:
            return checkpoint.last_model_path, checkpoint.last_step_in_last
        resumed = self._resumed_from
        if resumed is not None and resumed.get("checkpoint"):
            return resumed["checkpoint"], resumed["step"]
        return None

    def _stop_exception(self, request: str, why: str) -> FitStopped:
        """The :class:`FitStopped` to raise (``why``: ``step``, stopped at a step's end; ``grace``, the
        grace period ran out; ``at once``, a second Ctrl-C), its run-record entry kept for
        :meth:`run_record_entries`."""
        trainer = self._trainer
        interrupt = request == "SIGINT"
        code = INTERRUPTED_EXIT_CODE if interrupt else self.exit_code
        step = trainer.global_step if trainer is not None else None
        kept = self._kept_checkpoint()
        at_stop = why == "step" and kept is not None and kept[1] == step
        received = self._requested_at if self._requested_at is not None else time.time()
        self._stopped = {
            "signal": request,
            "received_at": _clock(received),
            "stopped_at_step": step,
            "checkpoint": kept[0] if kept else None,
            "checkpoint_step": kept[1] if kept else None,
            "checkpoint_at_stop": at_stop,
            "grace_period_s": self.grace_period,
            "within_grace_period": why != "grace",
            "seconds_to_stop": round(time.time() - received, 3),
            "exit_code": code,
        }
        where = f"{kept[0]} from step {kept[1]} stands" if kept else "no checkpoint of this run was written"
        if at_stop:
            assert kept is not None
            what = f"stopped after step {step} with {kept[0]} written at that step"
        elif why == "step":
            what = f"stopped after step {step} (no checkpoint callback keeps last.ckpt); {where}"
        elif why == "at once":
            what = f"a second Ctrl-C: stopped at once; {where}"
        else:
            what = f"the fit was still busy when the {self.grace_period:g} s grace period ran out; {where}"
        resume = "resume with the same command and --ckpt_path last" if kept else "start it again"
        message = f"nerf-lightning: {request}: {what}; exit code {code} ({resume})"
        return FitStopped(code, "interrupted" if interrupt else "preempted", message)

    def _requeue_on_slurm(self, trainer: pl.Trainer) -> None:
        """``scontrol requeue`` this job when Lightning's ``SLURMEnvironment`` has ``auto_requeue`` on (as
        Lightning's own early-signal handler would)."""
        connector = getattr(trainer, "_accelerator_connector", None)  # where Lightning's handler looks
        environment = getattr(connector, "cluster_environment", None)
        if not (isinstance(environment, SLURMEnvironment) and environment.auto_requeue):
            return
        array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
        job = (f"{array_job}_{os.environ.get('SLURM_ARRAY_TASK_ID')}" if array_job
               else os.environ.get("SLURM_JOB_ID", ""))
        if not re.fullmatch(r"[0-9_]+", job):
            rank_zero_warn(f"Preemption: no SLURM job id to requeue (got {job!r})")
            return
        try:
            done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError) as error:
            rank_zero_warn(f"Preemption: scontrol requeue {job} failed: {error}")
            return
        if done.returncode == 0:
            rank_zero_info(f"Preemption: requeued SLURM job {job}")
        else:
            rank_zero_warn(f"Preemption: scontrol requeue {job} failed with code {done.returncode}: "
                           f"{done.stderr.strip()}")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        self._end_watch()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end_watch()  # training is over: what is left of the fit ends it anyway

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._end_watch()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._end_watch()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """``{"stop": {"signal", "received_at" (seconds since the epoch), "step"}}`` in the checkpoint
        written at a stop; ``{}`` in the others."""
        return {"stop": dict(self._stop_state)} if self._stop_state is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resumed_stop = state_dict.get("stop")
        self._resumed_at = time.time()

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            self._resumed_from = {"checkpoint": None if trainer.ckpt_path is None else str(trainer.ckpt_path),
                                  "step": int(checkpoint.get("global_step", 0))}

    def _interval(self) -> float | None:
        """Seconds from the signal that stopped the run to this resume (``None``: not known, or not a
        resume of a stopped run)."""
        stop = self._resumed_stop
        if not stop or stop.get("received_at") is None or self._resumed_at is None:
            return None
        return round(self._resumed_at - float(stop["received_at"]), 3)

    def run_record_entries(self) -> dict[str, Any]:
        """What ``run.json`` records (:class:`~nerf_lightning.runs.record.RunRecorder` asks every
        callback): ``preemption``, how this run was stopped; ``resumed``, the checkpoint a resumed run
        started from and, when that checkpoint was written at a stop, the signal and the seconds from
        it to this resume (``preempted_for_s``)."""
        entries: dict[str, Any] = {}
        if self._stopped is not None:
            entries["preemption"] = dict(self._stopped)
        if self._resumed_from is not None:
            resumed = dict(self._resumed_from)
            stop = self._resumed_stop or {}
            if stop.get("received_at") is not None:
                resumed.update(signal=stop.get("signal"),
                               signal_received_at=_clock(float(stop["received_at"])),
                               preempted_for_s=self._interval())
            entries["resumed"] = resumed
        return entries
