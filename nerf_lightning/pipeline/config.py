"""The pipeline file: typed dataclasses parsed by jsonargparse, then checked into a :class:`PipelineConfig`.

``PIPELINE.yaml`` is the ``--config`` of ``nerf-lightning pipeline``: its fields are the command's
options (``--fit.args``, ``--render.frames``, ``--retries`` ... override them, ``--print_config``
prints them). jsonargparse checks the types; :func:`check` then checks what types cannot say (files
that must exist, formats, stage names) with one line naming the file and the field, and resolves
input paths (relative to the current directory) and defaults.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml
from jsonargparse import ActionConfigFile, ArgumentParser

from nerf_lightning.config.lookup import ConfigNotFoundError, resolve_config
from nerf_lightning.config.slips import yaml_error_line
from nerf_lightning.datasets.process.video import VIDEO_SUFFIXES as CAPTURE_SUFFIXES
from nerf_lightning.rendering.video import VIDEO_SUFFIXES
from nerf_lightning.scenes.loading import LOADERS

STAGES = ("process", "convert", "validate", "cache", "fit", "test", "render", "export", "verify")
EXPORT_FORMATS = ("mesh", "pointcloud", "grid", "pt2", "torchscript")
EXPORT_OUT = {"torchscript": "model.pt", "pt2": "model.pt2", "mesh": "mesh.ply",
              "pointcloud": "pointcloud.ply", "grid": "grid.npz"}
"""Default ``export.out`` per format (relative to the work dir)."""
NO_EXPORT = "no 'nerf-lightning export' command in this installation"

Arg = str | int | float | bool
"""An item of a stage's ``args``: YAML numbers and booleans are passed as their text."""


class PipelineError(Exception):
    """The pipeline cannot start; the message is one line."""


class PipelineConfigError(PipelineError, ValueError):
    """``PIPELINE.yaml`` cannot be used; the message names the file and the field."""


# ---------------------------------------------------------------------------------------- the file


@dataclass
class DataSpec:
    """The dataset.

    Args:
        root: the dataset fit reads (--data.root); required. Photos or a video: the process stage.
        format: --data.dataset_format (default: the fit config's).
        convert_from: an LLFF or COLMAP capture that 'convert' converts into root.
        images: the capture's image folder to reference (with convert_from).
        make_demo: generate the demo scene into root when it is not complete.
        process_args: more 'data process' arguments (process stage), e.g. [--num_frames, 50].
    """

    root: str | None = None
    format: str | None = None
    convert_from: str | None = None
    images: str | None = None
    make_demo: bool = False
    process_args: list[Arg] = field(default_factory=list)


@dataclass
class FitSpec:
    """Training.

    Args:
        config: the fit config (model, data settings, trainer); required. A bare name such as demo
            is a shipped config when no such file is here.
        args: more 'fit' arguments, e.g. [--trainer.max_time, "00:00:01:00"].
    """

    config: str | None = None
    args: list[Arg] = field(default_factory=list)


@dataclass
class TestSpec:
    """Testing.

    Args:
        args: more 'test' arguments.
    """

    args: list[Arg] = field(default_factory=list)


@dataclass
class RenderSpec:
    """The video.

    Args:
        camera_path: auto (spiral for a forward-facing capture, orbit otherwise), orbit, spiral,
            interpolate (a smooth path through the training cameras) or test (the test views), as
            'render --camera_path' takes them.
        frames: frames of the video (default: render's).
        fps: frames per second.
        depth: colourised depth beside the RGB.
        out: the video, .mp4 or .gif, relative to work_dir.
        args: more 'render' arguments.
    """

    camera_path: str = "auto"
    frames: int | None = None
    fps: float = 30.0
    depth: bool = False
    out: str = "render.mp4"
    args: list[Arg] = field(default_factory=list)


@dataclass
class ExportSpec:
    """The export and its check.

    Args:
        format: pt2 (a torch.export renderer), mesh, pointcloud, grid or torchscript (deprecated by
            torch).
        out: the exported file, relative to work_dir (default: model.pt, model.pt2, mesh.ply,
            pointcloud.ply, grid.npz).
        verify: run the verify stage (pt2, torchscript: PSNR within 0.1 dB of the checkpoint's).
        args: more 'export' arguments.
    """

    format: str = "pt2"
    out: str | None = None
    verify: bool = True
    args: list[Arg] = field(default_factory=list)


def pipeline_options(
    data: DataSpec,
    fit: FitSpec,
    test: TestSpec,
    render: RenderSpec,
    export: ExportSpec,
    work_dir: str | None = None,
    retries: int = 0,
    stages: list[str] | None = None,
) -> None:
    """The fields of a pipeline file (the signature jsonargparse reads; never called).

    Args:
        data: the dataset.
        fit: training.
        test: testing.
        render: the video.
        export: the export and its check.
        work_dir: state, logs and outputs (default: runs/<name of the pipeline file>).
        retries: how many more times a failing stage runs before the chain stops.
        stages: the stages to run, a subset of process, convert, validate, cache, fit, test, render, export,
            verify (default: all).
    """


