"""What the pipeline remembers: ``WORK/pipeline.json``, each stage's ``WORK/<stage>/result.json``, and
the fingerprints that decide whether a stage is up to date.

``pipeline.json`` (rewritten atomically at every change) holds per stage its ``status``, ``inputs``
and their ``inputs_key``, the ``outputs`` (files with path, sha256 and size; paths inside the work dir
are relative to it, so a work dir can be moved), ``numbers``, ``summary``, the ``command`` of the last
attempt, ``attempts``, ``log``, times and ``error``; ``last_run`` holds what the latest invocation did
with each stage. ``WORK/<stage>/result.json`` is the stage's result alone (inputs key, outputs,
numbers, summary): what the stages after it and the end table read.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nerf_lightning.datasets.convert import TRANSFORMS_FILE
from nerf_lightning.datasets.sources.colmap import find_colmap_images, find_colmap_model
from nerf_lightning.files import DigestMemo, FileDigest, atomic_write_json
from nerf_lightning.pipeline.config import PipelineError
from nerf_lightning.scenes.fingerprint import dataset_fingerprint
from nerf_lightning.scenes.formats.llff import POSES_FILE

STATE_FILE = "pipeline.json"
STATE_VERSION = 1
LOCK_FILE = ".pipeline.lock"
RESULT_FILE = "result.json"
"""A stage's result, ``WORK/<stage>/result.json``."""
COMMAND_RESULT = "command.json"
"""The ``--result_file`` a stage's command writes, ``WORK/<stage>/command.json``."""


# ------------------------------------------------------------------------------------- fingerprints


