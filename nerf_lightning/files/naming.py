"""The names of files being written: a temporary file or folder lies beside its target under a name
that says what it is (:func:`temporary_name`), recognised by :func:`is_temporary` and mapped back to its
target by :func:`target_of_temporary`."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

TEMPORARY_MARK = ".tmp-"
"""Part of every temporary name (``.NAME.tmp-PID-RANDOM.SUFFIX``); see :func:`is_temporary`."""
_TEMPORARY = re.compile(r"^\.(?P<stem>.*)\.(?:tmp|old)-\d+-[0-9a-f]{8}(?P<suffix>.*)$")


def temporary_name(target: Path, kind: str = "tmp") -> Path:
    """A fresh name beside ``target``: ``.{stem}.{kind}-{pid}-{random}{suffix}``.

    Hidden (leading dot) so listings and globs skip it; the suffix is kept because some writers pick
    the file type from it (ffmpeg); pid and randomness keep concurrent writers apart.
    """
    return target.with_name(f".{target.stem}.{kind}-{os.getpid()}-{uuid.uuid4().hex[:8]}{target.suffix}")


def is_temporary(name: str) -> bool:
    """Whether a file or folder name is one :func:`temporary_name` makes (a write in progress or one that
    died)."""
    return name.startswith(".") and TEMPORARY_MARK in name


def target_of_temporary(path: Path) -> Path:
    """The target whose temporary name ``path`` is (:func:`temporary_name`), else ``path`` itself: an
    error met while writing the temporary file names the file the user asked for."""
    found = _TEMPORARY.match(path.name)
    return path.with_name(found["stem"] + found["suffix"]) if found else path