def declare_pipeline_arguments(parser: ArgumentParser) -> None:
    """The options of ``nerf-lightning pipeline``: the fields of the pipeline file."""
    parser.add_function_arguments(pipeline_options, as_group=False)


SECTIONS = {"data": DataSpec, "fit": FitSpec, "test": TestSpec, "render": RenderSpec, "export": ExportSpec}
TOP = ("work_dir", "data", "fit", "test", "render", "export", "retries", "stages")


def check_fields(doc: Any, path: Path) -> dict[str, Any]:
    """``doc`` (a pipeline file's YAML) with its empty sections left out; an unknown field is a
    :class:`PipelineConfigError` naming it (clearer than the parser's message)."""
    if not isinstance(doc, dict):
        raise PipelineConfigError(f"{path}: expected a mapping of {', '.join(TOP)}")
    checked = {}
    for key, value in doc.items():
        if key not in TOP:
            raise PipelineConfigError(f"{path}: {key}: unknown field; expected one of: {', '.join(TOP)}")
        if key in SECTIONS and value is None:
            continue
        if key in SECTIONS:
            names = [f.name for f in dataclasses.fields(SECTIONS[key])]
            if not isinstance(value, dict):
                raise PipelineConfigError(
                    f"{path}: {key}: expected a mapping with {', '.join(names)}, got {value!r}")
            for name in value:
                if name not in names:
                    raise PipelineConfigError(
                        f"{path}: {key}.{name}: unknown field; expected one of: {', '.join(names)}")
        checked[key] = value
    return checked


def read_file(path: Path) -> dict[str, Any]:
    """A pipeline file's YAML, its fields checked by :func:`check_fields`."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PipelineConfigError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise PipelineConfigError(f"{path}: cannot be read ({error})") from None
    except yaml.YAMLError as error:
        raise PipelineConfigError(yaml_error_line(path, error)) from None
    return check_fields(doc, path)


@dataclass(frozen=True)
class DataConfig:
    root: Path
    format: str | None
    convert_from: Path | None
    images: Path | None
    make_demo: bool
    process_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class PipelineConfig:
    """The pipeline's options, checked, with defaults filled in and input paths absolute."""

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


SET_BY_PIPELINE: dict[str, tuple[str, ...]] = {
    "data.process": ("--result_file",),
    "fit": ("--data.root", "--trainer.default_root_dir", "--ckpt_path", "--run_name"),
    "test": ("--ckpt_path", "--trainer.default_root_dir"),
    "render": ("--ckpt_path", "--out", "--result_file"),
    "export": ("--ckpt_path", "--format", "--out", "--verify", "--force", "--result_file"),
}


def export_command_available() -> bool:
    """Whether this installation has ``nerf-lightning export`` (the ``nerf_lightning.export`` package)."""
    return importlib.util.find_spec("nerf_lightning.export") is not None


