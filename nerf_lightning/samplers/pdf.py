"""Resampling of intervals in proportion to weights (inverse transform sampling of a piecewise-constant PDF).

Shapes: ``R`` rays, ``N`` input intervals per ray (``N + 1`` edges), ``M`` output intervals.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nerf_lightning.samplers.intervals import stratified_fractions

DEFAULT_PADDING = 0.01
"""Share of probability :func:`sample_pdf` spreads evenly over all intervals by default."""


def sample_pdf(
    edges: Tensor,
    weights: Tensor,
    num_intervals: int,
    *,
    jitter: bool,
    generator: torch.Generator | None = None,
    padding: float = DEFAULT_PADDING,
) -> Tensor:
    """New interval edges distributed like ``weights``.

    Args:
        edges: ``[R, N + 1]`` sorted edges of the weighted intervals.
        weights: ``[R, N]`` non-negative weights (need not sum to one).
        num_intervals: ``M``, intervals in the output.
        jitter: randomise the CDF positions (training) instead of spacing them evenly.
        generator: source of randomness for ``jitter``.
        padding: share of probability spread evenly over all intervals so that no part of
            the ray gets zero probability (avoids starving regions the weights missed).

    Returns:
        ``[R, M + 1]`` sorted edges spanning ``[edges[:, 0], edges[:, -1]]``.

    Eager only: ``torch.jit.script`` refuses the keyword-only ``generator`` ("keyword-only arguments
    with defaults"), so a ``standalone()`` module cannot call it. Without ``jitter`` it is
    ``invert_cdf(edges, weights, even_fractions(R, M + 1, device), padding)``
    (:func:`invert_cdf`, :func:`~nerf_lightning.samplers.intervals.even_fractions`), which scripts
    and traces: call that from the module.
    """
    u = stratified_fractions(
        edges.shape[0], num_intervals + 1, jitter=jitter, device=edges.device, generator=generator
    )
    return invert_cdf(edges, weights, u, padding)


def invert_cdf(edges: Tensor, weights: Tensor, u: Tensor, padding: float) -> Tensor:
    """The edges at CDF positions ``u [R, M + 1]`` (sorted, in ``[0, 1]``) of the piecewise-constant
    PDF of ``weights [R, N]`` over ``edges [R, N + 1]`` (``padding`` as in :func:`sample_pdf`).

    Pure torch: exported samplers (``samplers/standalone.py``) resample with this very function.
    """
    weights = weights.detach().float().clamp_min(0.0)
    pdf = weights / weights.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    pdf = (1.0 - padding) * pdf + padding / weights.shape[-1]
    cdf = torch.cat([torch.zeros_like(pdf[:, :1]), torch.cumsum(pdf, dim=-1)], dim=-1)  # [R, N + 1]
    cdf = cdf / cdf[:, -1:].clamp_min(1e-12)
    u = u.contiguous()
    index = torch.searchsorted(cdf.contiguous(), u, right=True).clamp(1, cdf.shape[-1] - 1)
    cdf_low, cdf_high = cdf.gather(1, index - 1), cdf.gather(1, index)
    edge_low, edge_high = edges.gather(1, index - 1), edges.gather(1, index)
    fraction = ((u - cdf_low) / (cdf_high - cdf_low).clamp_min(1e-12)).clamp(0.0, 1.0)
    new_edges = edge_low + fraction * (edge_high - edge_low)
    new_edges[:, 0] = edges[:, 0]
    new_edges[:, -1] = edges[:, -1]
    return torch.cummax(new_edges.detach(), dim=-1)[0]  # [0], not .values: TorchScript compiles it


def merge_edges(a: Tensor, b: Tensor) -> Tensor:
    """``[R, A]`` and ``[R, B]`` sorted edges → ``[R, A + B]`` sorted edges (their union)."""
    return torch.sort(torch.cat([a, b], dim=-1), dim=-1)[0]


def outer_envelope(target_edges: Tensor, source_edges: Tensor, source_weights: Tensor) -> Tensor:
    """Upper bound of ``source_weights`` mass over each target interval (mip-NeRF 360's outer measure).

    Args:
        target_edges: ``[R, M + 1]`` sorted edges.
        source_edges: ``[R, N + 1]`` sorted edges of the source intervals.
        source_weights: ``[R, N]`` source weights.

    Returns:
        ``[R, M]``: for each target interval, the total source weight of every source interval
        that overlaps it.
    """
    cumulative = torch.cat(
        [torch.zeros_like(source_weights[:, :1]), torch.cumsum(source_weights, dim=-1)], dim=-1
    )  # [R, N + 1]
    last = source_edges.shape[-1] - 1
    low = torch.searchsorted(source_edges.contiguous(), target_edges[:, :-1].contiguous(), right=True) - 1
    high = torch.searchsorted(source_edges.contiguous(), target_edges[:, 1:].contiguous(), right=False)
    low, high = low.clamp(0, last), high.clamp(0, last)
    return cumulative.gather(1, high) - cumulative.gather(1, low)


def interlevel_loss(
    target_edges: Tensor, target_weights: Tensor, source_edges: Tensor, source_weights: Tensor
) -> Tensor:
    """Proposal loss: target weights above the source's outer envelope, per mip-NeRF 360.

    Gradients reach ``source_weights`` only; ``target_weights`` are treated as constants.
    Shapes as in :func:`outer_envelope`; returns a scalar.
    """
    target_weights = target_weights.detach()
    envelope = outer_envelope(target_edges.detach(), source_edges.detach(), source_weights)
    excess = (target_weights - envelope).clamp_min(0.0)
    return (excess.square() / (target_weights + 1e-7)).sum(dim=-1).mean()


def distortion_loss(edges: Tensor, weights: Tensor) -> Tensor:
    """mip-NeRF 360's distortion loss of ``weights [R, N]`` over ``edges [R, N + 1]``, a scalar.

    Per ray, ``sum_ij w_i w_j |m_i - m_j| + 1/3 sum_i w_i^2 (e_i+1 - e_i)`` with ``m`` the interval
    midpoints, computed with prefix sums in ``O(N)``; the mean over rays. Small when the weight of a
    ray sits in one short stretch. Gradients reach ``weights``.
    """
    mids = 0.5 * (edges[:, 1:] + edges[:, :-1])
    widths = edges[:, 1:] - edges[:, :-1]
    weight_before = torch.cumsum(weights, dim=-1) - weights  # exclusive prefix sums
    moment_before = torch.cumsum(weights * mids, dim=-1) - weights * mids
    between = 2.0 * (weights * (mids * weight_before - moment_before)).sum(dim=-1)
    within = (weights.square() * widths).sum(dim=-1) / 3.0
    return (between + within).mean()
