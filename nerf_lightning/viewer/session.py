"""A viewer server and its frame loop: who needs a frame, how large, and sending it.

One :class:`ViewerSession` serves every browser connected to it. It never renders on its own: the
owner (the training callback between steps, or ``nerf-lightning view``'s loop) calls
:meth:`ViewerSession.render_frame` for the clients :meth:`ViewerSession.waiting` lists, from the
thread that owns the model, so a frame never races a training step.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import viser
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.system.module import NerfModule
from nerf_lightning.viewer.cameras import ViewCamera, up_direction
from nerf_lightning.viewer.controls import Controls
from nerf_lightning.viewer.pacing import PixelBudget
from nerf_lightning.viewer.render import ViewScene, frame_pixels, render_view
from nerf_lightning.viewer.scene import draw_cameras, draw_points, draw_scene_box

STILL_AFTER_S = 0.25
"""A camera that has not moved for this long is still: its frame is refined."""
MOVING_FRAME_S = 0.1
"""Frame time aimed at while the camera moves (interactive mode): at least 5 frames per second
with room for sending the frame."""
JPEG_QUALITY = 85


@dataclass
class _Shown:
    """What a client's last frame showed, to tell whether it is out of date."""

    camera_stamp: float = -1.0
    model_version: int = -1
    controls_version: int = -1
    pixels: int = 0
    full: bool = False


