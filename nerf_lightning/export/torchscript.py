"""``--format torchscript``: the standalone renderer scripted with ``torch.jit.script`` (deprecated by torch).

The renderer is assembled from the model's hooks (:mod:`nerf_lightning.export.assemble`), scripted
and saved; ``torch.jit.load`` then renders rays without this package::

    renderer = torch.jit.load("model.pt")
    rgb, depth, opacity = renderer(origins, directions, near, far)   # [R, 3], [R], [R]

torch 2.13 deprecates TorchScript in favour of ``torch.export`` (``--format pt2``, the deployable
format); it still scripts, saves and loads. Its deprecation warnings are not hidden: they are
collected and returned as one note that the command prints. The hooks' modules must be scriptable
(every built-in one is); one that is not is refused in one line that names what does not script (the
compiler's reason, the file and line, the source line and the construct it marks:
:func:`script_failure`) and points to ``--format pt2``.
"""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path
from typing import Any

import torch

from nerf_lightning.export.assemble import build_standalone
from nerf_lightning.export.common import ExportError
from nerf_lightning.export.standalone import StandaloneRenderer
from nerf_lightning.files.atomic import atomic_path
from nerf_lightning.system.module import NerfModule

__all__ = ["build_standalone", "export_torchscript", "script_failure", "script_standalone"]

_SOURCE = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+)')
_CALLED = re.compile(r"'(?P<compiled>[^']+)' is being compiled since it was called from '(?P<caller>[^']+)'")


def deprecation_note(caught: list[warnings.WarningMessage]) -> str | None:
    """One line summarising torch's TorchScript deprecation warnings among ``caught`` (``None``: none)."""
    messages = [str(w.message).strip().splitlines()[0] for w in caught
                if issubclass(w.category, DeprecationWarning) and "jit" in str(w.message)]
    if not messages:
        return None
    return (f"torch {torch.__version__} deprecates TorchScript ({messages[0]}); the file works with this "
            "torch, but --format pt2 (torch.export) is the supported deployable format")


def script_failure(error: BaseException) -> str:
    """One line for a ``torch.jit.script`` failure: the compiler's reason and the construct it refused.

    TorchScript's message is a reason ending in a colon, then the source around the construct with
    ``~~~ <--- HERE`` under it (and, for a function reached through calls, which call compiled it).
    The line keeps the reason, then ``at FILE:LINE: `source line``` and the marked construct when it is
    only part of that line, e.g. ``Compiled functions can't take variable number of arguments or use
    keyword-only arguments with defaults, at my_sampler/steps.py:12: `def jitter(n: int, *, generator:
    Optional[torch.Generator] = None) -> Tensor:` (marked: `None`), in 'jitter' called from
    'MySteps.forward'``.
    """
    lines = str(error).splitlines()
    reason = next((line.strip() for line in lines if line.strip()), type(error).__name__).rstrip(":.")
    where = ""
    source: tuple[str, int, int] | None = None  # (path, line number, index of its line in `lines`)
    for index, line in enumerate(lines):
        found = _SOURCE.match(line)
        if found and source is None:
            source = (found["path"], int(found["line"]), index)
        elif source is not None and "<--- HERE" in line and index - 1 > source[2]:
            code = lines[index - 1]
            start, end = line.find("~"), line.rfind("~") + 1
            marked = code[start:end].strip() if 0 <= start < end else ""
            path = source[0]
            if not os.path.relpath(path).startswith(".."):
                path = os.path.relpath(path)
            where = f", at {path}:{source[1] + index - 2 - source[2]}: `{code.strip()}`"
            if marked and marked != code.strip():
                where += f" (marked: `{marked}`)"
            break
    called = _CALLED.search(str(error))
    if called:
        where += f", in '{called['compiled']}' called from '{called['caller']}'"
    return reason + where


def script_standalone(renderer: StandaloneRenderer) -> torch.jit.ScriptModule:
    """``torch.jit.script`` of a standalone renderer (torch's deprecation warnings pass through)."""
    return torch.jit.script(renderer)


def export_torchscript(model: NerfModule, background: tuple[float, float, float], out: Path,
                       source: dict[str, Any] | None = None) -> str | None:
    """Script ``model``'s standalone renderer and save it to ``out`` atomically.

    Returns:
        The deprecation note (:func:`deprecation_note`) for the command to print, or ``None``.

    Raises:
        ExportError: no hook on the field or sampler, or a hook's module does not script.
    """
    renderer = build_standalone(model, background, source)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecationWarning)
        try:
            scripted = script_standalone(renderer)
        except Exception as error:  # many lines of source and caret: one line of what failed, and where
            raise ExportError(
                f"torch.jit.script cannot compile the standalone renderer of sampler "
                f"{type(model.sampler).__name__!r} and field {type(model.field).__name__!r}: "
                f"{script_failure(error)}; use --format pt2"
            ) from error
        with atomic_path(out) as temporary:
            torch.jit.save(scripted, str(temporary))
    note = deprecation_note(caught)
    for warning in caught:  # anything else goes on as if it had not been recorded
        deprecation = issubclass(warning.category, DeprecationWarning) and "jit" in str(warning.message)
        if note is None or not deprecation:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    return note
