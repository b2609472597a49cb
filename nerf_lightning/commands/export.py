"""``nerf-lightning export``: a trained checkpoint as a mesh, point cloud, grid or standalone renderer, or
its refined training poses as a transforms.json.

    nerf-lightning export --ckpt_path RUN/checkpoints/last.ckpt --format mesh --out scene.ply
    nerf-lightning export --ckpt_path RUN/checkpoints/last.ckpt --format pt2 --out scene.pt2 --verify
    nerf-lightning export --ckpt_path RUN/checkpoints/last.ckpt --format transforms --out new/transforms.json

The formats themselves are :mod:`nerf_lightning.export`; every output is written under a temporary
name and renamed when complete.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nerf_lightning.commands.base import Command, write_result
from nerf_lightning.export.common import DEFAULT_CHUNK_POINTS, DEFAULT_RESOLUTION, ExportError, check_output
from nerf_lightning.export.pointcloud import DEFAULT_MAX_POINTS, VIEW_SETS
from nerf_lightning.export.verify import DEFAULT_TOLERANCE_DB, VerifyError
from nerf_lightning.runs.trained import TrainedRun

FORMATS = {"mesh": ".ply", "pointcloud": ".ply", "grid": ".npz", "pt2": ".pt2", "torchscript": ".pt",
           "transforms": ".json"}
RENDERER_FORMATS = ("pt2", "torchscript")  # standalone renderers, which --verify checks


def _check(options: dict[str, Any]) -> None:
    """The options' own errors, before anything is loaded or written."""
    format, out = options["format"], options["out"]
    if format not in FORMATS:
        raise ExportError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    if (options["verify"] or options["verify_only"]) and format not in RENDERER_FORMATS:
        raise ExportError(f"--verify checks a pt2 or torchscript export, not --format {format}")
    for name in ("resolution", "chunk_points", "max_points"):
        minimum = 2 if name == "resolution" else 1
        if options[name] < minimum:
            raise ExportError(f"--{name}: expected an integer >= {minimum}, got {options[name]}")
    if options["verify_views"] is not None and options["verify_views"] < 1:
        raise ExportError(f"--verify_views: expected an integer >= 1, got {options['verify_views']}")
    threshold = options["density_threshold"]
    if threshold is not None and not (math.isfinite(threshold) and threshold > 0):
        raise ExportError(f"--density_threshold: expected a positive number, got {threshold}")
    if not 0.0 <= options["opacity_threshold"] < 1.0:
        raise ExportError(
            f"--opacity_threshold: expected a number in [0, 1), got {options['opacity_threshold']}")
    if options["views"] not in VIEW_SETS:
        raise ExportError(f"--views: expected one of {', '.join(VIEW_SETS)}, got {options['views']!r}")
    if options["verify_only"]:
        if not out.is_file():
            raise FileNotFoundError(f"{out}: no such module to verify")
    else:
        check_output(out, FORMATS[format], options["force"])


def export(
    format: str,
    out: Path,
    force: bool = False,
    resolution: int = DEFAULT_RESOLUTION,
    density_threshold: float | None = None,
    chunk_points: int = DEFAULT_CHUNK_POINTS,
    views: str = "train",
    max_points: int = DEFAULT_MAX_POINTS,
    opacity_threshold: float = 0.5,
    verify: bool = False,
    verify_only: bool = False,
    verify_views: int | None = None,
    result_file: Path | None = None,
    *,
    run: TrainedRun,
) -> int:
    """Export a trained checkpoint as a mesh, a point cloud, a grid, a standalone renderer or its poses.

    The formats: a coloured triangle mesh (PLY, marching cubes), a point cloud of surface points
    (PLY), density and colour on a grid (.npz), a standalone renderer that needs only torch: a
    torch.export program (.pt2) or, deprecated by torch, TorchScript (.pt), or the training frames
    with the poses a camera refinement corrected (a nerfstudio transforms.json; images outside its
    folder are hard-linked into it). Exit code 1 when --verify fails.

    The model is rebuilt as for render (the run's config.yaml; any --model.* or --data.* option
    overrides it, e.g. --data.root DIR).

    Args:
        format: mesh (.ply), pointcloud (.ply), grid (.npz), pt2 (.pt2), torchscript (.pt) or transforms
            (.json; of a run trained with --model.camera_refinement).
        out: output file.
        force: replace an existing output file (transforms: and different files where images go).
        resolution: mesh and grid: grid points per side of the scene box.
        density_threshold: mesh: density of the surface (default: a layer 1/128 of the box diagonal
            thick absorbs half the light: 128 ln 2 / diagonal).
        chunk_points: mesh and grid: points per field query.
        views: pointcloud: train, test or all, the views whose pixels are rendered.
        max_points: pointcloud: keep at most this many points, a uniform random subset.
        opacity_threshold: pointcloud: pixels rendered at least this opaque give a point.
        verify: pt2 and torchscript: render the test views with the saved module in a fresh process that has
            only torch and compare its PSNR with the checkpoint's (exit 1 beyond 0.1 dB).
        verify_only: do not export: verify the existing module at --out against the checkpoint.
        verify_views: verify on the first N test views (default: all).
        result_file: also write what was exported (file, format, verify figures) to this JSON file.
    """
    options = {**locals(), "out": Path(out)}  # the arguments only: taken before any other local
    out = options["out"]
    _check(options)
    if format == "transforms" and getattr(run.namespace.model, "camera_refinement", None) is None:
        # Before the model and the dataset are loaded: the run's config already says.
        raise ExportError(f"{run.ckpt_path}: the model has no camera refinement; expected a checkpoint of a "
                          "run trained with --model.camera_refinement (--format transforms writes its "
                          "refined poses)")
    model, datamodule = run.load()
    comments = [f"nerf-lightning export of {run.ckpt_path}"]
    result: dict[str, Any] = {"command": "export", "format": format, "out": str(out),
                              "checkpoint": str(run.ckpt_path)}
    if not verify_only:
        fields, line = WRITERS[format](ExportJob(model, datamodule, run, out, options, comments))
        result.update(fields)
        print(line)
    code = 0
    if verify or verify_only:
        from nerf_lightning.export.verify import verify_export

        try:
            checked = verify_export(model, datamodule, out, max_views=verify_views)
        except VerifyError as error:
            print(f"nerf-lightning export: verify failed: {error}", file=sys.stderr)
            result["verify"] = {"passed": False, "error": str(error)}
            code = 1
        else:
            print("\n".join(checked.lines()))
            result["verify"] = {"passed": True, "views": checked.views,
                                "checkpoint_psnr": checked.checkpoint_mean,
                                "module_psnr": checked.module_mean, "difference_db": checked.difference,
                                "tolerance_db": DEFAULT_TOLERANCE_DB}
    write_result(result_file, result)
    return code


