"""``nerf-lightning pipeline --config PIPELINE.yaml``: from a dataset to a verified export in one command.

The stages, always in this order (``stages:`` in the file picks a subset):

============  ==========================================================================================
``convert``   ``data convert`` from ``data.convert_from`` into ``data.root`` (or ``data make-demo`` for
              ``data.make_demo: true`` when the scene is not complete); skipped when there is nothing to
              make. It comes before ``validate`` so that what is validated is what ``fit`` reads.
``validate``  ``data validate`` with the fit config's dataset format and downscale.
``cache``     ``data cache``: the image cache entries of the train, val and test splits, with the fit
              config's settings (skipped with ``data.cache: false``).
``fit``       ``fit --config ... --trainer.default_root_dir WORK/fit/KEY``; resumes from ``last.ckpt``.
``test``      ``test`` of the fit's ``last.ckpt`` with that run's ``config.yaml``: ``eval.json``.
``render``    ``render`` of the fit's ``last.ckpt`` into ``WORK/<render.out>``.
``export``    ``export --format F --out WORK/<export.out> --force``.
``verify``    ``export ... --verify`` into ``WORK/verify/``: that command exits 1 when the exported
              module's PSNR is not within 0.1 dB of the checkpoint's.
============  ==========================================================================================

Design: a linear chain of our own commands, skipped like make's file targets
-----------------------------------------------------------------------------

Each stage is exactly one subprocess of this package's command line (``python -m nerf_lightning ...``,
the interpreter running the pipeline), run in the current directory with its output appended to
``WORK/logs/STAGE.log``. Every stage depends on the ones before it, so the order is fixed and nothing
runs in parallel: there is no scheduler, DAG framework or daemon, just a loop over :data:`STAGES`.

Skipping follows make's model of file targets with prerequisites, with content fingerprints where make
compares timestamps: a stage is skipped when the inputs recorded for its last successful run equal the
current ones *and* the outputs recorded then are still there with the same sha256. Inputs are the
dataset fingerprint (:func:`~nerf_lightning.data.fingerprint.dataset_fingerprint`), the resolved stage
config (for ``fit`` the whole config LightningCLI resolves from ``fit.config`` and ``fit.args``) and
the sha256 of the upstream outputs it reads (e.g. the checkpoint), so a changed fit config re-runs
``fit`` and, through the new checkpoint, everything after it, while ``validate`` and ``cache`` stay
skipped. make itself was considered and not used: timestamps cannot tell a changed config from a
touched file, the resolved LightningCLI config (defaults, config files and arguments together) is not a
file at all, and retries, resuming from ``last.ckpt`` and the summary table would be shell code in a
Makefile. A stage that fails is retried ``retries`` times; then the chain stops with one line naming
the stage and its log file, and the stages after it are not run.

State: ``WORK/pipeline.json``, rewritten atomically at every change (``running`` before each attempt,
``done`` or ``failed`` after it). Per stage: ``status``, ``inputs`` and their ``inputs_key``, the
``outputs`` (files with path, sha256 and size; paths inside the work dir are relative to it, so a work
dir can be moved), ``numbers`` (PSNRs, frames, sizes), ``summary``, the ``command`` of the last attempt,
``attempts``, ``log``, times and ``error``. ``last_run`` holds what the latest invocation did with each
stage (``done``, ``skipped``, ``failed``, ``not run``).

Resuming ``fit``: its root directory is named after the key of its inputs, ``WORK/fit/<key>``, so every
run in it trained with this config on this data. When the stage has to run and one of those runs left
a ``last.ckpt`` (a failed attempt, or a pipeline killed during training), the next attempt passes
``--ckpt_path`` to it and training continues where it stopped; a changed config gets a new directory
and starts from scratch.

Paths in the file: inputs (``data.root``, ``data.convert_from``, ``data.images``, ``fit.config``,
``work_dir``) are relative to the current directory, like on the command line (a bare ``fit.config``
name such as ``demo`` is a shipped config when no such file is there); outputs
(``render.out``, ``export.out``) are relative to ``work_dir``. A lock file keeps two pipelines out of
one work dir.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import importlib.util
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from nerf_lightning.configs_lookup import ConfigNotFoundError, resolve_config
from nerf_lightning.data.cache import cache_entry_path, default_cache_dir
from nerf_lightning.data.cache_entry import MANIFEST_FILE, PIXELS_FILE
from nerf_lightning.data.convert import TRANSFORMS_FILE
from nerf_lightning.data.demo_scene import is_demo_scene_complete
from nerf_lightning.data.errors import DatasetError
from nerf_lightning.data.fingerprint import dataset_fingerprint
from nerf_lightning.data.formats.colmap_convert import find_colmap_images, find_colmap_model
from nerf_lightning.data.formats.llff import POSES_FILE
from nerf_lightning.data.loading import LOADERS
from nerf_lightning.files import atomic_write_json as write_json_atomically
from nerf_lightning.files import hash_file
from nerf_lightning.rendering.video import VIDEO_SUFFIXES
from nerf_lightning.runs.record import RUN_RECORD

STAGES = ("convert", "validate", "cache", "fit", "test", "render", "export", "verify")
STATE_FILE = "pipeline.json"
STATE_VERSION = 1
LOCK_FILE = ".pipeline.lock"
EXPORT_FORMATS = ("mesh", "pointcloud", "grid", "pt2", "torchscript")
EXPORT_OUT = {"torchscript": "model.pt", "pt2": "model.pt2", "mesh": "mesh.ply",
              "pointcloud": "pointcloud.ply", "grid": "grid.npz"}
"""Default ``export.out`` per format (relative to the work dir)."""
SPLITS = ("train", "val", "test")
_NO_EXPORT = "no 'nerf-lightning export' command in this installation"


class PipelineError(Exception):
    """The pipeline cannot start; the message is one line."""


class PipelineConfigError(PipelineError, ValueError):
    """``PIPELINE.yaml`` cannot be used; the message names the file and the field."""


class StageError(Exception):
    """A stage failed for good; the message is the one line the chain stops with."""


class _OutputError(Exception):
    """A stage's command succeeded but its outputs are not what the pipeline needs."""


