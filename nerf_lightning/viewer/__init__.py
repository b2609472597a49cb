"""The live browser viewer (viser): render a model from the browser's camera, show the scene.

Modules, each one idea:

* :mod:`.cameras`: viser's OpenCV-convention cameras to the project's OpenGL ones and back;
* :mod:`.render`: a view rendered through ``NerfModule.render_image`` and coloured (rgb, depth,
  opacity, samples per ray);
* :mod:`.pacing`: frame sizes from measured frame times, and the share of wall time frames may take;
* :mod:`.scene`: training cameras, scene box and occupied space drawn in 3D;
* :mod:`.controls`: the panel (output, resolution cap, pause, progress);
* :mod:`.session`: the server and which browser needs which frame.

The model never imports this package; :class:`~nerf_lightning.callbacks.Viewer` and ``nerf-lightning
view`` use it. viser is an optional extra (``pip install 'nerf-lightning[viewer]'``): importing
:mod:`.session`, :mod:`.scene` or :mod:`.controls` needs it, :mod:`.cameras`, :mod:`.render` and
:mod:`.pacing` do not.
"""
