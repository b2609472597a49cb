"""Marching steps that grow with distance (nerfacc's ``cone_angle``): a map between distance and step number.

A fixed step ``s`` puts ``(far - near) / s`` steps on a ray: right inside a scene box, thousands for
rays that run through the grids of an unbounded scene, whose outer levels are coarse anyway. With a
cone angle ``c`` the step that starts at distance ``t`` is ``max(s, c t)`` long (a pixel's footprint
widens with distance, and so may the step): constant up to ``t_s = s / c``, then growing by the
factor ``1 + c`` from step to step, so a ray needs only logarithmically many steps in its length.

Both are one monotone map ``u(t)`` from distance to (fractional) step number, a step being a unit
interval of ``u``:

    u(t) = t / s                                  for t <= t_s
         = 1 / c + log(t / t_s) / log(1 + c)      beyond (the step from t to (1 + c) t is c t long)

and its inverse :func:`step_distance`; ``c = 0`` is the fixed step, ``u = t / s``.

A ray's *lattice* is its sequence of steps, shifted by a per-ray offset (:func:`lattice_origin`). With
fixed steps it is kept in distances, ``o + k s``; with growing ones in step numbers, ``t(a + k)``.
Pure torch: the exported marcher calls these very functions (``torch.export`` traces them,
``torch.jit.script`` compiles them).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def step_number(t: Tensor, step_size: float, cone_angle: float) -> Tensor:
    """``u(t)``, the step number at distances ``t [...]`` (any shape), for the smallest step
    ``step_size`` (world units) and ``cone_angle`` (``0``: fixed steps)."""
    if cone_angle <= 0.0:
        return t / step_size
    switch = step_size / cone_angle
    # Clamped so that the unused branch of `where` stays finite (log of 0 at t = 0).
    grown = 1.0 / cone_angle + torch.log(t.clamp_min(switch) / switch) / math.log1p(cone_angle)
    return torch.where(t <= switch, t / step_size, grown)


def step_distance(u: Tensor, step_size: float, cone_angle: float) -> Tensor:
    """``t(u)``, the distance at step numbers ``u [...]``: the inverse of :func:`step_number`."""
    if cone_angle <= 0.0:
        return u * step_size
    switch = step_size / cone_angle
    # Clamped above 1 / c, exp only sees the grown branch's own range (no overflow from huge u
    # on the linear side, none from negative u).
    beyond = (u.clamp_min(1.0 / cone_angle) - 1.0 / cone_angle) * math.log1p(cone_angle)
    return torch.where(u <= 1.0 / cone_angle, u * step_size, switch * torch.exp(beyond))


def steps_within(length: float, step_size: float, cone_angle: float) -> int:
    """An upper bound on the steps of a ray lattice that overlap ``[near, near + length]``, for any
    ``near >= 0`` and any lattice offset (the march's static step count).

    ``u'(t)`` is at most ``v(t) = min(1 / (t_s L), 1 / (t L))`` with ``L = log(1 + c)``, which does
    not increase, so ``u(near + length) - u(near)`` is at most the integral of ``v`` over
    ``[0, length]``; the lattice's half-open ends add two steps.
    """
    if cone_angle <= 0.0:
        span = length / step_size
    else:
        switch, rate = step_size / cone_angle, math.log1p(cone_angle)
        span = length / (switch * rate) if length <= switch else (1.0 + math.log(length / switch)) / rate
    return math.ceil(span) + 2


def lattice_origin(near: Tensor, offsets: Tensor, step_size: float, cone_angle: float) -> Tensor:
    """``[R]`` where each ray's step ``0`` begins, ``1 - offsets [R]`` (in ``(0, 1]``) steps before its
    ``near [R]``: a distance ``o`` for fixed steps, a step number ``a`` for growing ones."""
    if cone_angle <= 0.0:
        return near + (offsets - 1.0) * step_size
    return step_number(near, step_size, cone_angle) + offsets - 1.0


def lattice_end(origin: Tensor, num_steps: int, step_size: float, cone_angle: float) -> Tensor:
    """``[R]`` distance where step ``num_steps`` of lattices starting at ``origin [R]`` begins."""
    if cone_angle <= 0.0:
        return origin + num_steps * step_size
    return step_distance(origin + float(num_steps), step_size, cone_angle)


def lattice_edges(origin: Tensor, steps: Tensor, step_size: float, cone_angle: float) -> Tensor:
    """``[R, K]`` distances where steps ``steps [K]`` (whole numbers) of lattices ``origin [R, 1]`` begin."""
    if cone_angle <= 0.0:
        return origin + steps * step_size
    return step_distance(origin + steps, step_size, cone_angle)


def lattice_steps(origin: Tensor, steps: Tensor, step_size: float,
                  cone_angle: float) -> tuple[Tensor, Tensor]:
    """``begins, ends [C, P]`` of steps ``steps [C, P]`` (whole numbers) of lattices ``origin [C, 1]``.

    Fixed steps are ``step_size`` long from their begin; growing ones end where the next begins
    (whole numbers add exactly), so consecutive steps meet without overlap.
    """
    if cone_angle <= 0.0:
        begins = torch.add(origin, steps, alpha=step_size)
        return begins, begins + step_size
    return (step_distance(origin + steps, step_size, cone_angle),
            step_distance(origin + (steps + 1.0), step_size, cone_angle))


def lattice_steps_across(diagonal_steps: int, step_size: float, cone_angle: float) -> int:
    """Steps per ray at most, through a box whose diagonal is ``diagonal_steps`` smallest steps long.

    Fixed steps: the diagonal's steps and one more, which the lattice's offset from ``near`` can
    reach into. Growing steps: :func:`steps_within` the diagonal.
    """
    if cone_angle <= 0.0:
        return diagonal_steps + 1
    return steps_within(diagonal_steps * step_size, step_size, cone_angle)
