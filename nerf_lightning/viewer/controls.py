"""The viewer's control panel: what to show, how sharp, and (while training) pause and progress.

viser calls the widgets' handlers on its own threads; they only set plain attributes and bump
``version``, which the rendering thread reads between frames (an attribute write is atomic in
Python, and a frame rendered with the old value is simply replaced by the next one).
"""

from __future__ import annotations

import threading

import viser

from nerf_lightning.viewer.render import OUTPUTS

PAUSE_LABEL, RESUME_LABEL = "Pause training", "Resume training"


class Controls:
    """The GUI panel of one viewer server and the values it holds.

    Args:
        server: the viser server whose panel this is.
        max_resolution: initial cap on the long side of a frame, in pixels.
        training: add the pause button and the progress line.
        can_pause: whether pausing is possible (not under data parallelism, where one rank waiting
            would hold the others at their next collective).
    """

    def __init__(self, server: viser.ViserServer, max_resolution: int, training: bool,
                 can_pause: bool = True) -> None:
        self.output = next(iter(OUTPUTS))
        self.max_resolution = max_resolution
        self.version = 0  # bumped on any change that makes the frames shown out of date
        self.resumed = threading.Event()  # set while training runs, cleared while paused
        self.resumed.set()
        gui = server.gui
        self.progress = gui.add_markdown("starting...") if training else None
        self.pause_button = None
        if training:
            hint = None if can_pause else "not available under data parallelism"
            self.pause_button = gui.add_button(PAUSE_LABEL, disabled=not can_pause, hint=hint)
            self.pause_button.on_click(lambda _: self.toggle_pause())
        output = gui.add_dropdown("Output", tuple(OUTPUTS), initial_value=self.output)
        output.on_update(lambda event: self._set("output", event.target.value))
        cap = gui.add_slider("Max resolution", min=32, max=2048, step=32, initial_value=max_resolution)
        cap.on_update(lambda event: self._set("max_resolution", int(event.target.value)))
        # Scene markers: their visibility is the session's (it owns the nodes), no frame depends on it.
        self.cameras_checkbox = gui.add_checkbox("Training cameras", initial_value=True)
        self.points_checkbox = gui.add_checkbox("Occupied space", initial_value=True)

    def _set(self, name: str, value: object) -> None:
        setattr(self, name, value)
        self.version += 1

    @property
    def paused(self) -> bool:
        return not self.resumed.is_set()

    def toggle_pause(self) -> None:
        """Pause training if it runs, resume it if paused."""
        self.set_paused(not self.paused)

    def set_paused(self, paused: bool) -> None:
        if paused:
            self.resumed.clear()
        else:
            self.resumed.set()
        if self.pause_button is not None:
            self.pause_button.label = RESUME_LABEL if paused else PAUSE_LABEL

    def show_progress(self, text: str) -> None:
        """Replace the progress line (training only)."""
        if self.progress is not None and self.progress.content != text:
            self.progress.content = text
