"""Input encodings shared by fields and samplers: hash grid, frequencies, spherical harmonics."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from nerf_lightning.nn.hash_kernels import GatherInterpolate, HashKernels

_PRIMES = (1, 2654435761, 805459861)
# Index arithmetic runs in int32 (half the memory traffic of int64); products wrap modulo 2^32,
# which leaves the low bits that the hash keeps unchanged. 2654435761 as a wrapped int32:
_PRIMES_INT32 = tuple(p - (1 << 32) if p >= (1 << 31) else p for p in _PRIMES)


class HashGridEncoding(nn.Module):
    """Multiresolution hash encoding (Mueller et al. 2022) in pure PyTorch.

    Coarse levels whose grid fits in the table are indexed densely (no collisions); finer
    levels hash their integer corners with the spatial hash of the paper. Corner indices and
    trilinear weights are built per axis and combined by broadcasting, samples along the last
    (contiguous) dimension so that each operation is a long vector loop, and the table is read
    with one ``gather`` along its feature rows inside a single autograd function, which keeps
    the CPU cost near the memory traffic of the gather and of its scatter-add gradient.
    The kernels are :mod:`nerf_lightning.nn.hash_kernels`' pure functions; ``compiled=True`` runs them
    through ``torch.compile``, which fuses each into one loop over the samples.

    Args:
        num_levels: number of resolution levels ``L``.
        features_per_level: features per level ``F``.
        log2_hashmap_size: ``log2`` of the table size ``T`` per level.
        base_resolution: grid resolution of the coarsest level (cells along one side).
        max_resolution: grid resolution of the finest level.
        compiled: run the kernels compiled by ``torch.compile``
            (:class:`~nerf_lightning.nn.hash_kernels.HashKernels`).
    """

    def __init__(
        self,
        num_levels: int = 16,
        features_per_level: int = 2,
        log2_hashmap_size: int = 17,
        base_resolution: int = 16,
        max_resolution: int = 1024,
        compiled: bool = False,
    ) -> None:
        super().__init__()
        self.kernels = HashKernels(compiled)
        self.num_levels = num_levels
        self.features_per_level = features_per_level
        table_size = 2**log2_hashmap_size
        growth = math.exp((math.log(max_resolution) - math.log(base_resolution)) / max(num_levels - 1, 1))
        resolutions = [math.floor(base_resolution * growth**level) for level in range(num_levels)]
        sizes = [min(table_size, (res + 1) ** 3) for res in resolutions]
        offsets = [0]
        for size in sizes:
            offsets.append(offsets[-1] + size)
        self.num_dense_levels = sum((res + 1) ** 3 <= table_size for res in resolutions)
        # Per level and axis: what one unit step along that axis adds to the index.
        strides = [
            [1, res + 1, (res + 1) ** 2] if (res + 1) ** 3 <= table_size else list(_PRIMES_INT32)
            for res in resolutions
        ]
        if offsets[-1] >= 1 << 31:
            raise ValueError(f"num_levels and log2_hashmap_size must give a table of fewer than 2**31 rows "
                             f"(int32 indices), got {offsets[-1]} rows")
        self.register_buffer("resolutions", torch.tensor(resolutions, dtype=torch.float32), persistent=False)
        self.register_buffer("max_corner", torch.tensor(resolutions, dtype=torch.int32) - 1, persistent=False)
        self.register_buffer("axis_strides", torch.tensor(strides, dtype=torch.int32), persistent=False)
        self.register_buffer("level_offsets", torch.tensor(offsets[:-1], dtype=torch.int64), persistent=False)
        self.hash_mask = table_size - 1
        # Stored feature-major ([F, rows]): the gradient's scatter-add along these rows runs one row
        # per thread on a CPU, faster than into a [rows, F] table (hash_kernels).
        self.table = nn.Parameter(torch.empty(features_per_level, offsets[-1]).uniform_(-1e-4, 1e-4))
        # Each row's share of its level's mean square (level_mean_squares): 1 / (F * rows of the level).
        row_weights = torch.cat([torch.full((size,), 1.0 / (features_per_level * size)) for size in sizes])
        self.register_buffer("row_weights", row_weights, persistent=False)

    @property
    def output_dim(self) -> int:
        return self.num_levels * self.features_per_level

    def level_mean_squares(self) -> Tensor:
        """``sum over levels of mean(feature ** 2)`` over each level's rows: a scalar.

        Every level counts the same whatever its number of rows, so a penalty on it (Zip-NeRF's
        normalised weight decay) pulls the few coarse rows as hard as the many fine ones: rows that
        no training ray reaches decay towards zero instead of keeping whatever they fitted.
        """
        return (self.table.square() * self.row_weights).sum()

    def standalone(self, level_weights: Tensor | None = None) -> HashGridLookup:
        """A torch-only copy for export (:class:`HashGridLookup`: same table, same lookups), on the CPU.

        ``level_weights`` ``[L]``: the copy's features of level ``l`` are this encoding's times
        ``level_weights[l]`` (each level's rows scaled: a feature is linear in its level's rows).
        """
        table = self.table.detach().float().cpu()
        if level_weights is not None:
            sizes = torch.diff(self.level_offsets.cpu(), append=torch.tensor([table.shape[1]]))
            table = table * level_weights.detach().float().cpu().repeat_interleave(sizes)
        return HashGridLookup(table, self.resolutions.cpu(),
                              self.axis_strides.cpu(), self.level_offsets.cpu(), self.num_dense_levels,
                              self.hash_mask)

    def forward(self, x: Tensor) -> Tensor:
        """Encode ``[S, 3]`` points in ``[0, 1]^3`` into ``[S, L * F]`` features.

        Always in float32, also under autocast (``--trainer.precision bf16-mixed``/``16-mixed``):
        cell positions and interpolation weights need more than 8 (bf16) or 11 (fp16) bits of
        mantissa at fine levels, and the table's gradient is a scatter-add of small values. The
        features come out as float32; the MLPs after them run in the autocast precision.
        """
        with torch.autocast(x.device.type, enabled=False):
            return self._encode(x.float())

    def _encode(self, x: Tensor) -> Tensor:
        num_points = x.shape[0]
        index, weights = self.kernels("hash_corners", x, self.resolutions, self.max_corner, self.axis_strides,
                                      self.level_offsets, self.num_dense_levels, self.hash_mask)
        # [F, L, S]; a float32 table (parameters stay float32 under mixed precision) gives float32
        encoded = GatherInterpolate.apply(self.table, index, weights.to(self.table.dtype), self.kernels)
        return encoded.permute(2, 1, 0).reshape(num_points, self.output_dim)


class HashGridLookup(nn.Module):
    """The evaluation-only twin of :class:`HashGridEncoding` that exports need: torch only, no autograd
    function, the table a buffer. ``torch.jit.script`` and ``torch.export`` both compile it.

    It computes the same corners, hashes and trilinear weights in the same float32 operations,
    laid out samples first (``[S, L, ...]``), so its features equal the encoding's up to the
    order of the 8-term sums.

    Args:
        table: ``[F, rows]`` feature table (levels one after the other).
        resolutions: ``[L]`` float32 cells per side of each level.
        axis_strides: ``[L, 3]`` int32 index step per unit along each axis (dense levels), or the
            hash primes wrapped to int32 (hashed levels).
        level_offsets: ``[L]`` int32 first row of each level.
        num_dense_levels: the first levels are indexed densely, the others hashed.
        hash_mask: table size per level minus one.
    """

    def __init__(self, table: Tensor, resolutions: Tensor, axis_strides: Tensor, level_offsets: Tensor,
                 num_dense_levels: int, hash_mask: int) -> None:
        super().__init__()
        self.register_buffer("table", table.detach().clone())
        self.register_buffer("resolutions", resolutions.detach().clone().float())
        self.register_buffer("max_corner", resolutions.detach().to(torch.int32) - 1)
        self.register_buffer("axis_strides", axis_strides.detach().clone().to(torch.int32))
        self.register_buffer("level_offsets", level_offsets.detach().clone().to(torch.int32))
        self.num_levels = int(resolutions.shape[0])
        self.features_per_level = int(table.shape[0])
        self.num_dense_levels = int(num_dense_levels)
        self.hash_mask = int(hash_mask)

    def forward(self, x: Tensor) -> Tensor:
        """``[S, 3]`` in ``[0, 1]^3`` → ``[S, L * F]`` (trilinear interpolation of the 8 corners)."""
        num_points = x.shape[0]
        scaled = x.float()[:, None, :] * self.resolutions[:, None]  # [S, L, 3]
        base = torch.minimum(scaled.floor().int(), self.max_corner[:, None])
        frac = scaled - base
        terms = torch.stack([base, base + 1], dim=-1) * self.axis_strides[:, :, None]  # [S, L, 3, 2]
        tx = terms[:, :, 0, :, None, None]
        ty = terms[:, :, 1, None, :, None]
        tz = terms[:, :, 2, None, None, :]
        k = self.num_dense_levels
        dense = tx[:, :k] + ty[:, :k] + tz[:, :k]  # [S, k, 2, 2, 2]
        hashed = torch.bitwise_and(
            torch.bitwise_xor(torch.bitwise_xor(tx[:, k:], ty[:, k:]), tz[:, k:]), self.hash_mask
        )
        index = torch.cat([dense, hashed], dim=1) + self.level_offsets[:, None, None, None]
        w = torch.stack([1.0 - frac, frac], dim=-1)  # [S, L, 3, 2]
        weights = w[:, :, 0, :, None, None] * w[:, :, 1, None, :, None] * w[:, :, 2, None, None, :]
        weights = weights.reshape(num_points, self.num_levels, 8).to(self.table.dtype)
        flat = index.reshape(-1)
        features = [
            (self.table[f].index_select(0, flat).view_as(weights) * weights).sum(-1)
            for f in range(self.features_per_level)
        ]
        return torch.stack(features, dim=-1).reshape(num_points, self.num_levels * self.features_per_level)


class FrequencyEncoding(nn.Module):
    """NeRF's positional encoding ``[x, sin(2^k pi x), cos(2^k pi x)]`` for ``k < num_frequencies``."""

    def __init__(self, num_frequencies: int, include_input: bool = True) -> None:
        super().__init__()
        self.include_input = include_input
        self.register_buffer("scales", (2.0 ** torch.arange(num_frequencies)) * math.pi, persistent=False)

    def output_dim(self, input_dim: int) -> int:
        return input_dim * (2 * self.scales.numel() + int(self.include_input))

    def forward(self, x: Tensor) -> Tensor:
        """``[S, D]`` → ``[S, D * (2K + 1)]``."""
        angles = (x[..., None] * self.scales).flatten(-2)
        parts = [torch.sin(angles), torch.cos(angles)]
        if self.include_input:
            parts.insert(0, x)
        return torch.cat(parts, dim=-1)


