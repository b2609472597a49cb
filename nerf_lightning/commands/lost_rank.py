"""A data-parallel fit whose process died: the error the survivors meet, turned into one line.

When a rank is killed (``kill -9``, the out-of-memory killer, a lost machine), the others meet it at
their next collective: gloo's ``Connection reset by peer`` (NCCL aborts its communicator), raised from
deep in the step as a traceback. :func:`lost_rank_error` recognises that error and, on rank 0 of a
launch Lightning made (its launcher holds the other local ranks' processes), names the rank that is
gone and how it ended; elsewhere it says a peer is gone. A rank that hangs instead of dying is ended
by the process group's timeout (Lightning's default, 30 minutes; ``--trainer.strategy.init_args.timeout
0:05:00`` sets it) and reported the same way.
"""

from __future__ import annotations

import signal
import subprocess
import threading
from typing import Any

import lightning.pytorch as pl
from lightning.fabric.strategies.launchers.subprocess_script import _ChildProcessObserver

from nerf_lightning.core.errors import RankLostError

PEER_LOST = ("reset by peer", "closed by peer", "Broken pipe", "Connection refused",
             "communicator was aborted", "Timed out", "timed out", "Socket Timeout")
"""Words of the errors gloo and NCCL raise in a collective whose peer is gone or silent."""
COLLECTIVE = ("gloo", "NCCL", "nccl", "c10d", "ProcessGroup")
"""Words that say an error came from the process group, not from the model."""


def _is_peer_lost(error: BaseException) -> bool:
    text = str(error)
    return isinstance(error, RuntimeError) and any(word in text for word in PEER_LOST) \
        and any(word in text for word in COLLECTIVE)


def _how(process: subprocess.Popen[Any]) -> str:
    code = process.returncode
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def lost_rank_error(trainer: pl.Trainer, error: BaseException) -> RankLostError | None:
    """The one-line :class:`RankLostError` for ``error`` if it is a collective that lost its peer in a
    run of several processes; ``None`` otherwise."""
    if trainer.world_size < 2 or not _is_peer_lost(error):
        return None
    launcher = getattr(trainer.strategy, "launcher", None)
    processes: list[subprocess.Popen[Any]] = list(getattr(launcher, "procs", None) or [])  # Lightning's
    gone = []
    for local_rank, process in enumerate(processes, start=1):
        try:
            process.wait(timeout=2)  # it died: its exit status is there (or is about to be)
        except subprocess.TimeoutExpired:
            continue
        gone.append(f"rank {trainer.node_rank * trainer.num_devices + local_rank} {_how(process)}")
    who = "; ".join(gone) if gone else "a peer rank is gone (its connection was lost)"
    checkpoint = trainer.checkpoint_callback
    last = getattr(checkpoint, "last_model_path", "") if checkpoint is not None else ""
    step = getattr(checkpoint, "last_step_in_last", -1)
    kept = f"the last checkpoint is {last} (step {step})" if last and step >= 0 \
        else "no checkpoint was written"
    return RankLostError(f"data-parallel fit of {trainer.world_size} processes stopped at step "
                         f"{trainer.global_step}: {who}; {kept}; to resume, run the same command with "
                         "--ckpt_path last")


class SayWhichRankIsLost(pl.Callback):
    """On rank 0, as soon as a collective has lost its peer (``on_exception``, before Lightning tears the
    run down), stops Lightning's child-process observer: it polls the other ranks every few seconds and,
    finding one dead, SIGKILLs rank 0 too, which would cut off the line :func:`lost_rank_error` gives.
    The observer is left alone in every other case (its job: no rank left hanging)."""

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        if trainer.world_size < 2 or not trainer.is_global_zero or not _is_peer_lost(exception):
            return
        for thread in threading.enumerate():
            if isinstance(thread, _ChildProcessObserver):  # Lightning's, whose fields are not an API
                thread._child_processes = []  # its next poll finds no process to avenge and ends
