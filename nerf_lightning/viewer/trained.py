"""A trained run in the browser: the session of ``nerf-lightning view`` and its serving loop.

Nothing trains, so frames are always interactive: reduced to about :data:`~.session.MOVING_FRAME_S`
while the camera moves, refined step by step up to the resolution cap once it stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.system.module import NerfModule
from nerf_lightning.viewer.keyframes import KeyframeRecorder
from nerf_lightning.viewer.render import ViewScene
from nerf_lightning.viewer.session import ViewerSession

MAX_POINTS = 30_000


def open_trained_view(model: NerfModule, datamodule: NerfDataModule, *, host: str, port: int,
                      max_resolution: int, camera_path_out: Path) -> tuple[ViewerSession, KeyframeRecorder]:
    """Serve ``model`` (evaluation mode) with its data module's training cameras and a keyframe panel."""
    train = datamodule.splits["train"]
    session = ViewerSession(ViewScene.from_datamodule(datamodule), train.cameras, train.images, host=host,
                            port=port, max_resolution=max_resolution, training=False)
    recorder = KeyframeRecorder(session.server, camera_path_out, height=int(train.cameras.height[0]),
                                marker_scale=0.05 * session.diagonal,
                                to_file=datamodule.frame_transform.inverse())
    session.show_points(model.sampler.occupied_points(MAX_POINTS))
    return session, recorder


def serve(session: ViewerSession, model: NerfModule, keep_going: Callable[[], bool]) -> None:
    """Render interactive frames for the browsers while ``keep_going()``; idle waits are short sleeps."""
    while keep_going():
        if not session.render_interactive(model, 0, cancelled=lambda: not keep_going()):
            time.sleep(0.01)