MAX_SH_DEGREE = 4
"""The highest ``degree`` :func:`spherical_harmonics` takes (16 terms)."""


def spherical_harmonics(directions: Tensor, degree: int = MAX_SH_DEGREE) -> Tensor:
    """The real spherical-harmonic basis of unit ``[S, 3]`` directions with ``degree ** 2`` terms
    (bands ``0 .. degree - 1``; instant-ngp's count, so ``degree`` 4 is :func:`spherical_harmonics_deg4`)
    → ``[S, degree ** 2]``, ``1 <= degree <= 4``.

    A lower degree gives the colour fewer ways to change with the viewing direction; degree 1 is a
    colour that does not depend on it. Compiles with TorchScript and ``torch.export``.
    """
    return spherical_harmonics_deg4(directions)[:, : degree * degree]


def spherical_harmonics_deg4(directions: Tensor) -> Tensor:
    """Real spherical-harmonic basis up to degree 3 (16 terms) of unit ``[S, 3]`` directions → ``[S, 16]``.

    TorchScript and ``torch.export`` compile it as is: the exported field
    (``fields/standalone.py``) calls it.
    """
    x, y, z = directions[:, 0], directions[:, 1], directions[:, 2]
    xx, yy, zz = x * x, y * y, z * z
    xy, yz, xz = x * y, y * z, x * z
    return torch.stack(
        [
            torch.full_like(x, 0.28209479177387814),
            -0.48860251190291987 * y,
            0.48860251190291987 * z,
            -0.48860251190291987 * x,
            1.0925484305920792 * xy,
            -1.0925484305920792 * yz,
            0.94617469575755997 * zz - 0.31539156525251999,
            -1.0925484305920792 * xz,
            0.54627421529603959 * (xx - yy),
            0.59004358992664352 * y * (-3.0 * xx + yy),
            2.8906114426405538 * xy * z,
            0.45704579946446572 * y * (1.0 - 5.0 * zz),
            0.3731763325901154 * z * (5.0 * zz - 3.0),
            0.45704579946446572 * x * (1.0 - 5.0 * zz),
            1.4453057213202769 * z * (xx - yy),
            0.59004358992664352 * x * (-xx + 3.0 * yy),
        ],
        dim=-1,
    )
