"""What each scene of the suite holds, in its canonical frame (world ``+z`` up).

Object scenes (:func:`thin_world`, :func:`texture_world`, :func:`specular_world`,
:func:`workshop_world`) keep the demo's frame: everything lies within ``CONTENT_RADIUS`` (1.45) of the
origin, which the demo's cameras (4 units away, Blender's field of view) frame exactly. There one pixel
of a 100 px image spans about 0.029 units at the origin (0.0072 at 400 px); sizes below are chosen
against that.

The 360-degree world (:func:`outdoor_world`) stands on a ground disc at ``z = 0`` under a dome (the
environment) centred at the origin; its cameras circle at about 1 unit from ``(0, 0, 0.15)``. The
forward-facing world (:func:`forward_world`) is seen from near the origin looking along ``+y``: a
back wall at ``y = 5``, a floor at ``z = -0.9`` and objects between depths 1.1 and 4.5. The tabletop
world (:func:`tabletop_world`) is in metres: objects on a table top at ``z = 0`` inside a closed room a
few metres across, which its hand-held cameras (about 0.6 to 0.9 m from the objects) stand in. The
garden world (:func:`garden_world`) is in metres too: a plinth and street furniture on paving at
``z = 0``, a house front and a hedge on two sides, trees, and open sky under a far dome elsewhere.

Each function builds its world once per process (they are cached); the layout is fixed, seeds only
move the cameras.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

from nerf_lightning.datasets.demo_shapes import Array, Capsule, OrientedBox, Sphere, _rotation
from nerf_lightning.datasets.suite_render import EMISSIVE, Material, Part, World
from nerf_lightning.datasets.suite_shapes import (
    Checker,
    Disc,
    Dome,
    HashCells,
    Painted,
    PolarCells,
    Sky,
    Stripes,
    Surface,
    Wall,
    ZonePlate,
    box_edges,
    helix,
    polyline,
)

v = np.array

SKY = Sky(zenith=v([0.25, 0.45, 0.9]), horizon=v([0.95, 0.85, 0.7]), ground=v([0.35, 0.3, 0.25]))
"""The environment of the 360-degree scenes, and what mirror-like surfaces reflect."""

PALETTE = v([[0.9, 0.3, 0.2], [0.95, 0.8, 0.3], [0.25, 0.6, 0.35], [0.2, 0.4, 0.85], [0.85, 0.85, 0.8],
             [0.15, 0.15, 0.2], [0.6, 0.3, 0.7]])
EARTH = v([[0.45, 0.38, 0.28], [0.6, 0.52, 0.38], [0.35, 0.42, 0.25], [0.55, 0.55, 0.5], [0.3, 0.27, 0.22],
           [0.7, 0.62, 0.45]])


def _unit(x: Array) -> Array:
    return x / np.linalg.norm(x)


def _frame_facing(normal: Array) -> Array:
    """``[3, 3]`` rotation whose local ``z`` is ``normal`` (local ``x`` horizontal)."""
    z = _unit(normal)
    x = _unit(np.cross(v([0.0, 0.0, 1.0]), z))
    return np.stack([x, np.cross(z, x), z], axis=1)


def _lambert(*surfaces: Surface) -> list[Part]:
    return [Part(surface) for surface in surfaces]


@cache
def thin_world() -> World:
    """Wires from about 3 px down to well under a pixel wide at 100 px (radii 0.04 to 0.007).

    A cube's 12 edges (radius 0.02, 1.4 px) with its 4 body diagonals (0.01), a coil of 42 segments
    (0.015), a fan of six wires from a small hub, radii 0.04 to 0.007, and a grating of eight
    parallel wires (radius 0.008) 0.06 apart, which only resolves at 200 px and up.
    """
    cube_rotation = _rotation("z", 25.0) @ _rotation("x", 15.0)
    center, half = v([0.15, -0.1, 0.05]), 0.5
    parts = box_edges(center, half, cube_rotation, 0.02, v([1.0, 0.55, 0.15]))
    for sx, sy in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
        corner = cube_rotation @ (half * v([sx, sy, 1.0]))
        parts.append(Capsule(a=center + corner, b=center - corner, radius=0.01, color=v([0.2, 0.8, 0.9])))
    parts += helix(v([-0.75, 0.5, -0.7]), 0.2, 1.3, 3.5, 42, 0.015, v([0.85, 0.25, 0.75]))
    hub = v([0.75, -0.65, -0.75])
    along = v([1.0, 1.0, 0.0]) / math.sqrt(2.0)
    radii = (0.04, 0.028, 0.02, 0.014, 0.01, 0.007)
    for angle, radius in zip(np.radians(np.linspace(50.0, 130.0, 6)), radii, strict=True):
        tip = hub + 1.1 * (math.cos(angle) * along + math.sin(angle) * v([0.0, 0.0, 1.0]))
        parts.append(Capsule(a=hub, b=tip, radius=radius, color=v([0.95, 0.9, 0.3])))
    parts += [Capsule(a=v([x, 0.75, -0.3]), b=v([x, 0.75, 0.3]), radius=0.008, color=v([0.9, 0.9, 0.9]))
              for x in 0.3 + 0.06 * np.arange(8)]
    return World(parts=(*_lambert(*parts), Part(Sphere(center=hub, radius=0.06, color=v([0.5, 0.5, 0.55])))),
                 sky=SKY)


@cache
def texture_world() -> World:
    """Surface detail from 3 px per period at 100 px down to beyond the Nyquist limit at 400 px.

    Fine sinusoidal stripes (period 0.08) on a big sphere, random colour cells (0.05) on a box, a
    finer 3D checker (0.04) on a sphere, a barber-pole capsule (stripes of period 0.04) and a card
    carrying a zone plate whose frequency grows to 30 cycles per unit at its rim.
    """
    box_rotation = _rotation("z", 30.0) @ _rotation("x", 15.0)
    card_center = v([0.45, 0.55, 0.3])
    card_rotation = _frame_facing(card_center)
    pole_a, pole_b = v([-0.6, -0.7, -0.7]), v([-0.6, -0.7, 0.5])
    surfaces = [
        Painted(Sphere(center=v([0.05, -0.1, 0.1]), radius=0.5, color=v([1.0, 1.0, 1.0])),
                Stripes(_unit(v([0.3, 0.5, 0.8])), 0.08, v([0.95, 0.75, 0.2]), v([0.15, 0.2, 0.6]))),
        Painted(OrientedBox(center=v([-0.75, 0.55, -0.35]), half_extents=v([0.3, 0.2, 0.25]),
                            rotation=box_rotation, color=v([1.0, 1.0, 1.0])),
                HashCells(0.05, PALETTE), v([-0.75, 0.55, -0.35]), box_rotation),
        Painted(Sphere(center=v([0.7, -0.65, -0.5]), radius=0.3, color=v([1.0, 1.0, 1.0])),
                Checker(0.04, v([0.9, 0.9, 0.85]), v([0.6, 0.1, 0.1]))),
        Painted(Capsule(a=pole_a, b=pole_b, radius=0.06, color=v([1.0, 1.0, 1.0])),
                Stripes(_unit(v([0.0, 0.3, 1.0])), 0.04, v([0.9, 0.9, 0.9]), v([0.8, 0.1, 0.15]))),
        Painted(OrientedBox(center=card_center, half_extents=v([0.42, 0.42, 0.015]), rotation=card_rotation,
                            color=v([1.0, 1.0, 1.0])),
                ZonePlate(math.pi * 30.0 / 0.42, v([0.95, 0.95, 0.95]), v([0.1, 0.1, 0.1])),
                card_center, card_rotation),
    ]
    return World(parts=tuple(_lambert(*surfaces)), sky=SKY)


GLOSSY = Material(specular=0.7, shininess=40.0)
CHROME = Material(ambient=0.2, diffuse=0.2, specular=0.6, shininess=200.0, mirror=0.8)


@cache
def specular_world() -> World:
    """View-dependent surfaces: a glossy red sphere (Blinn-Phong highlight, shininess 40), a
    mirror-like sphere and rod reflecting :data:`SKY`, a glossy checkered box (shininess 16), and
    a matte sphere (the view-independent reference)."""
    box_center, box_rotation = v([-0.55, -0.6, -0.5]), _rotation("z", -20.0)
    parts = [
        Part(Sphere(center=v([0.35, -0.35, 0.0]), radius=0.45, color=v([0.85, 0.15, 0.1])), GLOSSY),
        Part(Sphere(center=v([-0.5, 0.45, 0.1]), radius=0.4, color=v([0.8, 0.8, 0.8])), CHROME),
        Part(Painted(OrientedBox(center=box_center, half_extents=v([0.25, 0.2, 0.18]), rotation=box_rotation,
                                 color=v([1.0, 1.0, 1.0])),
                     Checker(0.1, v([0.3, 0.75, 0.4]), v([0.1, 0.3, 0.15])), box_center, box_rotation),
             Material(specular=0.5, shininess=16.0)),
        Part(Sphere(center=v([0.65, 0.6, 0.45]), radius=0.25, color=v([0.3, 0.75, 0.35]))),
        Part(Capsule(a=v([0.9, -0.2, -0.8]), b=v([0.9, -0.2, 0.6]), radius=0.05, color=v([0.8, 0.8, 0.8])),
             CHROME),
    ]
    return World(parts=tuple(parts), sky=SKY)


@cache
def outdoor_world(dome_radius: float, pillar_ring: float) -> World:
    """Objects on a tiled ground disc under an emissive dome of ``dome_radius``; eight pillars on a
    ring of ``pillar_ring`` stand between the cameras and the dome (parallax at mid distance).

    The disc reaches the dome, so every ray from a camera above it hits the ground, an object or the
    dome. Near the middle (within 0.55): a striped sphere, a checkered box, a tower of colour cells,
    a thin pole with a ball and two pebbles.
    """
    up = v([0.0, 0.0, 1.0])
    tower_rotation, block = _rotation("z", 20.0), v([-0.3, 0.22, 0.14])
    parts = [
        Part(Painted(Dome(center=np.zeros(3), radius=dome_radius), SKY), EMISSIVE),
        Part(Painted(Disc(center=np.zeros(3), normal_vector=up, radius=dome_radius),
                     PolarCells(inner=1.0, growth=0.1, palette=EARTH))),
        *_lambert(
            Painted(Sphere(center=v([0.05, -0.1, 0.2]), radius=0.2, color=v([1.0, 1.0, 1.0])),
                    Stripes(_unit(v([0.2, 0.3, 0.9])), 0.07, v([0.95, 0.8, 0.25]), v([0.2, 0.3, 0.8]))),
            Painted(OrientedBox(center=block, half_extents=v([0.14, 0.2, 0.14]), rotation=tower_rotation,
                                color=v([1.0, 1.0, 1.0])),
                    Checker(0.07, v([0.9, 0.9, 0.9]), v([0.2, 0.5, 0.3])), block, tower_rotation),
            Painted(OrientedBox(center=v([0.25, 0.28, 0.27]), half_extents=v([0.08, 0.08, 0.27]),
                                rotation=tower_rotation, color=v([1.0, 1.0, 1.0])),
                    HashCells(0.04, PALETTE)),
            Capsule(a=v([0.4, -0.25, 0.0]), b=v([0.4, -0.25, 0.45]), radius=0.025, color=v([0.8, 0.8, 0.85])),
            Sphere(center=v([0.4, -0.25, 0.5]), radius=0.07, color=v([0.9, 0.2, 0.15])),
            Sphere(center=v([-0.1, -0.4, 0.06]), radius=0.06, color=v([0.6, 0.3, 0.7])),
            Sphere(center=v([-0.45, -0.05, 0.06]), radius=0.06, color=v([0.2, 0.6, 0.8])),
        ),
    ]
    width, height = 0.035 * pillar_ring, 0.35 * pillar_ring
    for k in range(8):
        angle = math.radians(10.0 + 45.0 * k)
        foot = pillar_ring * v([math.cos(angle), math.sin(angle), 0.0])
        parts += _lambert(Capsule(a=foot, b=foot + height * up, radius=width, color=PALETTE[k % 4]),
                          Sphere(center=foot + (height + 2.0 * width) * up, radius=2.2 * width,
                                 color=PALETTE[4 + k % 3]))
    return World(parts=tuple(parts), sky=SKY)


@cache
def forward_world() -> World:
    """A wall of colour cells at ``y = 5`` over a checkered floor at ``z = -0.9``, and objects at depths
    about 1.1 (a small ball), 1.6 (a thin pole), 2.2 (a striped sphere), 3.0 (a box of colour cells
    and a slanting rod) and 3.9 (a checkered sphere). Every ray of a camera facing ``+y`` hits the wall
    if nothing nearer."""
    box_center, box_rotation = v([0.8, 3.0, -0.5]), _rotation("z", 30.0)
    surfaces = [
        Painted(Wall(point=v([0.0, 5.0, 0.0]), normal_vector=v([0.0, -1.0, 0.0])), HashCells(0.2, PALETTE)),
        Painted(Wall(point=v([0.0, 0.0, -0.9]), normal_vector=v([0.0, 0.0, 1.0])),
                Checker(0.3, v([0.85, 0.82, 0.75]), v([0.35, 0.3, 0.28]))),
        Sphere(center=v([-0.3, 1.25, 0.3]), radius=0.12, color=v([0.95, 0.85, 0.2])),
        Capsule(a=v([0.35, 1.6, -0.9]), b=v([0.35, 1.6, 0.45]), radius=0.035, color=v([0.85, 0.3, 0.75])),
        Painted(Sphere(center=v([-0.65, 2.2, -0.45]), radius=0.35, color=v([1.0, 1.0, 1.0])),
                Stripes(_unit(v([0.5, 0.2, 0.8])), 0.1, v([0.9, 0.55, 0.15]), v([0.15, 0.35, 0.7]))),
        Painted(OrientedBox(center=box_center, half_extents=v([0.3, 0.3, 0.4]), rotation=box_rotation,
                            color=v([1.0, 1.0, 1.0])),
                HashCells(0.08, PALETTE), box_center, box_rotation),
        *polyline([v([-1.5, 2.8, 0.6]), v([-0.3, 3.2, 0.8])], 0.05, v([0.3, 0.8, 0.9])),
        Painted(Sphere(center=v([0.1, 3.9, 0.35]), radius=0.55, color=v([1.0, 1.0, 1.0])),
                Checker(0.12, v([0.9, 0.9, 0.9]), v([0.2, 0.25, 0.6]))),
    ]
    return World(parts=tuple(_lambert(*surfaces)), sky=SKY)


ROOM = (-2.4, 4.0, -3.4, 2.3, -0.75, 1.75)
"""The tabletop scene's room: ``x`` from -2.4 to 4.0 m, ``y`` from -3.4 to 2.3, floor and ceiling
heights (the table top is ``z = 0``): 6.4 x 5.7 x 2.5 m, the table well off its middle."""

TABLETOP_CENTER = (0.0, 0.0, 0.12)
"""The middle of the objects on the table (``tabletop_world``); they all lie within 0.24 of it per axis."""

WALL_PALETTE = v([[0.86, 0.82, 0.74], [0.78, 0.74, 0.66], [0.9, 0.88, 0.84], [0.7, 0.72, 0.7],
                  [0.82, 0.7, 0.6], [0.62, 0.66, 0.74]])
WOOD = (v([0.62, 0.42, 0.24]), v([0.42, 0.26, 0.14]))


@cache
def tabletop_objects() -> tuple[Surface, ...]:
    """What stands on the tabletop scene's table (:func:`tabletop_world`), within 0.24 of
    :data:`TABLETOP_CENTER` per axis: a striped ball, a cereal box of colour cells, a bottle, a
    checkered book, a mug and two small fruit."""
    cereal_rotation, book_rotation = _rotation("z", 25.0), _rotation("z", -15.0)
    cereal, book = v([-0.14, 0.1, 0.12]), v([-0.06, -0.12, 0.015])
    return (
        Painted(Sphere(center=v([0.14, -0.12, 0.08]), radius=0.08, color=v([1.0, 1.0, 1.0])),
                Stripes(_unit(v([0.3, 0.2, 0.9])), 0.04, v([0.95, 0.8, 0.25]), v([0.2, 0.35, 0.8]))),
        Painted(OrientedBox(center=cereal, half_extents=v([0.08, 0.035, 0.12]), rotation=cereal_rotation,
                            color=v([1.0, 1.0, 1.0])), HashCells(0.03, PALETTE), cereal, cereal_rotation),
        Capsule(a=v([0.17, 0.15, 0.045]), b=v([0.17, 0.15, 0.17]), radius=0.045, color=v([0.25, 0.6, 0.35])),
        Capsule(a=v([0.17, 0.15, 0.17]), b=v([0.17, 0.15, 0.26]), radius=0.016, color=v([0.25, 0.6, 0.35])),
        Sphere(center=v([0.17, 0.15, 0.285]), radius=0.02, color=v([0.9, 0.2, 0.15])),
        Painted(OrientedBox(center=book, half_extents=v([0.11, 0.08, 0.015]), rotation=book_rotation,
                            color=v([1.0, 1.0, 1.0])),
                Checker(0.04, v([0.9, 0.88, 0.8]), v([0.6, 0.15, 0.2])), book, book_rotation),
        Capsule(a=v([0.02, 0.2, 0.04]), b=v([0.02, 0.2, 0.07]), radius=0.04, color=v([0.85, 0.85, 0.8])),
        Sphere(center=v([-0.21, -0.01, 0.03]), radius=0.03, color=v([0.95, 0.55, 0.1])),
        Sphere(center=v([0.2, 0.02, 0.03]), radius=0.03, color=v([0.6, 0.3, 0.7])),
    )


@cache
def tabletop_world() -> World:
    """Objects on a table in a room, in metres, as a phone capture of a desk or a kitchen table sees it.

    The table top (1.2 x 0.8 m, wood-grain stripes of period 0.06) lies at ``z = 0`` on four legs, its
    middle at the origin; on it, :func:`tabletop_objects`. Around it the room of :data:`ROOM`
    (one-sided walls facing in, so every ray from inside hits one): a checkered floor, walls of colour
    cells and of wallpaper stripes, a ceiling of large tiles, and furniture 2.2 to 3 m from the
    table's middle (a cabinet, a sofa, a floor lamp, a picture) for parallax behind it. Textures
    repeat over about 3 px or more at 100 px from where the cameras stand (0.6 to 0.9 m from the
    objects). Lambertian, as the other opaque scenes.
    """
    x0, x1, y0, y1, floor, ceiling = ROOM
    cabinet, sofa = v([3.2, -0.9, -0.25]), v([0.2, -2.75, -0.45])
    picture = v([0.4, 2.18, 0.7])
    walls = HashCells(0.3, WALL_PALETTE)
    room = [
        Painted(Wall(point=v([0.0, 0.0, floor]), normal_vector=v([0.0, 0.0, 1.0])),
                Checker(0.5, v([0.72, 0.66, 0.56]), v([0.5, 0.44, 0.36]))),
        Painted(Wall(point=v([0.0, 0.0, ceiling]), normal_vector=v([0.0, 0.0, -1.0])),
                Checker(0.6, v([0.95, 0.95, 0.92]), v([0.8, 0.8, 0.78]))),
        Painted(Wall(point=v([x0, 0.0, 0.0]), normal_vector=v([1.0, 0.0, 0.0])), walls),
        Painted(Wall(point=v([x1, 0.0, 0.0]), normal_vector=v([-1.0, 0.0, 0.0])),
                Stripes(v([0.0, 1.0, 0.0]), 0.15, v([0.92, 0.86, 0.7]), v([0.55, 0.62, 0.7]))),
        Painted(Wall(point=v([0.0, y0, 0.0]), normal_vector=v([0.0, 1.0, 0.0])), walls),
        Painted(Wall(point=v([0.0, y1, 0.0]), normal_vector=v([0.0, -1.0, 0.0])),
                Stripes(_unit(v([1.0, 0.0, 0.3])), 0.2, v([0.85, 0.8, 0.72]), v([0.6, 0.5, 0.45]))),
    ]
    furniture = [
        Painted(OrientedBox(center=cabinet, half_extents=v([0.3, 0.6, 0.5]), rotation=np.eye(3),
                            color=v([1.0, 1.0, 1.0])), HashCells(0.12, EARTH), cabinet),
        Painted(OrientedBox(center=sofa, half_extents=v([0.9, 0.35, 0.3]), rotation=np.eye(3),
                            color=v([1.0, 1.0, 1.0])),
                Checker(0.15, v([0.35, 0.45, 0.6]), v([0.25, 0.3, 0.42])), sofa),
        Capsule(a=v([-1.7, 1.5, floor]), b=v([-1.7, 1.5, 0.9]), radius=0.025, color=v([0.3, 0.3, 0.32])),
        Sphere(center=v([-1.7, 1.5, 1.05]), radius=0.18, color=v([0.95, 0.9, 0.7])),
        Painted(OrientedBox(center=picture, half_extents=v([0.45, 0.02, 0.3]), rotation=np.eye(3),
                            color=v([1.0, 1.0, 1.0])), HashCells(0.1, PALETTE), picture),
    ]
    table = [
        Painted(OrientedBox(center=v([0.0, 0.0, -0.025]), half_extents=v([0.6, 0.4, 0.025]),
                            rotation=np.eye(3), color=v([1.0, 1.0, 1.0])),
                Stripes(_unit(v([1.0, 0.12, 0.0])), 0.06, *WOOD)),
        *(Capsule(a=v([sx * 0.52, sy * 0.32, -0.05]), b=v([sx * 0.52, sy * 0.32, floor]), radius=0.03,
                  color=WOOD[1]) for sx in (-1.0, 1.0) for sy in (-1.0, 1.0)),
    ]
    return World(parts=tuple(_lambert(*room, *furniture, *table, *tabletop_objects())), sky=SKY)


GARDEN_CENTER = (0.0, 0.0, 0.5)
"""The middle of the garden's near content (:func:`garden_world`): all of it within 1.3 of it per axis."""