class _Interrupted(BaseException):
    """SIGTERM, raised in the main thread so the running stage is stopped and recorded."""


def export_command_available() -> bool:
    """Whether this installation has ``nerf-lightning export`` (the ``nerf_lightning.export`` module)."""
    return importlib.util.find_spec("nerf_lightning.export") is not None


# ------------------------------------------------------------------------------------------ the file


@dataclass(frozen=True)
class DataConfig:
    root: Path
    format: str | None
    convert_from: Path | None
    images: Path | None
    make_demo: bool


@dataclass(frozen=True)
class PipelineConfig:
    """``PIPELINE.yaml``, checked, with defaults filled in and input paths absolute."""

    path: Path
    work_dir: Path
    data: DataConfig
    fit_config: Path
    fit_args: tuple[str, ...]
    test_args: tuple[str, ...]
    render: dict[str, Any]
    export: dict[str, Any]
    retries: int
    stages: tuple[str, ...]
    not_available: dict[str, str] = field(default_factory=dict)
    """Stages left out of the default selection because this installation lacks them -> why."""


_SECTIONS: dict[str, tuple[str, ...]] = {
    "data": ("root", "format", "convert_from", "images", "make_demo"),
    "fit": ("config", "args"),
    "test": ("args",),
    "render": ("camera_path", "frames", "fps", "depth", "out", "args"),
    "export": ("format", "out", "verify", "args"),
}
_TOP = ("work_dir", "data", "fit", "test", "render", "export", "retries", "stages")
_SET_BY_PIPELINE: dict[str, tuple[str, ...]] = {
    "fit": ("--data.root", "--trainer.default_root_dir", "--ckpt_path"),
    "test": ("--ckpt_path", "--trainer.default_root_dir"),
    "render": ("--ckpt_path", "--ckpt-path", "--out"),
    "export": ("--ckpt_path", "--format", "--out", "--verify", "--force"),
}
_MISSING = object()