@dataclass(frozen=True)
class ExportJob:
    """What a format's writer gets: the loaded model and data, the run, the output file, the
    command's options and the comment lines for the file's header."""

    model: Any
    datamodule: Any
    run: TrainedRun
    out: Path
    options: dict[str, Any]
    comments: list[str]


Writer = Callable[[ExportJob], tuple[dict[str, Any], str]]
"""Writes one format: ``job -> (fields for the result file, the line printed)``."""


def _mesh(job: ExportJob) -> tuple[dict[str, Any], str]:
    from nerf_lightning.export.mesh import export_mesh, surface_warning

    o = job.options
    mesh = export_mesh(job.model.field, job.out, o["resolution"], o["density_threshold"], o["chunk_points"],
                       job.run.device, job.comments)
    warning = surface_warning(mesh)  # the file is written all the same: a small scene may be right
    if warning is not None:
        print(f"nerf-lightning export: warning: {warning}", file=sys.stderr)
    fields = {"vertices": len(mesh.vertices), "triangles": len(mesh.faces),
              "density_threshold": mesh.threshold, "warning": warning}
    return (fields,
            f"wrote {job.out} ({len(mesh.vertices)} vertices, {len(mesh.faces)} triangles, density threshold "
            f"{mesh.threshold:.4g}, grid {o['resolution']}^3)")


def _pointcloud(job: ExportJob) -> tuple[dict[str, Any], str]:
    from nerf_lightning.export.pointcloud import export_pointcloud

    o = job.options
    cloud = export_pointcloud(job.model, job.datamodule, job.out, o["views"], o["max_points"],
                              o["opacity_threshold"], job.comments)
    return ({"points": len(cloud.points), "candidates": cloud.candidates},
            f"wrote {job.out} ({len(cloud.points)} points of {cloud.candidates} opaque pixels, "
            f"{o['views']} views)")


def _grid(job: ExportJob) -> tuple[dict[str, Any], str]:
    from nerf_lightning.export.grid import export_grid

    resolution = job.options["resolution"]
    split = job.datamodule.splits["train"]
    world = {"world_scale": split.world_scale,
             "world_transform": None if split.world_transform is None else split.world_transform.tolist()}
    export_grid(job.model.field, job.out, resolution, job.options["chunk_points"], job.run.device,
                {**job.run.source, **world})
    return ({"resolution": resolution},
            f"wrote {job.out} (density [{resolution}, {resolution}, {resolution}], "
            f"rgb [{resolution}, {resolution}, {resolution}, 3])")


def _transforms(job: ExportJob) -> tuple[dict[str, Any], str]:
    from nerf_lightning.export.transforms import export_transforms

    written = export_transforms(job.model, job.datamodule, job.out, job.run.ckpt_path,
                                force=job.options["force"])
    degrees, translation = (float(v) for v in job.model.camera_refinement.correction_sizes())
    frames = len(written.transforms["frames"])
    return ({"frames": frames, "mean_correction_deg": degrees, "mean_correction_translation": translation,
             "image_placement": written.placement.record(job.out.parent)},
            f"wrote {job.out} ({frames} training frames with refined poses: mean correction "
            f"{degrees:.3g} deg, {translation:.3g} world units; {written.placement.describe()})")


def _pt2(job: ExportJob) -> tuple[dict[str, Any], str]:
    from nerf_lightning.export.pt2 import export_pt2

    export_pt2(job.model, job.datamodule.background, job.out, job.run.source)
    return {}, (f"wrote {job.out} (torch.export program; load with torch.export.load(path).module(), "
                "no nerf_lightning needed)")


def _torchscript(job: ExportJob) -> tuple[dict[str, Any], str]:
    from nerf_lightning.export.torchscript import export_torchscript

    note = export_torchscript(job.model, job.datamodule.background, job.out, job.run.source)
    line = f"wrote {job.out} (TorchScript; load with torch.jit.load, no nerf_lightning needed)"
    return {"note": note}, (f"note: {note}\n{line}" if note is not None else line)


WRITERS: dict[str, Writer] = {"mesh": _mesh, "pointcloud": _pointcloud, "grid": _grid, "pt2": _pt2,
                              "torchscript": _torchscript, "transforms": _transforms}
"""Each format's writer, by ``--format`` name (the same keys as :data:`FORMATS`)."""


COMMAND = Command("export", export, trained_run=True)
