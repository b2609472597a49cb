"""Errors as one line on stderr and an exit code: the same for every command.

=====================================================  =============================================
exception                                               line, exit code
=====================================================  =============================================
:class:`~nerf_lightning.scenes.errors.DatasetValidationError`  every problem, then where to list them; 2
:class:`~nerf_lightning.scenes.errors.DatasetError`       ``nerf-lightning: dataset error: ...``; 2
``CheckpointError``, ``ConstructorArgumentError``       ``nerf-lightning: ...``; 2
``FrameMismatchError``                                  ``nerf-lightning: data.normalise: ...``; 2
``NonFiniteLossError``                                  ``nerf-lightning: ...``; 3
``FileNotFoundError``, ``FileExistsError``              ``nerf-lightning: ...``; 2
:class:`~nerf_lightning.commands.base.UsageError` and    ``nerf-lightning COMMAND: ...``; 2
other ``ValueError`` of a command beside Lightning's
=====================================================  =============================================

Any other exception keeps its traceback: it is a bug.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from nerf_lightning.commands.base import UsageError
from nerf_lightning.config.errors import ConstructorArgumentError
from nerf_lightning.core.errors import (  # not from their Lightning-based homes
    CheckpointError,
    FrameMismatchError,
    NonFiniteLossError,
)
from nerf_lightning.scenes.errors import DatasetError, DatasetValidationError


def _print(line: str) -> None:
    print(line, file=sys.stderr)


def report(command: str | None, run: Callable[[], int]) -> int:
    """``run()``'s exit code, or the one line and exit code of the error it raised.

    Args:
        command: the command beside Lightning's being run (``render``, ``data validate``), named in
            its argument errors; ``None`` for Lightning's, whose other ``ValueError`` propagate.
    """
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
    except (FileNotFoundError, FileExistsError) as error:  # e.g. a missing --ckpt_path; an output to keep
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