class _Checker:
    """One line per error, naming the file (or the command line) and the field."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, name: str, message: str) -> NoReturn:
        raise PipelineConfigError(f"{self.path}: {name}: {message}")

    def required(self, name: str, value: str | None) -> str:
        if value is None or value == "":
            self.fail(name, "required")
        return value

    def args(self, name: str, values: list[Any] | None, field: str | None = None) -> tuple[str, ...]:
        args = tuple(str(v).lower() if isinstance(v, bool) else str(v) for v in values or [])
        for arg in args:
            for option in SET_BY_PIPELINE.get(name, ()):
                if arg == option or arg.startswith(option + "="):
                    self.fail(field or f"{name}.args", f"{option} is set by the pipeline; leave it out")
        return args

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


def check(options: dict[str, Any], path: Path, *, export_available: bool | None = None) -> PipelineConfig:
    """The parsed options as a :class:`PipelineConfig`; raises :class:`PipelineConfigError`.

    Args:
        options: the parsed fields (:func:`pipeline_options`'s parameters; sections as dicts).
        path: the pipeline file, for messages and the default ``work_dir``.
        export_available: whether ``nerf-lightning export`` exists (default: look for it).
    """
    c = _Checker(path)
    sections = {name: options.get(name) or {} for name in SECTIONS}
    work_dir = c.input_path("work_dir", options.get("work_dir") or f"runs/{path.stem}", kind=None)

    data = sections["data"]
    convert_from, images = data.get("convert_from"), data.get("images")
    make_demo = bool(data.get("make_demo"))
    if convert_from is not None and make_demo:
        c.fail("data.make_demo", "cannot be combined with data.convert_from")
    dataset_format = data.get("format")
    if dataset_format is not None and dataset_format not in ("auto", *LOADERS):
        c.fail("data.format", f"{dataset_format!r}; expected one of: auto, {', '.join(LOADERS)}")
    if images is not None and convert_from is None:
        c.fail("data.images", "only used with data.convert_from")
    root_value = c.required("data.root", data.get("root"))
    is_video = Path(root_value).suffix.lower() in CAPTURE_SUFFIXES  # the process stage makes a dataset
    root_kind = None if convert_from is not None or make_demo else "file" if is_video else "folder"
    data_config = DataConfig(
        root=c.input_path("data.root", root_value, kind=root_kind),
        format=dataset_format,
        convert_from=None if convert_from is None else c.input_path("data.convert_from", convert_from,
                                                                    kind="folder"),
        images=None if images is None else c.input_path("data.images", images, kind="folder"),
        make_demo=make_demo,
        process_args=c.args("data.process", data.get("process_args"), "data.process_args"),
    )

    fit = sections["fit"]
    try:  # a bare name (demo) is a shipped config, as on the command line
        fit_config_name = str(resolve_config(c.required("fit.config", fit.get("config"))))
    except ConfigNotFoundError as error:
        c.fail("fit.config", str(error))
    fit_config = c.input_path("fit.config", fit_config_name, kind="file")
    fit_args = c.args("fit", fit.get("args"))
    test_args = c.args("test", sections["test"].get("args"))

    render_doc = {**dataclasses.asdict(RenderSpec()), **sections["render"]}
    frames = render_doc["frames"]
    if frames is not None and (isinstance(frames, bool) or frames < 1):
        c.fail("render.frames", f"expected an integer >= 1, got {frames!r}")
    if not render_doc["fps"] > 0:
        c.fail("render.fps", f"expected a positive number, got {render_doc['fps']!r}")
    render_out = c.output_name("render.out", render_doc["out"])
    if Path(render_out).suffix.lower() not in VIDEO_SUFFIXES:
        c.fail("render.out", f"{render_out}: expected a {' or '.join(VIDEO_SUFFIXES)} file")
    render = {**render_doc, "out": render_out, "args": list(c.args("render", render_doc["args"]))}

    export_doc = {**dataclasses.asdict(ExportSpec()), **sections["export"]}
    if export_doc["format"] not in EXPORT_FORMATS:
        c.fail("export.format", f"{export_doc['format']!r}; expected one of: {', '.join(EXPORT_FORMATS)}")
    export = {"format": export_doc["format"],
              "out": c.output_name("export.out", export_doc["out"] or EXPORT_OUT[export_doc["format"]]),
              "verify": bool(export_doc["verify"]), "args": list(c.args("export", export_doc["args"]))}

    retries = options.get("retries", 0)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        c.fail("retries", f"expected an integer >= 0, got {retries!r}")

    listed = options.get("stages")
    stages = STAGES if listed is None else tuple(s for s in STAGES if s in listed)
    if listed is not None:
        if not listed:
            c.fail("stages", f"expected a non-empty list of stages from: {', '.join(STAGES)}")
        for stage in listed:
            if stage not in STAGES:
                c.fail("stages", f"unknown stage {stage!r}; expected some of: {', '.join(STAGES)}")
        if "verify" in stages and not export["verify"]:
            c.fail("stages", "verify is listed but export.verify is false")
    not_available: dict[str, str] = {}
    if not (export_command_available() if export_available is None else export_available):
        for stage in ("export", "verify"):
            if listed is not None and stage in stages:
                c.fail("stages", f"{stage}: {NO_EXPORT}; leave export and verify out of stages")
            not_available[stage] = NO_EXPORT
        stages = tuple(s for s in stages if s not in not_available)
    return PipelineConfig(path=path, work_dir=work_dir, data=data_config, fit_config=fit_config,
                          fit_args=fit_args, test_args=test_args, render=render, export=export,
                          retries=retries, stages=stages, not_available=not_available)


def pipeline_parser() -> ArgumentParser:
    """A parser of the pipeline's fields (and ``--config``): what :func:`load_pipeline_config` reads
    files with."""
    parser = ArgumentParser(prog="nerf-lightning pipeline", exit_on_error=False, env_prefix=False,
                            default_env=False)
    parser.add_argument("--config", action=ActionConfigFile)
    declare_pipeline_arguments(parser)
    return parser


def load_pipeline_config(path: str | Path, *, export_available: bool | None = None) -> PipelineConfig:
    """Read, parse and check ``PIPELINE.yaml``; raises :class:`PipelineConfigError`.

    Args:
        export_available: whether ``nerf-lightning export`` exists (default: look for it).
    """
    path = Path(path)
    doc = read_file(path)
    try:
        options = pipeline_parser().parse_object(doc).as_dict()
    except argparse.ArgumentError as error:  # a value of the wrong type
        first = " ".join(str(error).split("\n", 1)[0].split())
        raise PipelineConfigError(f"{path}: {first}") from None
    return check(options, path, export_available=export_available)
