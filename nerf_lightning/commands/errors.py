"""Errors as one line on stderr and an exit code: the same for every command.

=====================================================  =============================================
exception                                               line, exit code
=====================================================  =============================================
:class:`~nerf_lightning.scenes.errors.DatasetValidationError`  every problem, then where to list them; 2
:class:`~nerf_lightning.scenes.errors.DatasetError`       ``nerf-lightning: dataset error: ...``; 2
``CheckpointError``, ``ConstructorArgumentError``       ``nerf-lightning: ...``; 2
``FrameMismatchError``                                  ``nerf-lightning: data.normalise: ...``; 2
``NonFiniteLossError``                                  ``nerf-lightning: ...``; 3
``RankLostError`` (a data-parallel process died)        ``nerf-lightning: data-parallel fit ... rank N was
                                                        killed by SIGKILL; ...``; 75
:class:`~nerf_lightning.files.DiskFullError`, any       ``nerf-lightning: PATH: no space left on device:
error caused by an ``OSError`` ``ENOSPC``/``EDQUOT``    writing it needs N, M free there...``; 4
(in a background thread too: TensorBoard's writer)
``FileNotFoundError``, ``FileExistsError``              ``nerf-lightning: ...``; 2
``IsADirectoryError``, ``NotADirectoryError``,          ``nerf-lightning: [Errno N] ...: 'PATH'``; 2
``PermissionError`` (a path given that cannot be used)
:class:`~nerf_lightning.commands.base.UsageError` and    ``nerf-lightning COMMAND: ...``; 2
other ``ValueError`` of a command beside Lightning's
=====================================================  =============================================

Any other exception keeps its traceback: it is a bug.

Not errors, but exit codes too: a fit stopped by SIGTERM or the early-warning signal
(``--preemption.early_signal``) ends with ``--preemption.exit_code`` (75 by default, for a scheduler
to requeue it) and one by Ctrl-C with 130, each after a checkpoint at the step it stopped
(:mod:`nerf_lightning.callbacks.preemption`); any other command stopped by SIGTERM ends with 143 after
one line, its partial output and temporary files removed
(:func:`~nerf_lightning.commands.base.terminated_as_exit`).

A full disk (:data:`DISK_FULL_EXIT`) stops every command, a fit included: a checkpoint that cannot be
written raises before anything is replaced, so the fit ends at its last good checkpoint instead of
training on with nothing saved. A writer's own thread that meets it (TensorBoard's event writer, whose
error the fit meets again at its next write) prints no traceback: the command's line says it once.
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable

from nerf_lightning.commands.base import UsageError
from nerf_lightning.config.errors import ConstructorArgumentError
from nerf_lightning.core.errors import (  # not from their Lightning-based homes
    CheckpointError,
    FrameMismatchError,
    NonFiniteLossError,
    RankLostError,
)
from nerf_lightning.files import find_disk_full
from nerf_lightning.files.space import error_chain
from nerf_lightning.scenes.errors import DatasetError, DatasetValidationError

RANK_LOST_EXIT = 75
"""The exit code of a data-parallel fit that lost a process: ``EX_TEMPFAIL``, as a preempted fit's, so that a
scheduler requeues it (``--ckpt_path last`` resumes it)."""

DISK_FULL_EXIT = 4
"""The exit code of a command stopped by a full disk or an exceeded quota."""


def _print(line: str) -> None:
    print(line, file=sys.stderr)


class _ThreadDiskErrors:
    """What threads that died of a full disk left to say (TensorBoard's event writer does: its error is
    raised again in the command at its next write). Installed as ``threading.excepthook`` by the first
    :func:`report`, for the rest of the process: such a thread's error is the command's one line, never
    a traceback, whenever the thread reports it (before or after the command met the same error).
    Any other error of a thread goes to the hook that was there before."""

    def __init__(self) -> None:
        self.previous = threading.excepthook
        self.running = 0  # reports in progress (they nest)
        self.pending: list[BaseException] = []  # met by a thread while a report runs
        # Errors a report has printed, held (not their ids: a freed error's id is given to new objects).
        self.reported: deque[BaseException] = deque(maxlen=64)

    def __call__(self, failure: threading.ExceptHookArgs) -> None:
        error = failure.exc_value
        if error is None or find_disk_full(error) is None:
            self.previous(failure)
        elif _held(error, self.reported):
            return
        elif self.running:
            self.pending.append(error)  # the command may yet meet it: printed when the report ends
        else:
            _print(f"nerf-lightning: {find_disk_full(error)}")

    def finish(self, code: int) -> int:
        """The exit code of a report that ended with ``code``, once its threads' lines are printed."""
        self.running -= 1
        if self.running:
            return code
        unreported = [error for error in self.pending if not _held(error, self.reported)]
        self.pending.clear()
        for error in unreported:
            self.reported.append(error)
            _print(f"nerf-lightning: {find_disk_full(error)}")
        return DISK_FULL_EXIT if unreported and code == 0 else code


