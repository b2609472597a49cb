"""Where a field's encoding looks: world positions mapped into the unit cube, with or without
scene contraction (mip-NeRF 360).

Without contraction (``"none"``) the scene box is stretched over ``[0, 1]^3`` and positions outside
it are clamped onto its faces: right for object scenes whose content the box holds. Real captures
see past any box (walls, sky, the far side of a room), and clamping smears that background onto
the box's faces. Contraction keeps the box as the inner region at full resolution and maps all of
space beyond it into a bounded shell:

    x = box coordinates, the box being [-1, 1]^3
    contract(x) = x                              if ||x|| <= 1
                = (2 - 1 / ||x||) * x / ||x||    otherwise           (so ||contract(x)|| < 2)

with ``||.||`` the Euclidean norm (``"l2"``, mip-NeRF 360: a ball-shaped shell) or the maximum norm
(``"linf"``, nerfacto: the box grows into a cube twice its size, so the inner box keeps its
axis-aligned faces and a grid's cells stay aligned with them). The contracted cube ``[-2, 2]^3`` is
then mapped onto ``[0, 1]^3``: the inner box takes the middle half of each axis.

Pure torch, shared by the training fields and samplers and by their exported twins (the same code
is traced by ``torch.export`` and compiled by ``torch.jit.script``).
"""

from __future__ import annotations

import torch
from torch import Tensor

CONTRACTIONS = ("none", "l2", "linf")
"""The accepted values of a ``contraction`` option."""


def check_contraction(contraction: str) -> str:
    """``contraction`` if it is one of :data:`CONTRACTIONS`, else a ``ValueError`` naming the parameter
    (the constructor's ``contraction``; the config layer adds which class and config key it belongs to)."""
    if contraction not in CONTRACTIONS:
        raise ValueError(f"contraction must be one of {', '.join(CONTRACTIONS)}, got {contraction!r}")
    return contraction


def contract(x: Tensor, contraction: str) -> Tensor:
    """``[S, 3]`` box coordinates (the box is ``[-1, 1]^3``) contracted into ``(-2, 2)^3``.

    ``contraction`` is ``"l2"`` or ``"linf"`` (see the module docstring); inside the box the map is
    the identity. Gradients are finite everywhere (also at the origin).
    """
    if contraction == "l2":
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    else:
        norm = x.abs().amax(dim=-1, keepdim=True)
    # Clamped at 1, the outer formula is the identity inside the box: one expression, no `where`
    # whose unused branch could put 0/0 into the gradient near the origin.
    scale = norm.clamp_min(1.0)
    return (2.0 - 1.0 / scale) * (x / scale)


def positions_to_unit_cube(positions: Tensor, bounds: Tensor, contraction: str) -> Tensor:
    """``[S, 3]`` world positions mapped to ``[0, 1]^3`` over the scene box ``bounds [2, 3]``.

    ``"none"``: the box spans the cube and positions outside are clamped onto it. ``"l2"`` or
    ``"linf"``: the box spans ``[0.25, 0.75]^3`` and everything beyond it the rest (contracted).
    """
    lower = bounds[0]
    upper = bounds[1]
    if contraction == "none":
        return ((positions - lower) / (upper - lower)).clamp(0.0, 1.0)
    box = (positions - 0.5 * (lower + upper)) / (0.5 * (upper - lower))
    return (contract(box, contraction) * 0.25 + 0.5).clamp(0.0, 1.0)