def value_key(value: Any) -> str:
    """sha256 of a JSON-able value (key order does not matter)."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def file_digest(path: Path, memo: DigestMemo | None = None) -> FileDigest:
    """Size and sha256 of a file, or of a folder's files (names and contents, sorted); each file read
    once while its stat is unchanged (:class:`~nerf_lightning.files.DigestMemo`, in this process)."""
    memo = memo or DigestMemo(None, scope=path)
    if not path.is_dir():
        return memo.digest(path)
    digest, total = hashlib.sha256(), 0
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        name = item.relative_to(path).as_posix().encode()
        found = memo.digest(item)
        digest.update(len(name).to_bytes(8, "little") + name)
        digest.update(found.size.to_bytes(8, "little") + bytes.fromhex(found.sha256))
        total += found.size
    return FileDigest(total, digest.hexdigest())


def source_fingerprint(source: Path, images: Path | None = None) -> str:
    """Content hash of what ``data convert SOURCE`` reads: an LLFF capture's poses and images, or a
    COLMAP model folder's files and its image folder. Problems give an ``unreadable: ...`` string
    (``data convert`` reports them)."""
    try:
        if (source / POSES_FILE).is_file():
            return value_key(["llff", dataset_fingerprint(source, dataset_format="llff"), str(images)])
        found = find_colmap_model(source)
        if found is None:
            return f"unreadable: no LLFF poses or COLMAP model in {source}"
        model = found[0]
        image_folder = images or find_colmap_images(model)
        files = {f"model/{p.name}": file_digest(p).sha256 for p in sorted(model.iterdir())
                 if p.is_file() and p.name != TRANSFORMS_FILE}
        if image_folder is not None and image_folder.is_dir():
            files["images"] = file_digest(image_folder).sha256
        return value_key(["colmap", files, str(image_folder)])
    except OSError as error:
        return f"unreadable: {error}"


# ------------------------------------------------------------------------------------------ helpers


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def size_text(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GB"


def shown(path: Path) -> str:
    """``path`` for messages: relative to the current directory when inside it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def exit_reason(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


def failure_line(text: str) -> str:
    """The line of a failed stage's log that says why (one line, at most 300 characters): the
    ``nerf-lightning ...:`` error line every command ends with, else an exception's last line. Only
    shown to the user: no result is ever read from a command's output (they come from files)."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", text)]
    lines = [line for line in lines if line and not line.startswith("=====")]
    preferred = [line for line in lines if line.startswith(("nerf-lightning", "error:"))
                 or re.match(r"^\w*(Error|Exception)\b", line)]
    line = (preferred or lines or [""])[-1]
    return line if len(line) <= 300 else line[:297] + "..."


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a file a command wrote; :class:`OutputError` when missing or not an object."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise OutputError(f"{path}: unreadable ({error})") from None
    if not isinstance(value, dict):
        raise OutputError(f"{path}: expected a JSON object")
    return value


class OutputError(Exception):
    """A stage's command succeeded but its outputs are not what the pipeline needs."""


class StageError(Exception):
    """A stage failed for good; the message is the one line the chain stops with."""


# ---------------------------------------------------------------------------------------- the state


class State:
    """``WORK/pipeline.json`` and the stages' result files of one work dir."""

    def __init__(self, work: Path, config_path: Path) -> None:
        self.work = work
        self.path = work / STATE_FILE
        self.config_path = config_path
        self.data: dict[str, Any] = {"version": STATE_VERSION, "stages": {}}
        self.memo = DigestMemo(None, scope=work)  # outputs are hashed once per version of each file

    @property
    def stages(self) -> dict[str, Any]:
        return self.data["stages"]

    def load(self) -> list[str]:
        """Read the state file; notes for the user when it cannot be used (every stage then runs)."""
        if not self.path.exists():
            return []
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            return [f"note: {self.path} is unreadable ({error}); every stage runs"]
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION or not isinstance(
                data.get("stages"), dict):
            return [f"note: {self.path} has another layout; every stage runs"]
        self.data = data
        return []

    def save(self) -> None:
        self.data["config"] = str(self.config_path)
        self.data["updated"] = now()
        atomic_write_json(self.data, self.path)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Keep a second pipeline out of this work dir."""
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            yield
            return
        with open(self.work / LOCK_FILE, "a+") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                raise PipelineError(f"{self.work} is in use by another pipeline") from None
            yield

    # -------------------------------------------------------------- paths and files

    def store(self, path: Path) -> str:
        """``path`` as recorded: relative to the work dir when inside it, else absolute."""
        path = Path(os.path.abspath(path))
        try:
            return path.relative_to(os.path.abspath(self.work)).as_posix()
        except ValueError:
            return str(path)

    def resolve(self, stored: str) -> Path:
        return Path(stored) if Path(stored).is_absolute() else self.work / stored

    def digest(self, path: Path) -> str:
        """sha256 of a file or folder, each file read once per version of it."""
        return file_digest(path, self.memo).sha256

    def file(self, path: Path) -> dict[str, Any]:
        """The record of an output file: path, sha256, bytes."""
        found = file_digest(path, self.memo)
        return {"path": self.store(path), "sha256": found.sha256, "bytes": found.size}

    def intact(self, record: dict[str, Any]) -> bool:
        """Whether a stage's recorded output files are still there with the same sha256."""
        for entry in (record.get("outputs") or {}).get("files", {}).values():
            try:
                if self.digest(self.resolve(entry["path"])) != entry["sha256"]:
                    return False
            except OSError:  # gone or unreadable
                return False
        return True

    # -------------------------------------------------------------- stage results

    def stage_dir(self, stage: str) -> Path:
        return self.work / stage

    def write_result(self, stage: str, result: dict[str, Any]) -> Path:
        """Write ``WORK/<stage>/result.json`` atomically; its path."""
        path = self.stage_dir(stage) / RESULT_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json({"stage": stage, **result}, path)
        return path

    def result(self, stage: str, needed_by: str) -> dict[str, Any]:
        """``stage``'s result file, for ``needed_by``: present, of the stage's last successful run
        (same inputs key as recorded) and with its outputs unchanged; else a :class:`StageError`."""
        record = self.stages.get(stage)
        if not record or record.get("status") != "done":
            raise StageError(f"stage {needed_by} needs the outputs of {stage}, which has not completed in "
                             f"{self.work}; add {stage} to stages")
        try:
            result = read_json(self.stage_dir(stage) / RESULT_FILE)
        except OutputError as error:
            raise StageError(f"stage {needed_by} needs the result of {stage}: {error}; add {stage} to "
                             "stages") from None
        if result.get("inputs_key") != record.get("inputs_key") or not self.intact(result):
            raise StageError(f"stage {needed_by} needs the outputs of {stage}, which changed or are gone; "
                             f"add {stage} to stages")
        return result

    def up_to_date(self, stage: str, key: str) -> dict[str, Any] | None:
        """``stage``'s result when its last run succeeded with inputs ``key`` and its outputs are
        unchanged (make's "target newer than its prerequisites", by content); else ``None``."""
        record = self.stages.get(stage)
        if not record or record.get("status") != "done" or record.get("inputs_key") != key:
            return None
        try:
            result = read_json(self.stage_dir(stage) / RESULT_FILE)
        except OutputError:
            return None
        return result if result.get("inputs_key") == key and self.intact(result) else None
