"""``nerf-lightning view``: a trained run in the browser, with camera keyframes saved as a camera path.

    nerf-lightning view --ckpt_path RUN/checkpoints/last.ckpt     # or the run folder: --ckpt_path RUN
    nerf-lightning render --ckpt_path RUN/checkpoints/last.ckpt \\
        --camera_path RUN/camera_paths/camera_path.json --out path.mp4
"""

from __future__ import annotations

import time
from pathlib import Path

from nerf_lightning.commands.base import Command, UsageError
from nerf_lightning.runs.trained import TrainedRun
from nerf_lightning.viewer import viewer_missing


def default_camera_path(ckpt_path: Path) -> Path:
    """``RUN/camera_paths/camera_path.json`` for ``RUN/checkpoints/x.ckpt`` (beside any other checkpoint)."""
    run_dir = ckpt_path.parent.parent if ckpt_path.parent.name == "checkpoints" else ckpt_path.parent
    return run_dir / "camera_paths" / "camera_path.json"


def view(
    host: str = "127.0.0.1",
    port: int = 7007,
    max_resolution: int = 512,
    camera_path_out: Path | None = None,
    serve_seconds: float | None = None,
    *,
    run: TrainedRun,
) -> int:
    """Show a trained run in the browser and save camera paths placed there.

    The page shows the training cameras, the scene box, the sampler's occupied space and the model
    rendered from the browser's camera (reduced while it moves, refined when it stops), as rgb, depth,
    opacity or samples per ray. "Add keyframe" records the current view; "Save camera path" writes
    the keyframes as a camera path (nerfstudio's JSON format) that 'nerf-lightning render
    --camera_path FILE.json' turns into a video. Stop with Ctrl-C.

    Args:
        host: address to listen on; 127.0.0.1 keeps it to this machine (reach it from elsewhere with an
            SSH tunnel, as the printed line says); 0.0.0.0 exposes it on purpose.
        port: port to listen on (the next free one when taken; 0: any free one).
        max_resolution: initial cap on a frame's long side in pixels (the page changes it).
        camera_path_out: the file "Save camera path" writes (default RUN/camera_paths/camera_path.json).
        serve_seconds: stop after this many seconds (default: until Ctrl-C).
    """
    missing = viewer_missing()
    if missing is not None:
        raise UsageError(missing)
    if not 0 <= port <= 65535:
        raise UsageError(f"--port: expected a port number in [0, 65535], got {port}")
    if max_resolution < 16:
        raise UsageError(f"--max_resolution: expected at least 16 pixels, got {max_resolution}")
    if serve_seconds is not None and not serve_seconds >= 0:
        raise UsageError(f"--serve_seconds: expected a number of seconds >= 0, got {serve_seconds}")
    from nerf_lightning.viewer.trained import open_trained_view, serve

    model, datamodule = run.load()
    out = Path(camera_path_out) if camera_path_out is not None else default_camera_path(run.ckpt_path)
    session, _ = open_trained_view(model, datamodule, host=host, port=port, max_resolution=max_resolution,
                                   camera_path_out=out)
    session.announce()
    end = None if serve_seconds is None else time.monotonic() + serve_seconds
    try:
        serve(session, model, lambda: end is None or time.monotonic() < end)
    except KeyboardInterrupt:
        pass
    finally:
        session.close()
    return 0


COMMAND = Command("view", view, trained_run=True)
