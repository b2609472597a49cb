"""The hash grid's kernels as pure functions over flat samples, run eagerly or compiled by Inductor.

A lookup is two steps (:class:`~nerf_lightning.nn.encodings.HashGridEncoding` strings them together):

* :func:`hash_corners`: ``[S, 3]`` points → the table rows of each level's 8 cell corners
  ``index [L, 8, S]`` (int64) and their trilinear weights ``weights [L, 8, S]``;
* :func:`interpolate`: ``table [F, T]``, ``index``, ``weights`` → features ``[F, L, S]``,
  inside :class:`GatherInterpolate`, whose backward scatters into the table with ``scatter_add_``.

The table is read and its gradient written by ``gather`` and ``scatter_add_`` along the rows of
``[F, T]`` with the sample index broadcast over the ``F`` features: the CPU kernels of both split
their work by row, one feature per thread, and each thread walks its row's indices in order, so
the sums are bitwise the same on any number of threads (1-D ``index_select`` and ``index_add_``
run on one thread, leaving the other cores idle).

Eagerly, each of the dozen tensor operations of :func:`hash_corners` writes and reads back an
``[L, 8, S]`` tensor, and :func:`interpolate` materialises the gathered corners of every feature;
memory traffic, not arithmetic, sets their cost. Compiled (:class:`HashKernels` with
``compiled=True``; Inductor writes C++/OpenMP loops on a CPU and Triton kernels on a GPU) each
becomes one loop over the samples that writes only its results. Both compiled kernels are
elementwise per sample, or sum a sample's 8 corners in a fixed order, so they stay bitwise
repeatable run to run on any number of threads. The scatter-add of the backward stays the eager
``scatter_add_``: a compiled scatter would add with atomics, in an order that changes between runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

log = logging.getLogger(__name__)


def hash_corners(x: Tensor, resolutions: Tensor, max_corner: Tensor, axis_strides: Tensor,
                 level_offsets: Tensor, num_dense_levels: int, hash_mask: int) -> tuple[Tensor, Tensor]:
    """Corner rows and trilinear weights of ``[S, 3]`` points in ``[0, 1]^3``.

    Args:
        x: ``[S, 3]`` float32 points.
        resolutions: ``[L]`` float32 cells per side of each level.
        max_corner: ``[L]`` int32, the last cell's lower corner (``resolutions - 1``).
        axis_strides: ``[L, 3]`` int32: what one unit step along each axis adds to the row
            (dense levels), or the hash primes wrapped to int32 (hashed levels).
        level_offsets: ``[L]`` int64 first table row of each level (rows are computed in int32
            and stored as int64, the index type of ``gather``; a table has fewer than 2^31 rows).
        num_dense_levels: the first levels are indexed densely, the others hashed.
        hash_mask: rows per level minus one (a power of two minus one).

    Returns:
        ``index [L, 8, S]`` int64 table rows and ``weights [L, 8, S]`` float32, corners in the order
        ``(x, y, z)`` bits ``000, 001, ..., 111`` (z fastest).
    """
    num_levels = resolutions.shape[0]
    scaled = x.t()[None] * resolutions[:, None, None]  # [L, 3, S]
    base = torch.minimum(scaled.floor().int(), max_corner[:, None, None])
    frac = scaled - base  # [L, 3, S]; interpolation weights stay fp32
    terms = torch.stack([base, base + 1], dim=2) * axis_strides[:, :, None, None]  # [L, 3, 2, S]
    tx, ty, tz = terms[:, 0, :, None, None], terms[:, 1, None, :, None], terms[:, 2, None, None, :]
    # Each level's rows are computed in int32 and written once, widened, into the int64 index: no
    # int32 concatenation read back and widened again (memory traffic is what these kernels cost).
    offsets = level_offsets.to(torch.int32)[:, None, None, None, None]
    index = torch.empty((num_levels, 2, 2, 2, x.shape[0]), dtype=torch.int64, device=x.device)
    k = num_dense_levels
    torch.add(tx[:k] + ty[:k], tz[:k] + offsets[:k], out=index[:k])  # [k, 2, 2, 2, S]
    hashed = tx[k:] ^ ty[k:] ^ tz[k:]  # [L - k, 2, 2, 2, S]
    hashed &= hash_mask
    torch.add(hashed, offsets[k:], out=index[k:])
    w = torch.stack([1.0 - frac, frac], dim=2)  # [L, 3, 2, S]
    weights = w[:, 0, :, None, None] * w[:, 1, None, :, None] * w[:, 2, None, None, :]  # [L, 2, 2, 2, S]
    return index.view(num_levels, 8, -1), weights.view(num_levels, 8, -1)


def interpolate(table: Tensor, index: Tensor, weights: Tensor) -> Tensor:
    """``out[f, l, s] = sum_c weights[l, c, s] * table[f, index[l, c, s]]``.

    ``table [F, T]``, ``index [L, 8, S]`` int64, ``weights [L, 8, S]`` → ``[F, L, S]``. The table is
    feature-major: one ``gather`` along its rows reads every feature of every corner.
    """
    num_features = table.shape[0]
    corners = table.gather(1, index.reshape(1, -1).expand(num_features, -1))  # [F, L * 8 * S]
    return (corners.view(num_features, *weights.shape) * weights).sum(2)


def scatter_sources(grad_out: Tensor, weights: Tensor) -> Tensor:
    """What each corner adds to the table's gradient: ``[F, L, S]``, ``[L, 8, S]`` → ``[F, L * 8 * S]``."""
    return (weights * grad_out[:, :, None, :]).reshape(grad_out.shape[0], -1)


