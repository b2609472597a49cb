"""``nerf-lightning export``: a trained checkpoint as a mesh, point cloud, grid or standalone renderer.

    nerf-lightning export --ckpt_path RUN/checkpoints/last.ckpt --format mesh --out scene.ply
    nerf-lightning export --ckpt_path RUN/checkpoints/last.ckpt --format pt2 --out scene.pt2 --verify

The model is rebuilt as ``render`` does (the run's ``config.yaml``, weights loaded with
``weights_only``). Every output is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

from nerf_lightning.export.common import DEFAULT_CHUNK_POINTS, DEFAULT_RESOLUTION, ExportError, check_output
from nerf_lightning.export.pointcloud import DEFAULT_MAX_POINTS, VIEW_SETS
from nerf_lightning.export.verify import DEFAULT_TOLERANCE_DB, VerifyError
from nerf_lightning.runs.trained import add_trained_run_arguments, load_trained, run_config_path

FORMATS = {"mesh": ".ply", "pointcloud": ".ply", "grid": ".npz", "pt2": ".pt2", "torchscript": ".pt"}
RENDERER_FORMATS = ("pt2", "torchscript")  # standalone renderers, which --verify checks


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nerf-lightning export",
        description="Export a trained checkpoint: a coloured triangle mesh (PLY, marching cubes), a point "
        "cloud of surface points (PLY), density and colour on a grid (.npz), or a standalone renderer that "
        "needs only torch: a torch.export program (.pt2) or, deprecated by torch, TorchScript (.pt).",
        epilog="Any --model.* or --data.* option overrides the run's config, e.g. --data.root DIR.",
        allow_abbrev=False,
    )
    add_trained_run_arguments(parser)
    parser.add_argument("--format", required=True,
                        help="mesh (.ply), pointcloud (.ply), grid (.npz), pt2 (.pt2) or torchscript (.pt)")
    parser.add_argument("--out", type=Path, required=True, help="output file")
    parser.add_argument("--force", action="store_true", help="replace an existing output file")
    parser.add_argument("--device", default="auto", help="auto (a GPU if any), cpu, cuda, cuda:1...")
    mesh = parser.add_argument_group("mesh and grid")
    mesh.add_argument("--resolution", type=int, default=DEFAULT_RESOLUTION,
                      help=f"grid points per side of the scene box (default {DEFAULT_RESOLUTION})")
    mesh.add_argument("--density-threshold", "--density_threshold", dest="density_threshold", type=float,
                      default=None, help="mesh: density of the surface (default: a layer 1/128 of the box "
                      "diagonal thick absorbs half the light: 128 ln 2 / diagonal)")
    mesh.add_argument("--chunk-points", "--chunk_points", dest="chunk_points", type=int,
                      default=DEFAULT_CHUNK_POINTS,
                      help=f"points per field query (default {DEFAULT_CHUNK_POINTS})")
    cloud = parser.add_argument_group("pointcloud")
    cloud.add_argument("--views", default="train", help=f"{', '.join(VIEW_SETS)}: views whose pixels are "
                       "rendered (default train)")
    cloud.add_argument("--max-points", "--max_points", dest="max_points", type=int,
                       default=DEFAULT_MAX_POINTS,
                       help="keep at most this many points, a uniform random subset "
                       f"(default {DEFAULT_MAX_POINTS})")
    cloud.add_argument("--opacity-threshold", "--opacity_threshold", dest="opacity_threshold", type=float,
                       default=0.5, help="pixels rendered at least this opaque give a point (default 0.5)")
    script = parser.add_argument_group("pt2 and torchscript")
    script.add_argument("--verify", action="store_true",
                        help="render the test views with the saved module in a fresh process that has only "
                        "torch and compare its PSNR with the checkpoint's (exit 1 if they differ by more "
                        f"than {DEFAULT_TOLERANCE_DB:g} dB)")
    script.add_argument("--verify-only", "--verify_only", dest="verify_only", action="store_true",
                        help="do not export: verify the existing module at --out against the checkpoint")
    script.add_argument("--verify-views", "--verify_views", dest="verify_views", type=int, default=None,
                        help="verify on the first N test views (default: all)")
    return parser


def _check(options: argparse.Namespace, overrides: list[str]) -> None:
    if options.format not in FORMATS:
        raise ExportError(f"unknown format {options.format!r}; expected one of {', '.join(FORMATS)}")
    if (options.verify or options.verify_only) and options.format not in RENDERER_FORMATS:
        raise ExportError(f"--verify checks a pt2 or torchscript export, not --format {options.format}")
    allowed = ("--model.", "--data.")
    unknown = [arg for arg in overrides if arg.startswith("-") and not arg.startswith(allowed)]
    if unknown:
        raise ExportError(f"unrecognized arguments: {' '.join(unknown)}")
    for name in ("resolution", "chunk_points", "max_points"):
        value = getattr(options, name)
        minimum = 2 if name == "resolution" else 1
        if value < minimum:
            raise ExportError(f"--{name.replace('_', '-')}: expected an integer >= {minimum}, got {value}")
    if options.verify_views is not None and options.verify_views < 1:
        raise ExportError(f"--verify-views: expected an integer >= 1, got {options.verify_views}")
    threshold = options.density_threshold
    if threshold is not None and not (math.isfinite(threshold) and threshold > 0):
        raise ExportError(f"--density-threshold: expected a positive number, got {threshold}")
    if not 0.0 <= options.opacity_threshold < 1.0:
        raise ExportError(
            f"--opacity-threshold: expected a number in [0, 1), got {options.opacity_threshold}"
        )
    if options.views not in VIEW_SETS:
        raise ExportError(f"--views: expected one of {', '.join(VIEW_SETS)}, got {options.views!r}")
    if not options.ckpt_path.is_file():
        raise FileNotFoundError(f"{options.ckpt_path}: no such checkpoint")
    if options.verify_only:
        if not options.out.is_file():
            raise FileNotFoundError(f"{options.out}: no such module to verify")
    else:
        check_output(options.out, FORMATS[options.format], options.force)


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def run_export_cli(args: list[str]) -> int:
    """``nerf-lightning export ...``: 0 once written (and verified), 1 when verification fails.

    Argument errors raise (``ExportError``, ``FileNotFoundError``, ``FileExistsError``) for
    :func:`nerf_lightning.cli.main` to print on one line.
    """
    options, overrides = _parser().parse_known_args(args)
    _check(options, overrides)
    config = run_config_path(options.ckpt_path, options.config)
    device = _device(options.device)
    model, datamodule = load_trained(options.ckpt_path, config, overrides, device=device,
                                     weights_only=options.weights_only)
    source = {"checkpoint": str(options.ckpt_path), "config": str(config)}
    comments = [f"nerf-lightning export of {options.ckpt_path}"]
    out: Path = options.out
    if options.format == "mesh":
        from nerf_lightning.export.mesh import export_mesh

        mesh = export_mesh(model.field, out, options.resolution, options.density_threshold,
                           options.chunk_points, device, comments)
        print(f"wrote {out} ({len(mesh.vertices)} vertices, {len(mesh.faces)} triangles, density threshold "
              f"{mesh.threshold:.4g}, grid {options.resolution}^3)")
    elif options.format == "pointcloud":
        from nerf_lightning.export.pointcloud import export_pointcloud

        cloud = export_pointcloud(model, datamodule, out, options.views, options.max_points,
                                  options.opacity_threshold, comments)
        print(f"wrote {out} ({len(cloud.points)} points of {cloud.candidates} opaque pixels, "
              f"{options.views} views)")
    elif options.format == "grid":
        from nerf_lightning.export.grid import export_grid

        split = datamodule.splits["train"]
        world = {"world_scale": split.world_scale,
                 "world_transform": None if split.world_transform is None else split.world_transform.tolist()}
        export_grid(model.field, out, options.resolution, options.chunk_points, device, {**source, **world})
        n = options.resolution
        print(f"wrote {out} (density [{n}, {n}, {n}], rgb [{n}, {n}, {n}, 3])")
    elif options.format == "pt2" and not options.verify_only:
        from nerf_lightning.export.pt2 import export_pt2

        export_pt2(model, datamodule.background, out, source)
        print(f"wrote {out} (torch.export program; load with torch.export.load(path).module(), "
              "no nerf_lightning needed)")
    elif not options.verify_only:
        from nerf_lightning.export.torchscript import export_torchscript

        note = export_torchscript(model, datamodule.background, out, source)
        if note is not None:
            print(f"note: {note}")
        print(f"wrote {out} (TorchScript; load with torch.jit.load, no nerf_lightning needed)")
    if options.verify or options.verify_only:
        from nerf_lightning.export.verify import verify_export

        try:
            result = verify_export(model, datamodule, out, max_views=options.verify_views)
        except VerifyError as error:
            print(f"nerf-lightning export: verify failed: {error}", file=sys.stderr)
            return 1
        print("\n".join(result.lines()))
    return 0
