"""The functions a sampler plugin builds on, in one public module: ``from nerf_lightning.samplers.toolkit
import ...``.

The built-in samplers and their exported twins are made of these; they live in :mod:`.intervals`,
:mod:`.spacing`, :mod:`.pdf` and :mod:`.standalone` (importable from there too), and this module is
where a plugin imports them from (``docs/samplers.md``, "Public API for plugin authors").
Shapes: ``R`` rays, ``N`` intervals per ray (``N + 1`` edges), ``M`` output intervals.

Where edges fall along a ray:

- :func:`even_fractions` ``(R, num_edges, device)``: evenly spaced positions in ``[0, 1]``, the
  evaluation layout;
- :func:`stratified_fractions` ``(R, num_edges, *, jitter, device, generator=None)``: the same, inner
  positions jittered (training);
- :func:`interval_edges` ``(near, far, fractions)``: positions in ``[0, 1]`` to distances over
  ``[near, max(far, near)]``;
- :func:`spaced_distances` ``(fractions, near, far, pivot, spacing)``: the same under a spacing of
  :data:`SPACINGS` (even in ``t``, in ``1 / t``, or in ``t`` up to a pivot and in ``1 / t`` beyond it),
  with :func:`box_exit_distance` ``(origins, directions, bounds)`` the usual pivot: where each ray
  leaves the scene box.

Resampling by weight (inverse transform sampling of a piecewise-constant PDF) and its losses:

- :func:`sample_pdf` ``(edges, weights, M, *, jitter, generator=None, padding=DEFAULT_PADDING)``:
  ``[R, M + 1]`` new edges distributed like ``weights``;
- :func:`invert_cdf` ``(edges, weights, u, padding)``: the edges at given CDF positions ``u``;
- :func:`merge_edges` (the sorted union of two edge sets), :func:`interlevel_loss` (mip-NeRF 360's
  proposal loss), :func:`distortion_loss`.

Export (a ``standalone()`` module, ``docs/writing-a-sampler.md#export``):

- :func:`pack_dense_edges` ``(edges [R, N + 1])``: ``(t_starts, t_ends, ray_indices)``, packed as
  ``PackedSamples.from_dense`` packs them;
- :func:`dense_midpoints` and :func:`dense_weights`: midpoints, lengths and rendering weights of
  dense intervals, for a module that weighs its intervals by a density.

**Eager only**: :func:`stratified_fractions` and :func:`sample_pdf` take a keyword-only ``generator``,
which ``torch.jit.script`` refuses ("keyword-only arguments with defaults"); in evaluation mode they
are :func:`even_fractions` and ``invert_cdf(edges, weights, even_fractions(R, M + 1, device),
padding)``, which is what a ``standalone()`` module calls. Every other function here is pure torch
that ``torch.export`` traces and ``torch.jit.script`` compiles, so a sampler and its exported module
call the very same code.
"""

from nerf_lightning.samplers.intervals import even_fractions, interval_edges, stratified_fractions
from nerf_lightning.samplers.pdf import (
    DEFAULT_PADDING,
    distortion_loss,
    interlevel_loss,
    invert_cdf,
    merge_edges,
    sample_pdf,
)
from nerf_lightning.samplers.spacing import SPACINGS, box_exit_distance, spaced_distances
from nerf_lightning.samplers.standalone import dense_midpoints, dense_weights, pack_dense_edges

__all__ = [
    "DEFAULT_PADDING",
    "SPACINGS",
    "box_exit_distance",
    "dense_midpoints",
    "dense_weights",
    "distortion_loss",
    "even_fractions",
    "interlevel_loss",
    "interval_edges",
    "invert_cdf",
    "merge_edges",
    "pack_dense_edges",
    "sample_pdf",
    "spaced_distances",
    "stratified_fractions",
]