_EAGER: dict[str, Callable[..., Any]] = {
    "hash_corners": hash_corners, "interpolate": interpolate, "scatter_sources": scatter_sources}
_SAMPLE_DIMS: dict[str, tuple[int | None, ...]] = {
    "hash_corners": (0,), "interpolate": (None, 2, 2), "scatter_sources": (2, 2)}
"""Per kernel, the sample dimension ``S`` of each tensor argument (``None``: it has none)."""
_compiled: dict[str, Callable[..., Any]] = {}
_compile_failed = False


class HashKernels:
    """The three functions above, eager or compiled with ``torch.compile`` (``compiled=True``).

    Compiling happens on first use, with the sample count ``S`` symbolic from the start
    (``torch._dynamo.maybe_mark_dynamic``): any ``S`` reuses the kernels. Left to Inductor's automatic
    dynamic shapes, the first compile would specialise on the first ``S`` and the first change of ``S``
    (the second training step: SampleBudget changes it every step) would compile everything again.
    Inductor caches what it built on disk (``TORCHINDUCTOR_CACHE_DIR``, by default under the system's
    temporary folder), so later runs load the kernels instead of building them. When
    compiling fails (no C++ compiler on the machine, say), one warning says why and the eager
    functions take over for the rest of the process: the results are the same up to float rounding.
    """

    def __init__(self, compiled: bool) -> None:
        self.compiled = compiled

    def __call__(self, name: str, *args: Any) -> Any:
        global _compile_failed
        if not self.compiled or _compile_failed:
            return _EAGER[name](*args)
        if name not in _compiled:
            _compiled[name] = torch.compile(_EAGER[name])
        for arg, dim in zip(args, _SAMPLE_DIMS[name], strict=False):
            if dim is not None:  # not forced: S = 0 or 1 (say) is specialised rather than refused
                torch._dynamo.maybe_mark_dynamic(arg, dim)
        try:
            return _compiled[name](*args)
        except Exception as error:  # any failure of the compiler falls back to eager
            _compile_failed = True
            first_line = (str(error).splitlines() or [""])[0]
            log.warning("the hash grid's kernels could not be compiled (%s: %s); running them eagerly",
                        type(error).__name__, first_line)
            return _EAGER[name](*args)


class GatherInterpolate(torch.autograd.Function):
    """:func:`interpolate` with a scatter-add backward: ``table [F, T]``, ``index [L, 8, S]`` int64,
    ``weights [L, 8, S]`` → ``[F, L, S]``.

    One autograd function instead of gather, multiply and sum keeps the ``[F, L, 8, S]``
    intermediate out of autograd's saved tensors and writes the table gradient with one
    ``scatter_add_`` along its rows. The weights get a gradient only when they require one (the
    sample positions do under camera refinement); otherwise backward computes exactly what it did
    without.
    """

    @staticmethod
    def forward(ctx, table: Tensor, index: Tensor, weights: Tensor,  # type: ignore[override]
                kernels: HashKernels) -> Tensor:
        ctx.table_shape = table.shape
        ctx.kernels = kernels
        # The table (a reference, no copy) only when the weights want a gradient: saved otherwise,
        # it would count as a batch-independent activation in SampleBudget's memory estimate.
        if ctx.needs_input_grad[2]:
            ctx.save_for_backward(index, weights, table)
        else:
            ctx.save_for_backward(index, weights)
        # Detached (autograd is off in here either way): whether the weights require a gradient would
        # otherwise be part of what the compiled kernel is specialised for, one more compile.
        return kernels("interpolate", table, index, weights.detach())

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor, None, Tensor | None, None]:  # type: ignore[override]
        index, weights, *rest = ctx.saved_tensors
        num_features = ctx.table_shape[0]
        rows = index.reshape(1, -1).expand(num_features, -1)  # [F, L * 8 * S]
        grad_out = grad_out.contiguous()  # [F, L, S] from the [S, L * F] features: strided
        sources = ctx.kernels("scatter_sources", grad_out, weights)  # [F, L * 8 * S]
        grad_table = grad_out.new_zeros(ctx.table_shape)
        if grad_out.device.type != "cpu" and torch.are_deterministic_algorithms_enabled():
            # CUDA's deterministic scatter-add (--trainer.deterministic) takes 1-D rows only
            for feature in range(num_features):
                grad_table[feature].index_add_(0, index.reshape(-1), sources[feature])
        else:
            grad_table.scatter_add_(1, rows, sources)
        grad_weights = None
        if rest:  # d out[f, l, s] / d weights[l, c, s] = table[f, index[l, c, s]]
            corners = rest[0].gather(1, rows).view(num_features, *weights.shape)
            grad_weights = (corners * grad_out[:, :, None, :]).sum(0)
        return grad_table, None, grad_weights, None
