"""``nerf-lightning render``: a novel-view video from a trained checkpoint.

    nerf-lightning render --ckpt_path RUN/checkpoints/last.ckpt --out video.mp4   # spiral or orbit: auto
    nerf-lightning render --ckpt_path RUN/checkpoints/last.ckpt --camera_path orbit --out orbit.mp4
    nerf-lightning render --ckpt_path RUN/checkpoints/last.ckpt --camera_path path.json --out path.mp4
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import replace
from pathlib import Path

from tqdm import tqdm

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.commands.base import Command, write_result
from nerf_lightning.export.render_video import (
    CAMERA_PATHS,
    RenderError,
    choose_camera_path,
    estimate_line,
    path_cameras,
    path_poses,
    render_frames,
)
from nerf_lightning.rendering.camera_path_file import read_camera_path
from nerf_lightning.rendering.video import check_video_path, open_video
from nerf_lightning.runs.trained import TrainedRun


def render(
    out: Path,
    camera_path: str = "auto",
    frames: int | None = None,
    fps: float | None = None,
    depth: bool = False,
    result_file: Path | None = None,
    *,
    run: TrainedRun,
) -> int:
    """Render a novel-view video (mp4 or gif) from a trained checkpoint.

    The model and data settings come from the run's config.yaml; any --model.* or --data.* option
    overrides them, e.g. --data.root DIR when the dataset moved. Once the first frame is rendered, a
    line on stderr gives the frame count, the frame size and the time the whole video takes at that
    frame's pace.

    Args:
        out: output file, .mp4 or .gif.
        camera_path: auto (the default: spiral for a forward-facing capture, one whose training cameras
            (90% of them) look within 30 degrees of their mean direction, such as LLFF; orbit
            otherwise), orbit (a circle around the scene centre, 360° captures), spiral (LLFF's spiral
            around the mean pose, forward-facing captures), interpolate (a smooth path through the
            training cameras in their order), test (the test views in order) or a camera-path FILE.json
            in nerfstudio's format (as 'nerf-lightning view' saves it; its render_width x
            render_height, poses and fields of view).
        frames: frames of auto/orbit/spiral/interpolate (default 120); test and a file: the first N.
        fps: frames per second (default: a file's own fps, else 30).
        depth: colourised depth beside the RGB.
        result_file: also write what was rendered (file, frames, size) to this JSON file.
    """
    out = Path(out)
    from_file = camera_path.lower().endswith(".json")
    if camera_path not in CAMERA_PATHS and not from_file:
        raise RenderError(f"unknown camera path {camera_path!r}; expected one of {', '.join(CAMERA_PATHS)} "
                          "or a camera-path FILE.json")
    check_video_path(out)
    if frames is not None and frames < 1:
        raise RenderError(f"--frames: expected an integer >= 1, got {frames}")
    file_cameras: Cameras | None = None
    if from_file:  # read before the model is: a bad file is reported at once
        file_cameras, file_fps = read_camera_path(Path(camera_path))
        fps = fps if fps is not None else file_fps
    fps = 30.0 if fps is None else fps
    if not (math.isfinite(fps) and fps > 0):
        raise RenderError(f"--fps: expected a positive number, got {fps}")
    model, datamodule = run.load()
    path = camera_path
    if file_cameras is not None:  # in the loader's coordinates: moved into the training frame
        cameras = file_cameras if frames is None else file_cameras[:frames]
        moved = datamodule.frame_transform.apply_poses(cameras.camera_to_world)
        cameras = replace(cameras, camera_to_world=moved)
        shorter = "--frames or the file's render_width/render_height"
    else:
        if camera_path == "auto":
            path, why = choose_camera_path(datamodule.splits["train"].cameras.camera_to_world)
            print(f"render: camera path {path}, for {why}; --camera_path "
                  f"{'|'.join(name for name in CAMERA_PATHS if name != 'auto')} to choose", file=sys.stderr)
        poses = path_poses(path, datamodule, frames)
        cameras = path_cameras(poses, datamodule.splits["train"].cameras)
        size_option = "--data.target_pixels" if datamodule.target_pixels is not None else "--data.downscale"
        shorter = f"--frames or {size_option}"
    height, width = int(cameras.height[0]), int(cameras.width[0])
    writer = open_video(out, fps)
    try:
        rendered = render_frames(model, datamodule, cameras, depth=depth)
        start = time.perf_counter()
        first = next(rendered)
        print(estimate_line(len(cameras), width, height, time.perf_counter() - start, shorter),
              file=sys.stderr, flush=True)
        writer.write(first)
        for frame in tqdm(rendered, initial=1, total=len(cameras), unit="frame", desc=f"render {path}",
                          file=sys.stderr):
            writer.write(frame)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    width *= 2 if depth else 1
    print(f"wrote {out} ({len(cameras)} frames, {width}x{height}, {fps:g} fps)")
    write_result(result_file, {"command": "render", "out": str(out), "frames": len(cameras), "width": width,
                               "height": height, "fps": fps, "camera_path": path,
                               "checkpoint": str(run.ckpt_path)})
    return 0


COMMAND = Command("render", render, trained_run=True)