LEAVES = v([[0.2, 0.42, 0.18], [0.3, 0.55, 0.22], [0.15, 0.33, 0.16], [0.42, 0.58, 0.25], [0.25, 0.38, 0.12]])


@cache
def garden_world() -> World:
    """A small square outdoors, in metres: what a phone sees walked all the way round a statue.

    In the middle (within 1.3 of :data:`GARDEN_CENTER` per axis) a stone plinth with a checkered ball on
    it, a bench, a lamp post and a planter with a bush, on paving (a checker of 0.5 m) at ``z = 0``.
    A house front (colour cells of 0.35, a window grid's scale) stands 5 m away at ``y = 5`` and a
    hedge 6 m away at ``x = -6``; five trees stand 6 to 9 m out; elsewhere the paving reaches an
    emissive sky dome 40 m away. Near walls on two sides and open sky on the others: a recipe's scene
    box and contraction see both at once. Lambertian, as the other opaque scenes.
    """
    up = v([0.0, 0.0, 1.0])
    bench_rotation, planter = _rotation("z", 30.0), v([0.5, -0.85, 0.15])
    bench = v([0.95, 0.45, 0.42])
    plinth = v([0.0, 0.0, 0.35])
    near = [
        Painted(OrientedBox(center=plinth, half_extents=v([0.25, 0.25, 0.35]), rotation=np.eye(3),
                            color=v([1.0, 1.0, 1.0])), HashCells(0.08, EARTH), plinth),
        Painted(Sphere(center=v([0.0, 0.0, 0.98]), radius=0.28, color=v([1.0, 1.0, 1.0])),
                Checker(0.07, v([0.92, 0.9, 0.85]), v([0.55, 0.2, 0.15]))),
        Painted(OrientedBox(center=bench, half_extents=v([0.5, 0.17, 0.03]), rotation=bench_rotation,
                            color=v([1.0, 1.0, 1.0])), Stripes(_unit(v([0.0, 1.0, 0.0])), 0.05, *WOOD),
                bench, bench_rotation),
        *(Capsule(a=bench + bench_rotation @ v([sx * 0.42, sy * 0.12, -0.03]),
                  b=bench + bench_rotation @ v([sx * 0.42, sy * 0.12, -0.42]), radius=0.025,
                  color=v([0.2, 0.2, 0.22])) for sx in (-1.0, 1.0) for sy in (-1.0, 1.0)),
        Capsule(a=v([-0.75, -0.6, 0.0]), b=v([-0.75, -0.6, 1.5]), radius=0.03, color=v([0.15, 0.2, 0.18])),
        Sphere(center=v([-0.75, -0.6, 1.58]), radius=0.1, color=v([0.98, 0.92, 0.7])),
        Painted(OrientedBox(center=planter, half_extents=v([0.2, 0.2, 0.15]), rotation=np.eye(3),
                            color=v([1.0, 1.0, 1.0])),
                Stripes(_unit(v([1.0, 1.0, 0.0])), 0.06, v([0.75, 0.45, 0.3]), v([0.55, 0.3, 0.2]))),
        Painted(Sphere(center=v([0.5, -0.85, 0.48]), radius=0.2, color=v([1.0, 1.0, 1.0])),
                HashCells(0.04, LEAVES)),
    ]
    surroundings = [
        Painted(Wall(point=v([0.0, 5.0, 0.0]), normal_vector=v([0.0, -1.0, 0.0])),
                HashCells(0.35, WALL_PALETTE)),
        Painted(Wall(point=v([-6.0, 0.0, 0.0]), normal_vector=v([1.0, 0.0, 0.0])), HashCells(0.15, LEAVES)),
    ]
    for k, (x, y, crown) in enumerate([(6.5, -2.0, 1.0), (4.0, -6.0, 1.2), (-2.5, -7.5, 0.9),
                                       (7.5, 3.0, 1.1), (-4.5, -4.0, 0.8)]):
        foot = v([x, y, 0.0])
        surroundings += [
            Capsule(a=foot, b=foot + 2.4 * up, radius=0.12, color=v([0.35, 0.25, 0.18])),
            Painted(Sphere(center=foot + (2.4 + 0.8 * crown) * up, radius=crown, color=v([1.0, 1.0, 1.0])),
                    HashCells(0.2 + 0.05 * k, LEAVES)),
        ]
    parts = [
        Part(Painted(Dome(center=np.zeros(3), radius=40.0), SKY), EMISSIVE),
        *_lambert(Painted(Disc(center=np.zeros(3), normal_vector=up, radius=40.0),
                          Checker(0.5, v([0.68, 0.66, 0.62]), v([0.5, 0.48, 0.46]))),
                  *surroundings, *near),
    ]
    return World(parts=tuple(parts), sky=SKY)