class _Reader:
    """Reads one ``PIPELINE.yaml``; every error is one line naming the file and the field."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, name: str, message: str) -> NoReturn:
        raise PipelineConfigError(f"{self.path}: {name}: {message}")

    def section(self, doc: dict[str, Any], name: str) -> dict[str, Any]:
        value = doc.get(name)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(name, f"expected a mapping with {', '.join(_SECTIONS[name])}, got {value!r}")
        for key in value:
            if key not in _SECTIONS[name]:
                self.fail(f"{name}.{key}", f"unknown field; expected one of: {', '.join(_SECTIONS[name])}")
        return value

    def string(self, section: dict[str, Any], name: str, key: str, default: Any = _MISSING) -> Any:
        value = section.get(key)
        if value is None:
            if default is _MISSING:
                self.fail(f"{name}.{key}", "required")
            return default
        if not isinstance(value, str) or not value:
            self.fail(f"{name}.{key}", f"expected a non-empty string, got {value!r}")
        return value

    def boolean(self, section: dict[str, Any], name: str, key: str, default: bool) -> bool:
        value = section.get(key, default)
        if not isinstance(value, bool):
            self.fail(f"{name}.{key}", f"expected true or false, got {value!r}")
        return value

    def args(self, section: dict[str, Any], name: str) -> tuple[str, ...]:
        value = section.get("args") or []
        if not isinstance(value, list):
            self.fail(f"{name}.args", f"expected a list of command-line arguments, got {value!r}")
        args = []
        for item in value:
            if isinstance(item, bool):
                item = str(item).lower()
            elif isinstance(item, (int, float)):
                item = str(item)
            if not isinstance(item, str):
                self.fail(f"{name}.args", f"expected strings or numbers, got {item!r}")
            args.append(item)
        for arg in args:
            for option in _SET_BY_PIPELINE.get(name, ()):
                if arg == option or arg.startswith(option + "="):
                    self.fail(f"{name}.args", f"{option} is set by the pipeline; leave it out")
        return tuple(args)

    def input_path(self, name: str, value: str, *, kind: str | None) -> Path:
        path = Path(os.path.abspath(os.path.expanduser(value)))
        if kind == "file" and not path.is_file():
            self.fail(name, f"{value}: no such file")
        if kind == "folder" and not path.is_dir():
            self.fail(name, f"{value}: no such folder")
        return path

    def output_name(self, name: str, value: str) -> str:
        if Path(value).is_absolute() or ".." in Path(value).parts:
            self.fail(name, f"{value}: expected a path inside work_dir (relative to it)")
        return value


def load_pipeline_config(path: str | Path, *, export_available: bool | None = None) -> PipelineConfig:
    """Read and check ``PIPELINE.yaml`` (see the README); raises :class:`PipelineConfigError`.

    Args:
        export_available: whether ``nerf-lightning export`` exists (default: look for it).
    """
    path = Path(path)
    reader = _Reader(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PipelineConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise PipelineConfigError(f"{path}: cannot be read ({error})") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise PipelineConfigError(f"{path}: not valid YAML{where}: {problem}") from None
    if not isinstance(doc, dict):
        raise PipelineConfigError(f"{path}: expected a mapping of {', '.join(_TOP)}")
    for key in doc:
        if key not in _TOP:
            reader.fail(str(key), f"unknown field; expected one of: {', '.join(_TOP)}")

    work_dir = reader.input_path("work_dir", reader.string(doc, "", "work_dir", f"runs/{path.stem}"),
                                 kind=None)

    data = reader.section(doc, "data")
    convert_from = reader.string(data, "data", "convert_from", None)
    make_demo = reader.boolean(data, "data", "make_demo", False)
    if convert_from is not None and make_demo:
        reader.fail("data.make_demo", "cannot be combined with data.convert_from")
    dataset_format = reader.string(data, "data", "format", None)
    if dataset_format is not None and dataset_format not in ("auto", *LOADERS):
        reader.fail("data.format", f"{dataset_format!r}; expected one of: auto, {', '.join(LOADERS)}")
    images = reader.string(data, "data", "images", None)
    if images is not None and convert_from is None:
        reader.fail("data.images", "only used with data.convert_from")
    root_kind = None if convert_from is not None or make_demo else "folder"
    data_config = DataConfig(
        root=reader.input_path("data.root", reader.string(data, "data", "root"), kind=root_kind),
        format=dataset_format,
        convert_from=None if convert_from is None else reader.input_path(
            "data.convert_from", convert_from, kind="folder"),
        images=None if images is None else reader.input_path("data.images", images, kind="folder"),
        make_demo=make_demo,
    )

    fit = reader.section(doc, "fit")
    if "fit" not in doc:
        reader.fail("fit", "required: the fit config (fit.config) defines the model and the data settings")
    try:  # a bare name (demo) is a shipped config, as on the command line
        fit_config_name = str(resolve_config(reader.string(fit, "fit", "config")))
    except ConfigNotFoundError as error:
        reader.fail("fit.config", str(error))
    fit_config = reader.input_path("fit.config", fit_config_name, kind="file")
    fit_args = reader.args(fit, "fit")
    test_args = reader.args(reader.section(doc, "test"), "test")

    render_doc = reader.section(doc, "render")
    frames = render_doc.get("frames")
    if frames is not None and (isinstance(frames, bool) or not isinstance(frames, int) or frames < 1):
        reader.fail("render.frames", f"expected an integer >= 1, got {frames!r}")
    fps = render_doc.get("fps", 30)
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        reader.fail("render.fps", f"expected a positive number, got {fps!r}")
    render_out = reader.output_name("render.out", reader.string(render_doc, "render", "out", "render.mp4"))
    if Path(render_out).suffix.lower() not in VIDEO_SUFFIXES:
        reader.fail("render.out", f"{render_out}: expected a {' or '.join(VIDEO_SUFFIXES)} file")
    render = {
        "camera_path": reader.string(render_doc, "render", "camera_path", "orbit"),
        "frames": frames,
        "fps": fps,
        "depth": reader.boolean(render_doc, "render", "depth", False),
        "out": render_out,
        "args": list(reader.args(render_doc, "render")),
    }

    export_doc = reader.section(doc, "export")
    export_format = reader.string(export_doc, "export", "format", "torchscript")
    if export_format not in EXPORT_FORMATS:
        reader.fail("export.format", f"{export_format!r}; expected one of: {', '.join(EXPORT_FORMATS)}")
    export = {
        "format": export_format,
        "out": reader.output_name("export.out",
                                  reader.string(export_doc, "export", "out", EXPORT_OUT[export_format])),
        "verify": reader.boolean(export_doc, "export", "verify", True),
        "args": list(reader.args(export_doc, "export")),
    }

    retries = doc.get("retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        reader.fail("retries", f"expected an integer >= 0, got {retries!r}")

    listed = doc.get("stages")
    if listed is None:
        stages = STAGES
    else:
        if not isinstance(listed, list) or not listed:
            reader.fail("stages", f"expected a non-empty list of stages from: {', '.join(STAGES)}")
        for stage in listed:
            if stage not in STAGES:
                reader.fail("stages", f"unknown stage {stage!r}; expected some of: {', '.join(STAGES)}")
        stages = tuple(s for s in STAGES if s in listed)
        if "verify" in stages and not export["verify"]:
            reader.fail("stages", "verify is listed but export.verify is false")
    not_available: dict[str, str] = {}
    if not (export_command_available() if export_available is None else export_available):
        for stage in ("export", "verify"):
            if listed is not None and stage in stages:
                reader.fail("stages", f"{stage}: {_NO_EXPORT}; leave export and verify out of stages")
            not_available[stage] = _NO_EXPORT
        stages = tuple(s for s in stages if s not in not_available)
    return PipelineConfig(path=path, work_dir=work_dir, data=data_config, fit_config=fit_config,
                          fit_args=fit_args, test_args=test_args, render=render, export=export,
                          retries=retries, stages=stages, not_available=not_available)


# -------------------------------------------------------------------------------------- fingerprints


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _sha256(path: Path) -> tuple[str, int]:
    """sha256 and size of a file, or of a folder's files (names and contents, sorted)."""
    digest = hashlib.sha256()
    if path.is_dir():
        total = 0
        for item in sorted(p for p in path.rglob("*") if p.is_file()):
            name = item.relative_to(path).as_posix().encode()
            inner = hashlib.sha256()
            size = hash_file(item, inner)
            digest.update(len(name).to_bytes(8, "little") + name)
            digest.update(size.to_bytes(8, "little") + inner.digest())
            total += size
        return digest.hexdigest(), total
    size = hash_file(path, digest)
    return digest.hexdigest(), size


