"""``nerf-lightning data make-demo|validate|cache|convert|process``: dataset tools.

Each prints what it did; with ``--result_file PATH`` it also writes it as JSON (what the pipeline's
stages read). Errors (:class:`~nerf_lightning.scenes.errors.DatasetError`, an existing
``transforms.json``) reach :func:`nerf_lightning.commands.errors.report`, which prints them on one line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from jsonargparse.typing import PositiveInt

from nerf_lightning.commands.base import Command, UsageError, write_result
from nerf_lightning.commands.cache_progress import CacheProgress
from nerf_lightning.datasets.convert import convert_dataset
from nerf_lightning.datasets.process import DEFAULT_NUM_FRAMES, process_source
from nerf_lightning.datasets.scene_suite import SUITE
from nerf_lightning.scenes.cache import warm_cache
from nerf_lightning.scenes.loading import LOADERS
from nerf_lightning.scenes.validate import SPLITS, validate_dataset


def _format(name: str) -> str:
    if name not in ("auto", *LOADERS):
        raise UsageError(f"--format: expected one of auto, {', '.join(LOADERS)}, got {name!r}")
    return name


def make_demo(directory: Path, scene: str = "demo", seed: int = 0, resolution: int = 100,
              result_file: Path | None = None) -> int:
    """Write a procedural scene into DIRECTORY: the embedded demo scene (Blender layout), or a scene of
    the suite (--scene; docs/data.md says what each one stresses).

    Args:
        directory: the scene folder (replaced when it holds only an earlier generated scene).
        scene: demo, or a suite scene: thin, texture, specular, offcentre, workshop (Blender layout),
            360, 360-small, tabletop, tabletop-poses, tabletop-exposure, garden (instant-ngp
            transforms.json), forward, forward-exposure (LLFF poses_bounds.npy).
        seed: seed of the cameras (the same seed writes the same bytes).
        resolution: the longer image side in pixels (square images for demo and the object scenes).
        result_file: also write the result to this JSON file.
    """
    if scene not in SUITE:
        raise UsageError(f"--scene: expected one of {', '.join(SUITE)}, got {scene!r}")
    out = SUITE[scene].make(directory, seed=seed, resolution=resolution)
    print(f"{scene} scene written to {out}")
    write_result(result_file, {"command": "data make-demo", "directory": str(out), "scene": scene})
    return 0


def validate(directory: Path, format: str = "auto", downscale: PositiveInt = 1,
             result_file: Path | None = None) -> int:
    """Check a dataset without training: one line per problem, exit code 1 if it cannot be used.

    Args:
        directory: the dataset folder.
        format: dataset format: auto (detected from the folder's files) or a loader's name.
        downscale: image downscale factor training will use.
        result_file: also write the report (ok, summary, problems, warnings, frames) to this JSON file.
    """
    report = validate_dataset(directory, dataset_format=_format(format), downscale=int(downscale))
    print("\n".join(report.lines()))
    write_result(result_file, {"command": "data validate", "ok": report.ok, "summary": report.summary(),
                               "problems": [str(p) for p in report.problems],
                               "warnings": [str(w) for w in report.warnings], "frames": report.frames})
    return 0 if report.ok else 1


def cache(directory: Path, format: str = "auto", downscale: PositiveInt = 1,
          background: tuple[float, float, float] = (1.0, 1.0, 1.0), cache_dir: Path | None = None,
          splits: list[str] | None = None, result_file: Path | None = None) -> int:
    """Decode a dataset's images into the image cache now, as training with these settings would.

    Shows each split's build going (images done, images/s, time left) on stderr; an interrupted build
    (Ctrl-C) goes on from its last finished image when started again. Exit code 1 if the cache cannot
    be written.

    Args:
        directory: the dataset folder.
        format: dataset format: auto (detected from the folder's files) or a loader's name.
        downscale: image downscale factor training will use.
        background: colour transparent pixels are composited over, [R, G, B].
        cache_dir: the cache folder (default: $XDG_CACHE_HOME/nerf-lightning).
        splits: splits to cache, e.g. [train, val] (default: train, val and test).
        result_file: also write each split's cache entry to this JSON file.
    """
    chosen = tuple(splits) if splits else SPLITS
    unknown = [split for split in chosen if split not in SPLITS]
    if unknown:
        raise UsageError(f"--splits: expected some of {', '.join(SPLITS)}, got {', '.join(unknown)}")
    warmed = warm_cache(directory, chosen, dataset_format=_format(format), background=tuple(background),
                        downscale=int(downscale), cache_dir=cache_dir, progress=CacheProgress())
    print("\n".join(split.line() for split in warmed))
    write_result(result_file, {"command": "data cache", "splits": {
        split.split: {"entry": str(split.entry), "images": split.num_images, "bytes": split.bytes,
                      "cached": split.cached, "was_cached": split.was_cached} for split in warmed}})
    return 0 if all(split.cached for split in warmed) else 1


def convert(source: Path, destination: Path, images: Path | None = None, copy: bool = False,
            force: bool = False, result_file: Path | None = None) -> int:
    """Convert an LLFF capture or a COLMAP model SRC into DST/transforms.json (nerfstudio layout).

    SRC is an LLFF capture (SRC/poses_bounds.npy + images/ or images_N/) or a COLMAP sparse model
    (cameras/images .bin or .txt, in SRC, SRC/sparse/0 or SRC/sparse; images in images/ next to or
    above it); it is only read. DST gets transforms.json for the nerfstudio loader, which reads only
    images inside its dataset folder. When the image folder is inside DST (DST is the capture or an
    ancestor) the frames reference the images in place; otherwise (a fresh folder, a read-only
    capture) each image is hard-linked, or copied where links are not possible, to DST/<image folder
    name>/ (written under a temporary name, then renamed). An identical file already there is kept; a
    different one is only replaced with --force. The file's 'conversion' section records the source,
    how the images were placed, the applied world transform (the identity) and the camera-axis change
    to OpenGL. Check the result with 'nerf-lightning data validate DST'.

    Args:
        source: SRC: LLFF capture folder, COLMAP capture folder or COLMAP model folder.
        destination: DST: folder to write transforms.json into (created if needed).
        images: image folder to reference (COLMAP: default images/ next to or above the model; LLFF:
            images/ or an images_N/ of SRC, default images/ else the smallest N).
        copy: copy images into DST instead of hard-linking them (a hard link shares the file with SRC:
            editing it edits both); no effect when the images are in DST.
        force: replace an existing DST/transforms.json and different files where images go.
        result_file: also write the result (file, frames, messages) to this JSON file.
    """
    result = convert_dataset(source, destination, images=images, force=force, copy=copy)
    print("\n".join(result.messages))
    frames = len(result.transforms.get("frames", []))
    write_result(result_file, {"command": "data convert", "transforms": str(result.path), "frames": frames,
                               "messages": result.messages})
    return 0


def process(source: Path, destination: Path,
            camera_model: Literal["OPENCV", "PINHOLE", "SIMPLE_RADIAL"] = "OPENCV",
            matcher: Literal["auto", "exhaustive", "sequential"] = "auto",
            max_image_size: PositiveInt = 1600, num_frames: PositiveInt = DEFAULT_NUM_FRAMES,
            copy: bool = False, deterministic: bool = True, skip_unreadable: bool = False,
            result_file: Path | None = None) -> int:
    """Photos in folder SRC, or a video SRC -> a validated dataset in DST, by structure-from-motion.

    SRC is checked before any work: a folder's photos are each decoded once (a photo that does not
    decode, truncated, empty or not an image, is one line naming it, exit code 2, unless
    --skip_unreadable true leaves it out with a warning line), a video must decode.

    A video (.mp4, .mov, .m4v, .mkv, .avi, .webm; decoded by imageio-ffmpeg, the 'video' extra) gives
    --num_frames frames spread evenly over it, each the sharpest (variance of the Laplacian) of 3
    candidates around its place. Then pycolmap (CPU) finds SIFT features (on the photos scaled to at
    most --max_image_size pixels), matches them, maps the photos with one shared camera and bundle
    adjustment, and DST gets images/ (the photos, hard-linked or copied, or the video's frames),
    images_2/, images_4/, images_8/ (area-downscaled copies, read for --data.downscale 2, 4, 8),
    colmap/sparse/0 (the model), transforms.json (as 'data convert' writes it) and process.json; DST
    is then validated. Prints registered/total photos and the mean reprojection error; shows a
    progress bar per stage on stderr when it is a terminal. A rerun skips the stages whose inputs did
    not change. Everything is built in a folder next to DST (.DST.process-work) and moved into place
    only on success: with fewer than half the photos registered it exits non-zero and an earlier DST
    stays as it was. A failed run keeps that folder when a rerun can resume from it (a stage finished)
    and removes it otherwise; its error line says which. Needs the 'sfm' extra (pycolmap).

    Args:
        source: SRC: the folder of photos (.jpg, .jpeg, .png, one camera, one size) or a video; only read.
        destination: DST: the dataset folder: new, empty or an earlier output of 'data process'.
        camera_model: the shared camera: OPENCV (radial and tangential distortion), PINHOLE or SIMPLE_RADIAL.
        matcher: auto (a video's frames: sequential; photos: exhaustive below 100, else sequential),
            exhaustive (every pair) or sequential (each photo with the next ones in name order).
        max_image_size: features are found on photos scaled to at most this many pixels on a side.
        num_frames: a video's frames to keep (100: as many views as a Blender scene trains on; more
            frames take longer to match and map).
        copy: copy the photos into DST instead of hard-linking them.
        deterministic: find features, match and map on one thread, so that a rerun on the same photos
            gives the same model (false: every core, faster on a large capture, but the model may differ
            between runs).
        skip_unreadable: leave out the photos that do not decode (a warning line each) instead of
            refusing SRC; at least 3 photos must remain.
        result_file: also write the result (registered, total, mean reprojection error) to this JSON file.
    """
    result = process_source(source, destination, camera_model=camera_model, matcher=matcher,
                            max_image_size=int(max_image_size), num_frames=int(num_frames), copy=copy,
                            deterministic=deterministic, skip_unreadable=skip_unreadable)
    print("\n".join(result.lines))
    print(f"next: nerf-lightning fit --config real --data.root {result.dst}")
    write_result(result_file, {"command": "data process", "dataset": str(result.dst),
                               "stages_run": result.ran, **result.summary.as_dict()})
    return 0


COMMANDS = [
    Command("data make-demo", make_demo, positional=True),
    Command("data validate", validate, positional=True),
    Command("data cache", cache, positional=True),
    Command("data convert", convert, positional=True),
    Command("data process", process, positional=True),
]