def _held(error: BaseException, errors: deque[BaseException]) -> bool:
    return any(error is each for each in errors)


_threads: _ThreadDiskErrors | None = None


def report(command: str | None, run: Callable[[], int]) -> int:
    """``run()``'s exit code, or the one line and exit code of the error it raised (the module's table).

    A thread that dies of a full disk prints that line instead of a traceback (:class:`_ThreadDiskErrors`),
    once: when ``run()`` ends without having met the same error, with :data:`DISK_FULL_EXIT`.

    Args:
        command: the command beside Lightning's being run (``render``, ``data validate``), named in
            its argument errors; ``None`` for Lightning's, whose other ``ValueError`` propagate.
    """
    global _threads
    if _threads is None or threading.excepthook is not _threads:
        _threads = _ThreadDiskErrors()
        threading.excepthook = _threads
    threads = _threads
    threads.running += 1
    code = 1
    try:
        code = _report(command, run, threads.reported)
    finally:
        code = threads.finish(code)
    return code


def _report(command: str | None, run: Callable[[], int], reported: deque[BaseException]) -> int:
    """:func:`report` but for the threads; a full disk's error chain is put in ``reported``."""
    try:
        return run()
    except DatasetValidationError as error:  # every problem, as 'nerf-lightning data validate' lists them
        for problem in error.problems:
            _print(f"nerf-lightning: dataset error: {problem}")
        count = len(error.problems)
        _print(f"nerf-lightning: {error.file}: {count} problem{'s' if count != 1 else ''}; "
               f"list them again with '{error.command}'")
        return 2
    except DatasetError as error:
        _print(f"nerf-lightning: dataset error: {error}")
        return 2
    except (CheckpointError, ConstructorArgumentError) as error:  # a broken checkpoint; a refused argument
        _print(f"nerf-lightning: {error}")
        return 2
    except FrameMismatchError as error:  # a checkpoint trained in another frame (data.normalise)
        _print(f"nerf-lightning: data.{error}")
        return 2
    except NonFiniteLossError as error:
        _print(f"nerf-lightning: {error}")
        return 3
    except RankLostError as error:  # a data-parallel peer died: resumable, as a preempted fit is
        _print(f"nerf-lightning: {error}")
        return RANK_LOST_EXIT
    except (FileNotFoundError, FileExistsError) as error:  # e.g. a missing --ckpt_path; an output to keep
        _print(f"nerf-lightning: {error}")
        return 2
    except (IsADirectoryError, NotADirectoryError, PermissionError) as error:  # a path that cannot be used
        _print(f"nerf-lightning: {error}")
        return 2
    except UsageError as error:
        _print(f"nerf-lightning {command or ''}".rstrip() + f": {error}")
        return 2
    except ValueError as error:
        if command is None:
            raise
        _print(f"nerf-lightning {command}: {error}")
        return 2
    except Exception as error:
        full = find_disk_full(error)  # a DiskFullError, or an OSError ENOSPC/EDQUOT in its chain
        if full is None:
            raise
        reported.extend(error_chain(error))
        _print(f"nerf-lightning: {full}")
        return DISK_FULL_EXIT