YELLOW = v([0.95, 0.72, 0.08])
DARK_GREY = v([0.22, 0.22, 0.24])
WINDOW = Material(ambient=0.15, diffuse=0.3, specular=0.6, shininess=60.0)


def _plain_box(center: Array, half_extents: Array, rotation: Array, color: Array) -> OrientedBox:
    """A box of one colour (the demo's boxes carry a checker)."""
    return OrientedBox(center=center, half_extents=half_extents, rotation=rotation, color=color, cell=1.0,
                       checker_dark=1.0)


@cache
def workshop_world() -> World:
    """A toy bulldozer of plastic bricks on a studded base plate, in the demo's frame: what a standard
    object scene (a model built of many small parts) holds and the tuned object scenes do not.

    Parts of every size at once: a base plate (1.9 by 1.4, rotated 10 degrees) with 26 studs about
    2 px wide at 100 px, dark tracks with a tread checker, a yellow body and cab, dark glossy windows,
    a roll cage and a ladder of rods under a pixel wide (radius 0.012 and 0.01), two arms and a blade
    with hazard stripes, a red warning light, a mirror-like exhaust and a stack of loose bricks.
    Dark greys next to saturated yellow, concave corners and parts hiding each other from most views.
    Added after the object recipe was tuned, to be scored and not tuned on.
    """
    plate_rotation = _rotation("z", 10.0)
    plate_center = v([0.0, 0.0, -0.6])

    def on_plate(x: float, y: float, z: float) -> Array:
        return plate_center + plate_rotation @ v([x, y, z])

    plate_top = 0.04
    bricks: list[Surface] = [_plain_box(plate_center, half_extents=v([0.95, 0.7, plate_top]),
                                        rotation=plate_rotation, color=v([0.42, 0.44, 0.46]))]
    for x in np.linspace(-0.84, 0.84, 9):
        for y in np.linspace(-0.6, 0.6, 6):
            if abs(x) < 0.7 and abs(y) < 0.45:  # under the bulldozer
                continue
            base = on_plate(x, y, plate_top)
            bricks.append(Capsule(a=base, b=base + v([0.0, 0.0, 0.025]), radius=0.03,
                                  color=v([0.42, 0.44, 0.46])))
    body_rotation = plate_rotation @ _rotation("z", -25.0)

    def on_body(x: float, y: float, z: float) -> Array:
        return on_plate(0.0, 0.0, 0.0) + body_rotation @ v([x, y, z])

    for side in (-1.0, 1.0):
        bricks += [
            OrientedBox(center=on_body(0.0, side * 0.33, 0.16), half_extents=v([0.52, 0.09, 0.11]),
                        rotation=body_rotation, color=v([0.3, 0.3, 0.32]), cell=0.06, checker_dark=0.45),
            Sphere(center=on_body(0.44, side * 0.43, 0.16), radius=0.07, color=YELLOW),
            Sphere(center=on_body(-0.44, side * 0.43, 0.16), radius=0.07, color=YELLOW),
        ]
        bricks += polyline([on_body(0.25, side * 0.2, 0.42), on_body(0.62, side * 0.24, 0.45),
                            on_body(0.84, side * 0.24, 0.25)], 0.035, YELLOW)
    bricks += [
        _plain_box(on_body(0.0, 0.0, 0.4), half_extents=v([0.45, 0.26, 0.14]),
                   rotation=body_rotation, color=YELLOW),
        _plain_box(on_body(-0.2, 0.0, 0.72), half_extents=v([0.2, 0.22, 0.18]),
                   rotation=body_rotation, color=YELLOW),
        Sphere(center=on_body(-0.2, 0.0, 0.94), radius=0.05, color=v([0.9, 0.12, 0.08])),
    ]
    for sx in (-1.0, 1.0):  # the roll cage's posts and frame over the cab
        for sy in (-1.0, 1.0):
            bricks.append(Capsule(a=on_body(-0.2 + sx * 0.18, sy * 0.2, 0.9),
                                  b=on_body(-0.2 + sx * 0.18, sy * 0.2, 1.08), radius=0.012, color=DARK_GREY))
    bricks += polyline([on_body(-0.38, -0.2, 1.08), on_body(-0.02, -0.2, 1.08), on_body(-0.02, 0.2, 1.08),
                        on_body(-0.38, 0.2, 1.08), on_body(-0.38, -0.2, 1.08)], 0.012, DARK_GREY)
    for rail in (-0.1, 0.1):  # a ladder up the body's back
        bricks.append(Capsule(a=on_body(-0.47, rail, 0.26), b=on_body(-0.47, rail, 0.62), radius=0.01,
                              color=DARK_GREY))
    bricks += [Capsule(a=on_body(-0.47, -0.1, z), b=on_body(-0.47, 0.1, z), radius=0.01, color=DARK_GREY)
               for z in (0.32, 0.42, 0.52)]
    blade_rotation = body_rotation @ _rotation("y", 15.0)
    blade_center = on_body(0.9, 0.0, 0.2)
    stack = on_plate(-0.72, 0.48, plate_top)
    bricks += [
        Painted(OrientedBox(center=blade_center, half_extents=v([0.04, 0.42, 0.13]), rotation=blade_rotation,
                            color=v([1.0, 1.0, 1.0])),
                Stripes(_unit(v([0.0, 1.0, 1.0])), 0.09, YELLOW, v([0.12, 0.12, 0.12])), blade_center,
                blade_rotation),
        _plain_box(stack + v([0.0, 0.0, 0.07]), half_extents=v([0.16, 0.08, 0.07]),
                   rotation=plate_rotation, color=v([0.85, 0.15, 0.12])),
        _plain_box(stack + v([0.02, 0.0, 0.2]), half_extents=v([0.08, 0.16, 0.06]),
                   rotation=plate_rotation @ _rotation("z", 20.0), color=v([0.15, 0.35, 0.85])),
    ]

    def window(x: float, y: float, half: Array) -> Part:
        return Part(_plain_box(on_body(x, y, 0.76), half_extents=half, rotation=body_rotation,
                               color=v([0.1, 0.12, 0.16])), WINDOW)

    windows = [window(-0.2 + 0.201 * sx, 0.0, v([0.005, 0.17, 0.1])) for sx in (-1.0, 1.0)]
    windows += [window(-0.2, 0.221 * sy, v([0.15, 0.005, 0.1])) for sy in (-1.0, 1.0)]
    exhaust = Part(Capsule(a=on_body(0.3, 0.14, 0.54), b=on_body(0.3, 0.14, 0.85), radius=0.03,
                           color=v([0.75, 0.75, 0.78])), CHROME)
    return World(parts=(*_lambert(*bricks), *windows, exhaust), sky=SKY)
