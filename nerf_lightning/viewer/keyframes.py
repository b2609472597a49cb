"""Camera keyframes placed in the browser, saved as a camera path ``nerf-lightning render`` turns into
a video (nerfstudio's JSON format, :mod:`nerf_lightning.rendering.camera_path_file`)."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import viser

from nerf_lightning.rendering.camera_path_file import CameraPathError, Keyframe, write_camera_path
from nerf_lightning.scenes.normalise import Similarity
from nerf_lightning.viewer.cameras import ViewCamera, viser_pose

KEYFRAME_COLOUR = (220, 60, 60)


class KeyframeRecorder:
    """A "Camera path" folder in the panel: add the browser's view as a keyframe, clear them, save the path.

    Args:
        server: the viewer's server.
        out: the file "Save camera path" writes (replaced on each save).
        height: rendered height of the path's frames, in pixels (the width follows the view's aspect).
        marker_scale: size of the keyframes' frustums in the scene (world units).
        to_file: the viewer's (training) coordinates to the loader's, which camera-path files use
            (``NerfDataModule.frame_transform`` inverted; ``None``: the same coordinates). The keyframes
            are shown in the viewer's and written in the loader's.
    """

    def __init__(self, server: viser.ViserServer, out: Path, height: int, marker_scale: float,
                 to_file: Similarity | None = None) -> None:
        self.server, self.out, self.height, self.marker_scale = server, out, height, marker_scale
        self.to_file = to_file or Similarity.identity()
        self.keyframes: list[Keyframe] = []
        self._lock = threading.Lock()  # buttons of two browsers may be pressed at once
        with server.gui.add_folder("Camera path"):
            add = server.gui.add_button("Add keyframe")
            clear = server.gui.add_button("Clear keyframes")
            self.seconds = server.gui.add_number("Seconds", initial_value=4.0, min=0.1, step=0.1)
            self.fps = server.gui.add_number("FPS", initial_value=30.0, min=1.0, step=1.0)
            save = server.gui.add_button("Save camera path")
            self.status = server.gui.add_markdown("no keyframes")
        add.on_click(lambda event: self.add(event.client))
        clear.on_click(lambda _: self.clear())
        save.on_click(lambda _: self.save())

    def add(self, client: viser.ClientHandle | None) -> None:
        """The view of ``client`` (the browser that clicked) as the next keyframe."""
        if client is None:
            return
        camera = client.camera
        view = ViewCamera.from_viser(camera.wxyz, camera.position, camera.fov,
                                     camera.image_width / max(camera.image_height, 1))
        with self._lock:
            fov = math.degrees(view.vertical_fov)
            self.keyframes.append(Keyframe(view.camera_to_world, fov, view.aspect))
            index = len(self.keyframes) - 1
        wxyz, position = viser_pose(view.camera_to_world)
        self.server.scene.add_camera_frustum(
            f"/keyframes/{index:03d}", fov=view.vertical_fov, aspect=view.aspect, scale=self.marker_scale,
            color=KEYFRAME_COLOUR, wxyz=wxyz, position=position, thickness=2.0, thickness_units="screen")
        self.status.content = f"{index + 1} keyframe{'s' if index else ''}"

    def clear(self) -> None:
        with self._lock:
            self.keyframes = []
        self.server.scene.remove_by_name("/keyframes")
        self.status.content = "no keyframes"

    def save(self) -> Path | None:
        """Write the path; its file, or ``None`` (said in the panel) when there is nothing to save."""
        with self._lock:
            keyframes = [Keyframe(self.to_file.apply_poses(key.camera_to_world[None])[0], key.vertical_fov,
                                  key.aspect) for key in self.keyframes]
        if not keyframes:
            self.status.content = "add a keyframe first"
            return None
        try:
            frames = write_camera_path(self.out, keyframes, self.height, float(self.fps.value),
                                       float(self.seconds.value))
        except (CameraPathError, OSError) as error:
            self.status.content = f"not saved: {error}"
            return None
        self.status.content = f"saved {self.out} ({len(keyframes)} keyframes, {frames} frames)"
        print(f"viewer: saved camera path {self.out} ({frames} frames); render it with "
              f"nerf-lightning render --camera_path {self.out} ...", flush=True)
        return self.out
