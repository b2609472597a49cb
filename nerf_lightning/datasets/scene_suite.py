"""The scene suite: procedural scenes that each stress one thing a training recipe may be tuned to.

``nerf-lightning data make-demo DIR --scene NAME [--resolution N] [--seed S]`` writes one; from Python,
``make_suite_scene(NAME, DIR)`` or ``SUITE[NAME].make(DIR)``. Every scene is rendered exactly by a
closed-form ray tracer (:mod:`.suite_render`; the demo's own for ``demo`` and ``offcentre``), written
in a format one of our loaders reads (:mod:`.suite_formats`), and passes ``nerf-lightning data
validate``. Its layout is fixed; the seed moves only the cameras, and the same seed gives
byte-identical files. ``--resolution`` is the longer image side (100, 200 and 400 are the sizes the
suite is meant for; any from 8 works).

=================  =======  ===========  ==========  ==================================================
name               kind     format       aabb_scale  file coordinates = scale * canonical + offset
=================  =======  ===========  ==========  ==================================================
demo               object   blender                  identity
thin               object   blender                  identity
texture            object   blender                  identity
specular           object   blender                  identity
offcentre          object   blender                  0.3, (2.5, -1.8, 0.9), turned 30 deg about z
workshop           object   blender                  identity
360                360      nerfstudio   16          7.5, (40, -25, 6), turned 20 deg
360-small          360      nerfstudio   2           0.3, (-1.2, 0.8, 0.45), turned -50 deg
tabletop           360      nerfstudio   32          0.43, (1.7, -2.9, 0.8), turned 115, tilted 48 deg
tabletop-poses     360      nerfstudio   32          as tabletop
tabletop-exposure  360      nerfstudio   32          as tabletop
garden             360      nerfstudio   8           12, (310, -120, 45), turned -140, tilted 75 deg
forward            forward  llff                     2.5, (12, -30, 1.7), turned 35 deg
forward-exposure   forward  llff                     as forward
=================  =======  ===========  ==========  ==================================================

What each one holds: :mod:`.suite_worlds` (``demo``: :mod:`.demo_scene`). ``offcentre`` is the demo
scene moved: the demo's images for the same seed, byte for byte, with the poses placed elsewhere, so a
recipe that does not depend on where a scene lies scores on it exactly what it scores on ``demo``.
``tabletop`` is what the other 360-degree scenes spare a recipe, as a phone capture has it: a partial
arc (:class:`~.suite_rigs.HandheldArc`) that is neither centred on the objects nor aimed at their
middle, frames looking off into an enclosing room, portrait images, and a file world whose up axis is
tilted (``Placement.tilt_degrees``), as structure-from-motion leaves it. ``garden`` was added after
the real-capture recipe was tuned, to be scored and not tuned on: other content (a square outdoors, near
walls on two sides and open sky on the others), a walk all the way round, landscape photos of a wider
lens, ``aabb_scale`` 8 and a file frame in centimetre-like units. ``workshop`` is the object scenes'
``garden``: added after the object recipe was tuned, to be scored and not tuned on, a model built of
many small parts as the standard object scenes are (a toy bulldozer of bricks on a studded plate).
``tabletop-poses`` is ``tabletop``'s images with the pose error structure-from-motion leaves on the
training views (:class:`~.suite_rigs.PoseError`: about a pixel per axis), its test views exact.
``tabletop-exposure`` is ``tabletop`` photographed with a phone's automatic exposure and white balance
(:class:`~.suite_rigs.Exposure`): each training photo brighter or darker by about a third of a stop and
a little warmer or cooler, its test views as rendered; ``forward-exposure`` is ``forward`` the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Literal, Protocol

from nerf_lightning.datasets.suite_formats import (
    BlenderRecipe,
    DemoRecipe,
    ForwardRecipe,
    HandheldRecipe,
    RingRecipe,
    WorldRenderer,
    demo_renderer,
)
from nerf_lightning.datasets.suite_rigs import Exposure, HandheldArc, Placement, PoseError
from nerf_lightning.datasets.suite_worlds import (
    GARDEN_CENTER,
    TABLETOP_CENTER,
    forward_world,
    garden_world,
    outdoor_world,
    specular_world,
    tabletop_world,
    texture_world,
    thin_world,
    workshop_world,
)

SceneKind = Literal["object", "360", "forward"]


class Recipe(Protocol):
    """How a scene is written (:mod:`.suite_formats`)."""

    @property
    def dataset_format(self) -> str: ...

    @property
    def placement(self) -> Placement: ...

    @property
    def aabb_scale(self) -> int | None: ...

    def make(self, out_dir: Path, resolution: int, seed: int) -> Path: ...


@dataclass(frozen=True)
class SuiteScene:
    """One scene of the suite.

    Attributes:
        name: its name (``--scene``).
        kind: ``object`` (transparent background, cameras around it), ``360`` (unbounded, cameras
            around, environment all around) or ``forward`` (every camera facing one way).
        description: one line: what it stresses.
        recipe: how it is written; ``dataset_format`` (the loader that reads it), ``placement`` (where
            the files put the canonical scene) and ``aabb_scale`` (instant-ngp's, or ``None``) come
            from it.
    """

    name: str
    kind: SceneKind
    description: str
    recipe: Recipe

    @property
    def dataset_format(self) -> str:
        return self.recipe.dataset_format

    @property
    def placement(self) -> Placement:
        return self.recipe.placement

    @property
    def aabb_scale(self) -> int | None:
        return self.recipe.aabb_scale

    def make(self, out_dir: str | Path, *, resolution: int = 100, seed: int = 0) -> Path:
        """Write the dataset to ``out_dir`` and return it (as a ``Path``).

        The files are written into a temporary folder beside ``out_dir`` and renamed into place when
        complete; an existing ``out_dir`` is replaced when it holds only scene files, else
        ``FileExistsError`` is raised.

        Args:
            out_dir: the dataset root to create.
            resolution: the longer image side in pixels.
            seed: moves the cameras; the same seed gives byte-identical files.
        """
        return self.recipe.make(Path(out_dir), resolution, seed)


PHONE_EXPOSURE = Exposure(stops=0.33, white_balance=0.05)
"""The spread of a phone's automatic exposure and white balance over a capture's photos
(``tabletop-exposure``, ``forward-exposure``)."""

_TABLETOP = HandheldRecipe(tabletop_world, Placement(0.43, (1.7, -2.9, 0.8), 115.0, 48.0, 200.0),
                           HandheldArc(center=TABLETOP_CENTER), ngp_center=TABLETOP_CENTER, ngp_scale=1.85,
                           aabb_scale=32)

_FORWARD = ForwardRecipe(forward_world, Placement(2.5, (12.0, -30.0, 1.7), 35.0))

_SCENES = [
    SuiteScene("demo", "object", "the embedded demo scene: small content spread through the box, rods "
               "2-3 px wide, stripes and checkers", DemoRecipe()),
    SuiteScene("thin", "object", "thin structures: wires and a grating from 3 px to well under a pixel "
               "wide at 100 px", BlenderRecipe(WorldRenderer(thin_world))),
    SuiteScene("texture", "object", "high-frequency texture: stripes, checkers, colour cells and a zone "
               "plate up to beyond 400 px's Nyquist limit", BlenderRecipe(WorldRenderer(texture_world))),
    SuiteScene("specular", "object", "view-dependent colour: Blinn-Phong highlights and mirror-like "
               "reflections of a sky", BlenderRecipe(WorldRenderer(specular_world))),
    SuiteScene("offcentre", "object", "placement: the demo's images with the scene scaled by 0.3 and "
               "moved 3.2 units off the origin",
               BlenderRecipe(demo_renderer, Placement(0.3, (2.5, -1.8, 0.9), 30.0))),
    SuiteScene("workshop", "object", "a model of many small parts: a toy bulldozer of bricks on a studded "
               "plate, studs 2 px and rods under a pixel wide, dark and glossy parts, held out from tuning",
               BlenderRecipe(WorldRenderer(workshop_world))),
    SuiteScene("360", "360", "unbounded 360-degree capture: a far environment dome, aabb_scale 16, "
               "rig off-centre at metre scale", RingRecipe(partial(outdoor_world, 15.0, 4.0),
                                                             Placement(7.5, (40.0, -25.0, 6.0), 20.0), 16)),
    SuiteScene("360-small", "360", "bounded 360-degree capture: a near dome, aabb_scale 2, rig "
               "off-centre at a small scale", RingRecipe(partial(outdoor_world, 1.9, 1.5),
                                                         Placement(0.3, (-1.2, 0.8, 0.45), -50.0), 2)),
    SuiteScene("tabletop", "360", "a phone capture of objects on a table in a room: a 200-degree "
               "hand-held arc, pitched down, rolled, aimed beside the objects; up tilted 48 degrees, "
               "aabb_scale 32",
               _TABLETOP),
    SuiteScene("tabletop-poses", "360", "tabletop with the pose error structure-from-motion leaves: each "
               "training view's recorded camera turned and moved by about a pixel",
               replace(_TABLETOP, pose_error=PoseError(1.0, 1.0, TABLETOP_CENTER))),
    SuiteScene("tabletop-exposure", "360", "tabletop through a phone's automatic exposure and white "
               "balance: each training photo a third of a stop brighter or darker and a little warmer "
               "or cooler (normal, seeded)",
               replace(_TABLETOP, exposure=PHONE_EXPOSURE)),
    SuiteScene("garden", "360", "a phone walked all the way round a statue in a small square: near walls "
               "on two sides, open sky on the others, landscape photos, aabb_scale 8, held out from tuning",
               HandheldRecipe(garden_world, Placement(12.0, (310.0, -120.0, 45.0), -140.0, 75.0, 30.0),
                              HandheldArc(frames=72, center=GARDEN_CENTER, arc_degrees=340.0,
                                          distance=(1.6, 2.3), height=(0.15, 0.7), aim_offset=0.2,
                                          aim_jitter=0.04, start_away=((35.0, 12.0),),
                                          end_away=((-40.0, 15.0),)),
                              ngp_center=GARDEN_CENTER, ngp_scale=0.6, aabb_scale=8, aspect=0.75, focal=0.8,
                              principal=(0.51, 0.488))),
    SuiteScene("forward", "forward", "forward-facing capture: a wall and objects at depths 1.1 to 5, "
               "cameras on a jittered grid", _FORWARD),
    SuiteScene("forward-exposure", "forward", "forward through a phone's automatic exposure and white "
               "balance: each training photo about a third of a stop brighter or darker, a little warmer or "
               "cooler", replace(_FORWARD, exposure=PHONE_EXPOSURE)),
]

SUITE: Mapping[str, SuiteScene] = MappingProxyType({scene.name: scene for scene in _SCENES})
"""The scenes by name (``demo`` first, then the object, 360-degree and forward-facing scenes)."""


def make_suite_scene(name: str, out_dir: str | Path, *, resolution: int = 100, seed: int = 0) -> Path:
    """Write scene ``name`` of :data:`SUITE` to ``out_dir`` and return it.

    Raises:
        KeyError: an unknown name (the message lists the known ones).
    """
    if name not in SUITE:
        raise KeyError(f"unknown scene {name!r}; expected one of {', '.join(SUITE)}")
    return SUITE[name].make(out_dir, resolution=resolution, seed=seed)
