"""Layer ``viewer``: the live browser viewer (viser): render a model from the browser's camera, show the
scene.

Modules, each one idea:

* :mod:`.cameras`: viser's OpenCV-convention cameras to the project's OpenGL ones and back;
* :mod:`.render`: a view rendered through ``NerfModule.render_image`` and coloured (rgb, depth,
  opacity, samples per ray);
* :mod:`.pacing`: frame sizes from measured frame times, and the share of wall time frames may take;
* :mod:`.scene`: training cameras, scene box and occupied space drawn in 3D;
* :mod:`.controls`: the panel (output, resolution cap, pause, progress);
* :mod:`.session`: the server and which browser needs which frame;
* :mod:`.keyframes`: camera keyframes placed in the browser, saved as a camera path;
* :mod:`.trained`: a trained run served until stopped (``nerf-lightning view``).

The model never imports this package; :class:`~nerf_lightning.callbacks.Viewer` and ``nerf-lightning
view`` use it. viser is an optional extra (``pip install 'nerf-lightning[viewer]'``): importing
:mod:`.session`, :mod:`.scene`, :mod:`.controls`, :mod:`.keyframes` or :mod:`.trained` needs it;
:mod:`.cameras`, :mod:`.render` and :mod:`.pacing` do not.

May import ``core``, ``files``, ``cameras``, ``rendering``, ``scenes``, ``data``, ``system``; nothing
else of the package.
"""

from __future__ import annotations

import importlib.util


def viewer_missing() -> str | None:
    """Why the viewer cannot run here (one line), or ``None`` when it can."""
    if importlib.util.find_spec("viser") is None:
        return "needs viser; install the viewer extra: pip install 'nerf-lightning[viewer]'"
    return None