def source_fingerprint(source: Path, images: Path | None = None) -> str:
    """Content hash of what ``data convert SOURCE`` reads: an LLFF capture's poses and images, or a
    COLMAP model folder's files and its image folder. Problems give an ``unreadable: ...`` string
    (``data convert`` reports them)."""
    try:
        if (source / POSES_FILE).is_file():
            return _hash(["llff", dataset_fingerprint(source, dataset_format="llff"), str(images)])
        found = find_colmap_model(source)
        if found is None:
            return f"unreadable: no LLFF poses or COLMAP model in {source}"
        model = found[0]
        image_folder = images or find_colmap_images(model)
        files = {f"model/{p.name}": _sha256(p)[0] for p in sorted(model.iterdir())
                 if p.is_file() and p.name != TRANSFORMS_FILE}
        if image_folder is not None and image_folder.is_dir():
            files["images"] = _sha256(image_folder)[0]
        return _hash(["colmap", files, str(image_folder)])
    except OSError as error:
        return f"unreadable: {error}"


def _size(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count:.1f} GB"


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _versions(logs: Path) -> dict[str, Path]:
    """``version_N`` run directories under a ``lightning_logs`` folder."""
    if not logs.is_dir():
        return {}
    return {p.name: p for p in logs.iterdir() if p.is_dir() and re.fullmatch(r"version_\d+", p.name)}


def _version_number(path: Path) -> int:
    return int(path.name.split("_")[1])


def _new_versions(logs: Path, before: set[str]) -> list[Path]:
    """The run directories under ``logs`` that are not in ``before``, oldest first."""
    return sorted((p for name, p in _versions(logs).items() if name not in before), key=_version_number)