class ViewerSession:
    """A viser server showing one scene: training cameras, scene box, controls and rendered frames.

    Args:
        scene: where rays start and stop, and the background.
        cameras: the training cameras, drawn as frustums.
        images: their images (``[H, W, 3]`` float), shown as the frustums' thumbnails.
        host: address to listen on (``127.0.0.1``: this machine only).
        port: port to listen on (``0``: any free one); the next free one when taken.
        max_resolution: initial cap on a frame's long side (pixels); the panel changes it.
        training: add the pause button and progress line.
        can_pause: see :class:`~nerf_lightning.viewer.controls.Controls`.
    """

    def __init__(self, scene: ViewScene, cameras: Cameras, images: Sequence[Tensor], *, host: str, port: int,
                 max_resolution: int, training: bool, can_pause: bool = True) -> None:
        self.scene = scene
        with contextlib.redirect_stdout(io.StringIO()):  # viser's banner: announce() prints the one URL line
            self.server = viser.ViserServer(host=host, port=port, verbose=False)
        self.url = f"http://{host}:{self.server.get_port()}"
        box = scene.scene_box
        self.diagonal = float((box.upper - box.lower).norm())
        self._configure_camera(cameras)
        draw_scene_box(self.server, box)
        self._frustums = draw_cameras(self.server, cameras, images, scale=0.04 * self.diagonal)
        self.controls = Controls(self.server, max_resolution, training, can_pause)
        self.budget = PixelBudget()
        self.frames_sent = 0
        self._shown: dict[int, _Shown] = {}
        self._points: viser.PointCloudHandle | None = None
        self.controls.cameras_checkbox.on_update(lambda event: self._set_visible(self._frustums, event))
        self.controls.points_checkbox.on_update(lambda event: self._set_visible([self._points], event))
        self.server.on_client_disconnect(lambda client: self._shown.pop(client.client_id, None))

    def _configure_camera(self, cameras: Cameras) -> None:
        """Up follows the training cameras; a new browser starts at the first one, looking at the box."""
        up = up_direction(cameras)
        self.server.scene.set_up_direction(up)
        centre = ((self.scene.scene_box.lower + self.scene.scene_box.upper) / 2).float().numpy()
        initial = self.server.initial_camera
        if len(cameras):  # a little behind the first camera, so its frustum is in view rather than in the way
            initial.position = centre + 1.2 * (cameras.camera_to_world[0, :3, 3].float().numpy() - centre)
        initial.look_at = centre
        initial.up = up

    def announce(self) -> None:
        """Print the URL, with the SSH tunnel that reaches it from elsewhere when it listens on this
        machine only (once per session: the caller's job), to stderr like Lightning's own lines."""
        host, port = self.server.get_host(), self.server.get_port()
        hint = ""
        if host in ("127.0.0.1", "localhost"):
            hint = f" (from another machine: ssh -N -L {port}:127.0.0.1:{port} USER@THIS_HOST, then open it)"
        print(f"viewer: {self.url}{hint}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------ clients
    def clients(self) -> list[viser.ClientHandle]:
        """Connected browsers that have reported their camera."""
        return list(self.server.get_clients().values())

    def has_clients(self) -> bool:
        return bool(self.server.get_clients())

    def is_new(self, client: viser.ClientHandle) -> bool:
        """Whether ``client`` has not been sent a frame yet."""
        return client.client_id not in self._shown

    def moving(self, client: viser.ClientHandle) -> bool:
        """Whether ``client``'s camera moved in the last :data:`STILL_AFTER_S`."""
        return time.time() - client.camera.update_timestamp < STILL_AFTER_S

    def waiting(self, model_version: int, refine: bool) -> list[viser.ClientHandle]:
        """Clients whose frame is out of date: camera, model or controls changed since it, or
        (``refine``) it was reduced and the camera is now still."""
        waiting = []
        for client in self.clients():
            shown = self._shown.get(client.client_id)
            stale = (shown is None or shown.camera_stamp != client.camera.update_timestamp
                     or shown.model_version != model_version
                     or shown.controls_version != self.controls.version)
            if stale or (refine and not shown.full and not self.moving(client)):
                waiting.append(client)
        return waiting

    # ------------------------------------------------------------------ frames
    def full_pixels(self, client: viser.ClientHandle) -> int:
        """Pixels of ``client``'s frame at the resolution cap."""
        width, height = self._view(client).size(1 << 40, self.controls.max_resolution)
        return width * height

    def interactive_pixels(self, client: viser.ClientHandle) -> int:
        """Pixels of the next interactive frame: what fits :data:`MOVING_FRAME_S` while the camera
        moves; once it is still, four times the last frame's (each refinement a quick step) up to the cap."""
        quick = self.budget.pixels(MOVING_FRAME_S)
        shown = self._shown.get(client.client_id)
        if self.moving(client) or shown is None:
            return quick
        return max(quick, 4 * shown.pixels)

    def _view(self, client: viser.ClientHandle) -> ViewCamera:
        camera = client.camera
        aspect = camera.image_width / max(camera.image_height, 1)
        return ViewCamera.from_viser(camera.wxyz, camera.position, camera.fov, aspect)

    def render_frame(self, model: NerfModule, client: viser.ClientHandle, pixels: int, model_version: int,
                     cancelled: Callable[[], bool] | None = None, drop_if_moved: bool = False) -> float:
        """Render ``client``'s view with about ``pixels`` pixels (within the cap) and send it; the seconds
        it took, rendering, colouring and encoding together.

        ``cancelled`` (asked between bands of rows) drops the frame unsent; so does a change of the
        controls while it renders, and with ``drop_if_moved`` a camera that moves meanwhile.
        """
        start = time.perf_counter()
        stamp, controls_version = client.camera.update_timestamp, self.controls.version
        view = self._view(client)
        width, height = view.size(pixels, self.controls.max_resolution)

        def stop() -> bool:
            assert cancelled is not None
            moved = drop_if_moved and client.camera.update_timestamp != stamp
            return moved or self.controls.version != controls_version or cancelled()

        image = render_view(model, self.scene, view, width, height, None if cancelled is None else stop)
        if image is None:
            return time.perf_counter() - start
        with warnings.catch_warnings():  # a browser closed while its frame rendered: nothing to send to
            warnings.filterwarnings("ignore", message="Queued a .* on a closed connection")
            client.scene.set_background_image(frame_pixels(image, self.controls.output), format="jpeg",
                                              jpeg_quality=JPEG_QUALITY)
        seconds = time.perf_counter() - start
        self.frames_sent += 1
        self.budget.observe(width * height, seconds)
        full = width * height >= self.full_pixels(client)
        self._shown[client.client_id] = _Shown(stamp, model_version, controls_version, width * height, full)
        return seconds

    def render_interactive(self, model: NerfModule, model_version: int,
                           cancelled: Callable[[], bool] = lambda: False) -> bool:
        """One round of interactive frames (reduced while a camera moves, refined step by step once it
        is still), with no share of time to keep; whether any browser was waiting."""
        waiting = self.waiting(model_version, refine=True)
        for client in waiting:
            pixels = min(self.interactive_pixels(client), self.full_pixels(client))
            # A drag moves the camera during nearly every frame: a reduced frame is finished and sent
            # anyway (dropping it would leave the view frozen until the drag ends); a refinement, many
            # times longer, gives way to the move.
            refining = pixels > self.budget.pixels(MOVING_FRAME_S)
            self.render_frame(model, client, pixels, model_version, cancelled=cancelled,
                              drop_if_moved=refining)
        return bool(waiting)

    # ------------------------------------------------------------------ points
    def show_points(self, points: Tensor | None) -> None:
        """Replace the occupied-space point cloud (``[N, 3]`` world positions; ``None``: remove it)."""
        visible = bool(self.controls.points_checkbox.value)
        self._points = draw_points(self.server, points, 0.004 * self.diagonal, visible)

    @staticmethod
    def _set_visible(nodes: Sequence[viser.SceneNodeHandle | None], event: viser.GuiEvent) -> None:
        for node in nodes:
            if node is not None:
                node.visible = bool(event.target.value)

    def close(self) -> None:
        """Stop the server (browsers show it as disconnected)."""
        with contextlib.redirect_stdout(io.StringIO()):  # viser's "Server stopped"
            self.server.stop()