def _last_line(text: str) -> str:
    """The line of a stage's output that best says why it failed (one line, at most 300 characters)."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", text)]
    lines = [line for line in lines if line and not line.startswith("=====")]
    preferred = [line for line in lines if line.startswith(("nerf-lightning", "error:"))
                 or re.match(r"^\w*(Error|Exception)\b", line)]
    line = (preferred or lines or [""])[-1]
    return line if len(line) <= 300 else line[:297] + "..."


def _shown(path: Path) -> str:
    """``path`` for messages: relative to the current directory when inside it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def _exit_reason(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"


# ------------------------------------------------------------------------------------------ running


@dataclass
class Plan:
    """How to run a stage: its inputs, the command of the next attempt and what to record afterwards.

    ``command()`` is called right before each attempt and returns the arguments after
    ``nerf-lightning`` and extra fields for the stage's record; ``collect(output)`` is called after
    an attempt that exited 0 with that attempt's output and returns ``(outputs, numbers, summary)``,
    or raises :class:`_OutputError`. ``always`` runs the stage even when its record is up to date.
    """

    inputs: dict[str, Any]
    command: Callable[[], tuple[list[str], dict[str, Any]]]
    collect: Callable[[str], tuple[dict[str, Any], dict[str, Any], str]]
    always: bool = False


@dataclass
class Outcome:
    """What this invocation did with a stage, for the table."""

    status: str  # done, skipped, failed, not run
    duration: float | None = None
    note: str = ""


class Pipeline:
    """Runs the stages of a :class:`PipelineConfig` in its work dir (see the module docstring)."""

    def __init__(self, config: PipelineConfig, *, out: Any = None) -> None:
        self.config = config
        self.work = config.work_dir
        self.state_path = self.work / STATE_FILE
        self.logs = self.work / "logs"
        self.out = out if out is not None else sys.stdout
        self.outcomes: dict[str, Outcome] = {}
        self.resolved: dict[str, Any] = {}
        self._dataset_fp: str | None = None
        self._digests: dict[tuple[str, int, int], str] = {}
        self.state: dict[str, Any] = {"version": STATE_VERSION, "stages": {}}

    # ------------------------------------------------------------------ set-up

    def _fit_base(self) -> list[str]:
        data = self.config.data
        args = ["fit", "--config", str(self.config.fit_config), *self.config.fit_args,
                "--data.root", str(data.root)]
        if data.format is not None:
            args += ["--data.dataset_format", data.format]
        return args

    def resolve(self) -> None:
        """The fit config as LightningCLI resolves it (``fit --print_config``), in this process."""
        from nerf_lightning.cli import run_lightning_cli

        printed, errors = io.StringIO(), io.StringIO()
        code: Any = 0
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
            try:
                run_lightning_cli([*self._fit_base(), "--trainer.default_root_dir", str(self.work / "fit"),
                                   "--print_config"])
            except SystemExit as exit_:
                code = exit_.code
            except Exception as error:  # a config that parses but cannot be dumped
                code, errors = 1, io.StringIO(f"{type(error).__name__}: {error}")
        resolved = None
        with contextlib.suppress(yaml.YAMLError):
            resolved = yaml.safe_load(printed.getvalue())
        if code not in (0, None) or not isinstance(resolved, dict) or "data" not in resolved:
            why = _last_line(errors.getvalue()) or f"exit code {code}"
            raise PipelineConfigError(
                f"{self.config.path}: fit: {self.config.fit_config} with fit.args does not resolve: {why}"
            )
        self.resolved = resolved

    def _fit_inputs_config(self) -> dict[str, Any]:
        """The resolved fit config without what only says where outputs go or where to resume from."""
        config = json.loads(json.dumps(self.resolved, default=str))
        config.pop("ckpt_path", None)
        config.pop("config", None)
        config.get("trainer", {}).pop("default_root_dir", None)
        return config

    def _load_state(self) -> list[str]:
        if not self.state_path.exists():
            return []
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            return [f"note: {self.state_path} is unreadable ({error}); every stage runs"]
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION or not isinstance(
                state.get("stages"), dict):
            return [f"note: {self.state_path} has another layout; every stage runs"]
        self.state = state
        return []

    def _save(self) -> None:
        self.state["config"] = str(self.config.path)
        self.state["updated"] = _now()
        write_json_atomically(self.state, self.state_path)

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
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

    # ------------------------------------------------------------------ paths and records

    def _store(self, path: Path) -> str:
        """``path`` as recorded: relative to the work dir when inside it, else absolute."""
        path = Path(os.path.abspath(path))
        try:
            return path.relative_to(os.path.abspath(self.work)).as_posix()
        except ValueError:
            return str(path)

    def _path(self, stored: str) -> Path:
        return Path(stored) if Path(stored).is_absolute() else self.work / stored

    def _digest(self, path: Path) -> str:
        """sha256 of a file or folder (:func:`_sha256`), computed once per file version in this run."""
        status = path.stat()
        key = (str(path), status.st_size, status.st_mtime_ns)
        if path.is_dir() or key not in self._digests:
            self._digests[key] = _sha256(path)[0]
        return self._digests[key]

    def _file(self, path: Path) -> dict[str, Any]:
        sha, size = _sha256(path)
        return {"path": self._store(path), "sha256": sha, "bytes": size}

    def _intact(self, record: dict[str, Any]) -> bool:
        for entry in (record.get("outputs") or {}).get("files", {}).values():
            try:
                if self._digest(self._path(entry["path"])) != entry["sha256"]:
                    return False
            except OSError:  # gone or unreadable
                return False
        return True

    def _upstream(self, stage: str, needed_by: str) -> dict[str, Any]:
        """The record of ``stage``'s last successful run, whose outputs ``needed_by`` reads."""
        record = self.state["stages"].get(stage)
        if not record or record.get("status") != "done":
            raise StageError(f"stage {needed_by} needs the outputs of {stage}, which has not completed in "
                              f"{self.work}; add {stage} to stages")
        if not self._intact(record):
            raise StageError(f"stage {needed_by} needs the outputs of {stage}, which changed or are gone; "
                              f"add {stage} to stages")
        return record

    def _dataset(self) -> str:
        """The dataset fingerprint (after ``convert``), or ``unreadable: ...``."""
        if self._dataset_fp is None:
            try:
                self._dataset_fp = dataset_fingerprint(self.config.data.root,
                                                       dataset_format=self.resolved["data"]["dataset_format"])
            except (DatasetError, OSError, ValueError) as error:
                self._dataset_fp = f"unreadable: {error}"
        return self._dataset_fp

    # ------------------------------------------------------------------ the stages

    def _plan_convert(self) -> Plan | str:
        data = self.config.data
        root = str(data.root)
        if data.make_demo:
            if is_demo_scene_complete(data.root):
                return "demo scene present"
            return Plan({"make_demo": root}, lambda: (["data", "make-demo", root], {}),
                        lambda output: ({"files": {}}, {}, f"demo scene written to {root}"), always=True)
        if data.convert_from is None:
            return "nothing to convert"
        target = data.root / TRANSFORMS_FILE
        inputs = {"source": str(data.convert_from),
                  "images": None if data.images is None else str(data.images),
                  "source_fingerprint": source_fingerprint(data.convert_from, data.images), "root": root}

        previous = ((self.state["stages"].get("convert") or {}).get("outputs") or {}).get("files", {})
        ours = previous.get("transforms")
        replace = target.is_file()
        if replace and (ours is None or self._digest(target) != ours["sha256"]):
            raise StageError(f"stage convert would replace {target}, which this pipeline did not write "
                             "(or which changed since); move it away or leave out data.convert_from")

        def command() -> tuple[list[str], dict[str, Any]]:
            argv = ["data", "convert", str(data.convert_from), root]
            if data.images is not None:
                argv += ["--images", str(data.images)]
            return argv + (["--force"] if replace else []), {}

        def collect(output: str) -> tuple[dict[str, Any], dict[str, Any], str]:
            try:
                frames = len(json.loads(target.read_text(encoding="utf-8")).get("frames", []))
            except (OSError, ValueError, AttributeError) as error:
                raise _OutputError(f"{target}: unreadable after conversion ({error})") from None
            summary = f"{frames} frames -> {target}"
            return {"files": {"transforms": self._file(target)}}, {"frames": frames}, summary

        return Plan(inputs, command, collect)

    def _data_options(self) -> tuple[str, int, list[float]]:
        data = self.resolved["data"]
        return str(data.get("dataset_format") or "auto"), int(data.get("downscale") or 1), [
            float(c) for c in data.get("background") or (1.0, 1.0, 1.0)]

    def _plan_validate(self) -> Plan | str:
        dataset_format, downscale, _ = self._data_options()
        root = str(self.config.data.root)
        inputs = {"dataset": self._dataset(), "format": dataset_format, "downscale": downscale}

        def collect(output: str) -> tuple[dict[str, Any], dict[str, Any], str]:
            summary = next((line for line in reversed(output.splitlines()) if line.startswith(root)), "")
            summary = summary[len(root):].lstrip(": ") or "OK"
            warnings = sum(line.startswith("warning:") for line in output.splitlines())
            if warnings:
                summary += f" ({warnings} warning{'s' if warnings != 1 else ''}, see the log)"
            return {"files": {}}, {"warnings": warnings}, summary

        return Plan(inputs, lambda: (["data", "validate", root, "--format", dataset_format,
                                      "--downscale", str(downscale)], {}), collect)

    def _plan_cache(self) -> Plan | str:
        data = self.resolved["data"]
        if not data.get("cache", True):
            return "data.cache is false"
        dataset_format, downscale, background = self._data_options()
        cache_dir = Path(os.path.abspath(data["cache_dir"])) if data.get("cache_dir") else default_cache_dir()
        root = self.config.data.root
        inputs = {"dataset": self._dataset(), "format": dataset_format, "downscale": downscale,
                  "background": background, "cache_dir": str(cache_dir)}
        argv = ["data", "cache", str(root), "--format", dataset_format, "--downscale", str(downscale),
                "--background", *(str(c) for c in background), "--cache-dir", str(cache_dir)]

        def collect(output: str) -> tuple[dict[str, Any], dict[str, Any], str]:
            files, pixels = {}, 0
            for split in SPLITS:
                try:
                    entry = cache_entry_path(root, split, dataset_format=dataset_format,
                                             background=tuple(background), downscale=downscale,
                                             cache_dir=cache_dir)
                except (DatasetError, OSError, ValueError) as error:
                    raise _OutputError(f"cache entry of {split}: {error}") from None
                if not (entry / MANIFEST_FILE).is_file():
                    raise _OutputError(f"{entry}: no cache entry after 'data cache'")
                files[split] = self._file(entry / MANIFEST_FILE)
                pixels += (entry / PIXELS_FILE).stat().st_size
            summary = f"{len(files)} splits, {_size(pixels)} in {cache_dir}"
            return {"files": files}, {"splits": len(files), "bytes": pixels}, summary

        return Plan(inputs, lambda: (argv, {}), collect)

    def _plan_fit(self) -> Plan | str:
        inputs = {"dataset": self._dataset(), "config": self._fit_inputs_config()}
        root = self.work / "fit" / _hash(inputs)[:12]
        logs = root / "lightning_logs"
        before: set[str] = set()

        def command() -> tuple[list[str], dict[str, Any]]:
            before.clear()
            before.update(_versions(logs))
            unfinished = sorted(_versions(logs).values(), key=_version_number, reverse=True)
            resume = next((run / "checkpoints" / "last.ckpt" for run in unfinished
                           if (run / "checkpoints" / "last.ckpt").is_file()), None)
            argv = [*self._fit_base(), "--trainer.default_root_dir", str(root)]
            if resume is not None:
                argv += ["--ckpt_path", str(resume)]
            return argv, {"root_dir": self._store(root),
                          "resumed_from": None if resume is None else self._store(resume)}

        def collect(output: str) -> tuple[dict[str, Any], dict[str, Any], str]:
            new = _new_versions(logs, before)
            if not new:
                raise _OutputError(f"fit made no run directory in {logs} (the pipeline reads runs from the "
                                   "default logger's lightning_logs/version_N folders)")
            run = new[-1]
            try:
                record = json.loads((run / RUN_RECORD).read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                raise _OutputError(f"{run / RUN_RECORD}: unreadable ({error})") from None
            if record.get("status") != "completed":
                raise _OutputError(f"{run / RUN_RECORD}: the run's status is {record.get('status')!r}")
            checkpoint = run / "checkpoints" / "last.ckpt"
            if not checkpoint.is_file():
                raise _OutputError(f"{checkpoint}: missing; the pipeline needs last.ckpt "
                                   "(keep checkpoint.save_last true)")
            metrics = (record.get("metrics") or {}).get("fit") or {}
            numbers = {"val_psnr": metrics.get("val/psnr"), "train_psnr": metrics.get("train/psnr"),
                       "global_step": record.get("global_step")}
            resumed = self.state["stages"]["fit"].get("resumed_from")
            summary = (f"val PSNR {numbers['val_psnr']:.2f} dB, " if numbers["val_psnr"] is not None else "")
            summary += f"step {numbers['global_step']}" + (f", resumed from {resumed}" if resumed else "")
            files = {"ckpt": self._file(checkpoint), "run_config": self._file(run / "config.yaml")}
            return {"run_dir": self._store(run), "files": files}, numbers, summary

        return Plan(inputs, command, collect)

    def _checkpoint(self, needed_by: str) -> tuple[Path, Path, dict[str, str]]:
        files = self._upstream("fit", needed_by)["outputs"]["files"]
        digests = {"ckpt": files["ckpt"]["sha256"], "run_config": files["run_config"]["sha256"]}
        return self._path(files["ckpt"]["path"]), self._path(files["run_config"]["path"]), digests

    def _plan_test(self) -> Plan | str:
        checkpoint, run_config, digests = self._checkpoint("test")
        root = self.work / "test"
        logs = root / "lightning_logs"
        before: set[str] = set()
        inputs = {**digests, "args": list(self.config.test_args)}

        def command() -> tuple[list[str], dict[str, Any]]:
            before.clear()
            before.update(_versions(logs))
            return ["test", "--config", str(run_config), "--ckpt_path", str(checkpoint),
                    "--trainer.default_root_dir", str(root), *self.config.test_args], {}

        def collect(output: str) -> tuple[dict[str, Any], dict[str, Any], str]:
            new = _new_versions(logs, before)
            if not new:
                raise _OutputError(f"test made no run directory in {logs}")
            run = new[-1]
            report = run / "eval.json"
            if report.is_file():
                record = json.loads(report.read_text(encoding="utf-8"))
                psnr, views = (record.get("mean") or {}).get("psnr"), record.get("num_views")
            else:  # --eval_report.enabled false
                report = run / RUN_RECORD
                record = json.loads(report.read_text(encoding="utf-8"))
                psnr, views = ((record.get("metrics") or {}).get("test") or {}).get("test/psnr"), None
            summary = f"test PSNR {psnr:.2f} dB" if psnr is not None else "no test PSNR"
            summary += f" over {views} views" if views is not None else ""
            return ({"run_dir": self._store(run), "files": {"report": self._file(report)}},
                    {"test_psnr": psnr, "views": views}, summary)

        return Plan(inputs, command, collect)

    def _plan_render(self) -> Plan | str:
        checkpoint, _, digests = self._checkpoint("render")
        render = self.config.render
        out = self.work / render["out"]
        inputs = {**digests, **render}

        def command() -> tuple[list[str], dict[str, Any]]:
            out.parent.mkdir(parents=True, exist_ok=True)
            argv = ["render", "--ckpt_path", str(checkpoint), "--camera-path", render["camera_path"]]
            if render["frames"] is not None:
                argv += ["--frames", str(render["frames"])]
            argv += ["--fps", f"{render['fps']:g}", *(["--depth"] if render["depth"] else []),
                     "--out", str(out), *render["args"]]
            return argv, {}

        def collect(output: str) -> tuple[dict[str, Any], dict[str, Any], str]:
            if not out.is_file():
                raise _OutputError(f"{out}: not written")
            found = re.findall(r"wrote .* \((\d+) frames", output)
            frames = int(found[-1]) if found else None
            record = self._file(out)
            summary = f"{frames} frames, " if frames is not None else ""
            summary += f"{_size(record['bytes'])} -> {record['path']}"
            return {"files": {"video": record}}, {"frames": frames, "bytes": record["bytes"]}, summary

        return Plan(inputs, command, collect)

    def _plan_export(self) -> Plan | str:
        checkpoint, _, digests = self._checkpoint("export")
        export = self.config.export
        out = self.work / export["out"]
        inputs = {**digests, "format": export["format"], "out": export["out"], "args": export["args"]}

        def command() -> tuple[list[str], dict[str, Any]]:
            out.parent.mkdir(parents=True, exist_ok=True)
            return ["export", "--ckpt_path", str(checkpoint), "--format", export["format"], "--out", str(out),
                    "--force", *export["args"]], {}

        def collect(output: str) -> tuple[dict[str, Any], dict[str, Any], str]:
            if not out.exists():
                raise _OutputError(f"{out}: not written")
            record = self._file(out)
            return ({"files": {"export": record}}, {"bytes": record["bytes"]},
                    f"{export['format']}, {_size(record['bytes'])} -> {record['path']}")

        return Plan(inputs, command, collect)

    def _plan_verify(self) -> Plan | str:
        export = self.config.export
        if not export["verify"]:
            return "export.verify is false"
        exported = self._upstream("export", "verify")["outputs"]["files"]["export"]
        checkpoint, _, digests = self._checkpoint("verify")
        out = self.work / "verify" / Path(export["out"]).name
        inputs = {**digests, "export": exported["sha256"], "format": export["format"], "args": export["args"]}

        def command() -> tuple[list[str], dict[str, Any]]:
            out.parent.mkdir(parents=True, exist_ok=True)
            return ["export", "--ckpt_path", str(checkpoint), "--format", export["format"], "--out", str(out),
                    "--verify", "--force", *export["args"]], {}

        def collect(output: str) -> tuple[dict[str, Any], dict[str, Any], str]:
            message = _last_line(output)
            found = re.findall(r"(?:differ\w*|diff|Δ|delta)\D{0,24}?([-+]?\d+(?:\.\d+)?)\s*dB", output, re.I)
            difference = float(found[-1]) if found else None
            record = self._file(out) if out.exists() else None
            same = record is not None and record["sha256"] == exported["sha256"]
            summary = f"PSNR difference {difference:.3f} dB" if difference is not None else message
            summary += ", same bytes as the export" if same else ""
            numbers = {"psnr_difference_db": difference, "same_as_export": same, "message": message}
            return {"files": {"verified": record} if record else {}}, numbers, summary

        return Plan(inputs, command, collect)

    # ------------------------------------------------------------------ the chain

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def _outcome(self, stage: str, outcome: Outcome) -> None:
        self.outcomes[stage] = outcome
        self.state.setdefault("last_run", {}).setdefault("stages", {})[stage] = {
            "status": outcome.status, "duration_s": outcome.duration, "note": outcome.note}

    def run(self) -> int:
        """Run the chain; prints progress, the table and, on failure, one line on stderr. Returns the
        exit code: 0, 1 (a stage failed) or 130 (interrupted)."""
        self.work.mkdir(parents=True, exist_ok=True)
        with self._lock():
            for note in self._load_state():
                self._print(note)
            self.logs.mkdir(exist_ok=True)
            self.state["last_run"] = {"started": _now(), "ended": None, "status": "running", "stages": {}}
            self._save()
            failure: str | None = None
            failed_stage = ""
            code = 0
            for stage in STAGES:
                if failure is not None:
                    self._outcome(stage, Outcome("not run", note=f"{failed_stage} failed"))
                elif stage not in self.config.stages:
                    self._outcome(stage, Outcome("not run", note=self.config.not_available.get(
                        stage, "not in stages")))
                else:
                    try:
                        self._stage(stage)
                    except StageError as error:
                        failure, failed_stage, code = str(error), stage, 1
                    except OSError as error:  # the work dir or a recorded file cannot be read or written
                        failure, failed_stage, code = f"stage {stage}: {error}", stage, 1
                        self._outcome(stage, Outcome("failed", note=str(error)))
                    except (KeyboardInterrupt, _Interrupted):
                        failure, failed_stage, code = f"stage {stage} interrupted", stage, 130
                        record = self.state["stages"].get(stage)
                        if record is not None and record.get("status") == "running":
                            record.update(status="failed", error="interrupted", ended=_now())
                        self._outcome(stage, Outcome("failed", note="interrupted"))
            self.state["last_run"].update(ended=_now(), status="failed" if failure else "completed")
            self._save()
            self._print("")
            self._print(self.table())
            self._print(f"state: {_shown(self.state_path)}")
            if failure is not None:
                print(f"nerf-lightning pipeline: {failure}", file=sys.stderr, flush=True)
            return code

    def _stage(self, stage: str) -> None:
        started = time.monotonic()
        try:
            plan = getattr(self, f"_plan_{stage}")()
        except StageError as error:
            self._outcome(stage, Outcome("failed", time.monotonic() - started, str(error)))
            raise
        if isinstance(plan, str):
            self._print(f"[{stage}] skipped: {plan}")
            self._outcome(stage, Outcome("skipped", note=plan))
            return
        key = _hash(plan.inputs)
        record = self.state["stages"].get(stage)
        if (not plan.always and record and record.get("status") == "done" and record.get("inputs_key") == key
                and self._intact(record)):
            self._print(f"[{stage}] skipped: up to date ({record.get('summary', '')})")
            self._outcome(stage, Outcome("skipped", note=record.get("summary", "")))
            return
        self._execute(stage, plan, key, started)

    def _execute(self, stage: str, plan: Plan, key: str, started: float) -> None:
        log = self.logs / f"{stage}.log"
        attempts = self.config.retries + 1
        record: dict[str, Any] = {"status": "running", "inputs": plan.inputs, "inputs_key": key,
                                  "log": self._store(log), "attempts": 0, "started": _now()}
        self.state["stages"][stage] = record
        why = ""
        for attempt in range(1, attempts + 1):
            argv, extra = plan.command()
            shown = shlex.join(["nerf-lightning", *argv])
            for name in ("error", "outputs", "numbers", "summary", "ended", "duration_s"):
                record.pop(name, None)
            record.update(status="running", attempts=attempt, command=shown, **extra)
            self._save()
            suffix = f" (attempt {attempt} of {attempts})" if attempt > 1 else ""
            self._print(f"[{stage}] {shown}{suffix}  log: {_shown(log)}")
            code, output = self._call(argv, log, f"{stage} attempt {attempt} of {attempts}: {shown}")
            if code == 0:
                try:
                    outputs, numbers, summary = plan.collect(output)
                except _OutputError as error:
                    why = str(error)
                else:
                    duration = time.monotonic() - started
                    record.update(status="done", outputs=outputs, numbers=numbers, summary=summary,
                                  ended=_now(), duration_s=round(duration, 3))
                    self._save()
                    self._print(f"[{stage}] done in {duration:.1f} s: {summary}")
                    self._outcome(stage, Outcome("done", duration, summary))
                    return
            else:
                last = _last_line(output)
                why = _exit_reason(code) + (f": {last}" if last else "")
            record.update(status="failed", error=why, ended=_now(),
                          duration_s=round(time.monotonic() - started, 3))
            self._save()
            if attempt < attempts:
                self._print(f"[{stage}] attempt {attempt} failed ({why}); retrying")
        self._outcome(stage, Outcome("failed", time.monotonic() - started, why))
        tries = f"{attempts} attempts" if attempts > 1 else "1 attempt"
        raise StageError(f"stage {stage} failed after {tries} ({why}); log: {_shown(log)}")

    def _call(self, argv: list[str], log: Path, title: str) -> tuple[int, str]:
        """Run ``nerf-lightning ARGV`` with its output appended to ``log``; (exit code, its output)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(log, "ab") as handle:
            handle.write(f"\n===== {_now()} {title}\n".encode())
            handle.flush()
            start = handle.tell()
            process = subprocess.Popen([sys.executable, "-m", "nerf_lightning", *argv], stdout=handle,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
            try:
                code = process.wait()
            except BaseException:
                _stop(process)
                raise
            end = handle.tell()
            handle.write(f"===== {_exit_reason(code)}\n".encode())
        with open(log, "rb") as handle:
            handle.seek(max(start, end - (1 << 16)))
            output = handle.read(end - max(start, end - (1 << 16))).decode("utf-8", errors="replace")
        return code, output

    # ------------------------------------------------------------------ the table

    def table(self) -> str:
        """One row per stage: status (done, skipped, failed, not run), duration and key numbers."""
        rows = [("stage", "status", "time", "details")]
        for stage in STAGES:
            outcome = self.outcomes.get(stage, Outcome("not run"))
            duration = "-" if outcome.duration is None else f"{outcome.duration:.1f}s"
            rows.append((stage, outcome.status, duration, outcome.note))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        return "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)) + "  " + row[3]
            for row in rows
        ).rstrip()


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a stage's process: SIGTERM, then SIGKILL after 10 seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise _Interrupted()


def run_pipeline_cli(args: list[str]) -> int:
    """``nerf-lightning pipeline --config PIPELINE.yaml``: 0 when every stage is done or skipped, 1 when
    a stage failed, 2 when the file cannot be used, 130 when interrupted."""
    parser = argparse.ArgumentParser(
        prog="nerf-lightning pipeline",
        description="Run convert -> validate -> cache -> fit -> test -> render -> export -> verify as "
        "'nerf-lightning' subprocesses, skipping the stages whose inputs did not change since their "
        "last successful run (state in WORK_DIR/pipeline.json, logs in WORK_DIR/logs/).",
    )
    parser.add_argument("--config", type=Path, required=True, metavar="PIPELINE.yaml",
                        help="the pipeline file (see configs/pipeline-demo.yaml)")
    options = parser.parse_args(args)
    try:
        pipeline = Pipeline(load_pipeline_config(options.config))
        pipeline.resolve()
    except PipelineError as error:
        print(f"nerf-lightning pipeline: {error}", file=sys.stderr)
        return 2
    previous = None
    with contextlib.suppress(ValueError):  # not the main thread
        previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        return pipeline.run()
    except PipelineError as error:
        print(f"nerf-lightning pipeline: {error}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
