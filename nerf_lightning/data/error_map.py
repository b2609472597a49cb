"""Draw training pixels in proportion to recent error: spend rays where the model is still wrong."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


class PixelErrorMap:
    """Per-image grids of recent per-ray training error, and sampling of pixels from them.

    Each image is divided into ``resolution x resolution`` tiles (rows ``[ty H / T, (ty + 1) H / T)``
    and likewise for columns). A tile holds an exponential moving average of the squared
    error of the training rays drawn from it; tiles never observed hold ``initial_error``,
    the largest squared error a colour in ``[0, 1]`` can have, so they are visited early.

    Pixels are drawn by tile, then uniformly within the tile, with tile probability
    proportional to ``pixels * ((1 - uniform_fraction) * error / mean_error + uniform_fraction)``:
    a ``uniform_fraction`` share of the rays is spread over all pixels alike, so every pixel
    keeps at least ``uniform_fraction / total_pixels`` probability and none starves.

    Args:
        shapes: ``(H_i, W_i)`` of each training image (pixels numbered image after image,
            row-major, as in ``PackedImages``).
        resolution: tiles along each side of every image.
        uniform_fraction: share of rays drawn uniformly over all pixels (the floor), in ``(0, 1]``.
        smoothing: weight of a new observation in a tile's moving average, in ``(0, 1]``.
        kept: ``[P]`` bool, the pixels that may be drawn (``SceneSplit.masks``); ``None``: all. A tile
            then weighs by its kept pixels, so a masked-out tile (never observed, its error staying at
            ``initial_error``) is never picked; a draw that still lands on a masked pixel of a partly
            masked tile is for the caller to replace (``KeptPixels.replace_masked``).
    """

    initial_error = 1.0

    def __init__(self, shapes: Sequence[tuple[int, int]], resolution: int = 32,
                 uniform_fraction: float = 0.25,
                 smoothing: float = 0.3, device: torch.device | str = "cpu",
                 kept: Tensor | None = None) -> None:
        if resolution < 1:
            raise ValueError(f"error map resolution: expected >= 1, got {resolution}")
        if not 0.0 < uniform_fraction <= 1.0:
            raise ValueError(f"error map uniform_fraction: expected (0, 1], got {uniform_fraction}")
        if not 0.0 < smoothing <= 1.0:
            raise ValueError(f"error map smoothing: expected a value in (0, 1], got {smoothing}")
        self.resolution = resolution
        self.uniform_fraction = uniform_fraction
        self.smoothing = smoothing
        device = torch.device(device)
        sizes = torch.tensor([h * w for h, w in shapes], dtype=torch.int64)
        self.offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)]).to(device)  # [N + 1]
        self.heights = torch.tensor([h for h, _ in shapes], dtype=torch.int64, device=device)  # [N]
        self.widths = torch.tensor([w for _, w in shapes], dtype=torch.int64, device=device)  # [N]
        ticks = torch.arange(resolution + 1, device=device)
        self.row_edges = (ticks[None, :] * self.heights[:, None]) // resolution  # [N, T + 1]
        self.col_edges = (ticks[None, :] * self.widths[:, None]) // resolution  # [N, T + 1]
        rows = self.row_edges.diff(dim=1)  # [N, T] pixel rows per tile row
        cols = self.col_edges.diff(dim=1)
        self.tile_pixels = (rows[:, :, None] * cols[:, None, :]).reshape(-1).float()  # [N T T]
        if kept is not None:
            self.tile_pixels = self._kept_per_tile(kept, shapes)
        self.errors = torch.full_like(self.tile_pixels, self.initial_error)  # [N T T]

    def _kept_per_tile(self, kept: Tensor, shapes: Sequence[tuple[int, int]]) -> Tensor:
        """``[N T T]`` float kept pixels per tile, counted one image at a time (no ``[P]`` temporaries)."""
        res, device = self.resolution, self.row_edges.device
        counts = []
        start = 0
        for image, (height, width) in enumerate(shapes):
            mask = kept[start : start + height * width].to(device).view(height, width).float()
            start += height * width
            rows = torch.arange(height, device=device)
            cols = torch.arange(width, device=device)
            ty = torch.searchsorted(self.row_edges[image], rows, right=True) - 1  # as tile_of counts
            tx = torch.searchsorted(self.col_edges[image], cols, right=True) - 1
            grid = torch.zeros(res * res, device=device)
            grid.index_add_(0, (ty[:, None] * res + tx[None, :]).reshape(-1), mask.reshape(-1))
            counts.append(grid)
        return torch.cat(counts) if counts else self.tile_pixels

    @property
    def device(self) -> torch.device:
        return self.errors.device

    def tile_of(self, pixels: Tensor) -> Tensor:
        """``[B]`` flat tile index (``(image * T + ty) * T + tx``) of global pixel indices ``[B]``."""
        image = torch.searchsorted(self.offsets, pixels, right=True) - 1
        local = pixels - self.offsets[image]
        width = self.widths[image]
        row, col = local // width, local % width
        # The last edge at or before the pixel (empty tiles, when an image is smaller than the
        # grid, share an edge with the next tile and are skipped by `right=True`).
        ty = torch.searchsorted(self.row_edges[image], row[:, None], right=True)[:, 0] - 1
        tx = torch.searchsorted(self.col_edges[image], col[:, None], right=True)[:, 0] - 1
        return (image * self.resolution + ty) * self.resolution + tx

    def probabilities(self) -> Tensor:
        """``[N T T]`` probability of drawing a pixel from each tile."""
        weighted = self.tile_pixels * self.errors
        mean_error = weighted.sum() / self.tile_pixels.sum()
        relative = self.errors / mean_error.clamp(min=1e-12)
        weights = self.tile_pixels * ((1.0 - self.uniform_fraction) * relative + self.uniform_fraction)
        return weights / weights.sum()

    def sample(self, count: int, generator: torch.Generator | None = None) -> Tensor:
        """``[count]`` global pixel indices, drawn tile by ``probabilities()`` then uniformly inside."""
        device = self.device
        cdf = self.probabilities().double().cumsum(0)
        draws = torch.rand(count, 3, device=device, generator=generator, dtype=torch.float64)
        tile = torch.searchsorted(cdf, draws[:, 0] * cdf[-1], right=True).clamp_max(cdf.numel() - 1)
        res = self.resolution
        image, ty, tx = tile // (res * res), (tile // res) % res, tile % res
        row0, row1 = self.row_edges[image, ty], self.row_edges[image, ty + 1]
        col0, col1 = self.col_edges[image, tx], self.col_edges[image, tx + 1]
        row = row0 + (draws[:, 1] * (row1 - row0)).long().clamp_max((row1 - row0 - 1).clamp(min=0))
        col = col0 + (draws[:, 2] * (col1 - col0)).long().clamp_max((col1 - col0 - 1).clamp(min=0))
        return self.offsets[image] + row * self.widths[image] + col

    def update(self, pixels: Tensor, errors: Tensor) -> None:
        """Move each observed tile's average towards the mean ``errors [B]`` of ``pixels [B]`` in it."""
        self.apply_tile_sums(self.tile_sums(pixels, errors))

    def tile_sums(self, pixels: Tensor, errors: Tensor) -> Tensor:
        """``[2, N T T]``: per tile, the sum of ``errors [B]`` of ``pixels [B]`` in it and their count.

        Sums from several batches (or ranks) add up; ``apply_tile_sums`` moves the map.
        """
        tiles = self.tile_of(pixels)
        sums = self.errors.new_zeros(2, self.errors.numel())
        sums[0].index_add_(0, tiles, errors.float())
        sums[1].index_add_(0, tiles, torch.ones_like(errors, dtype=torch.float32))
        return sums

    def apply_tile_sums(self, sums: Tensor) -> None:
        """Move each observed tile's average towards its mean error in ``sums`` (from ``tile_sums``)."""
        total, count = sums[0], sums[1]
        observed = count > 0
        mean = total / count.clamp(min=1.0)
        updated = self.errors + self.smoothing * (mean - self.errors)
        self.errors = torch.where(observed, updated, self.errors)

    def to(self, device: torch.device | str) -> PixelErrorMap:
        for name in ("offsets", "heights", "widths", "row_edges", "col_edges", "tile_pixels", "errors"):
            setattr(self, name, getattr(self, name).to(device))
        return self

    def state_dict(self) -> dict[str, Any]:
        return {"errors": self.errors.cpu(), "resolution": self.resolution}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        errors = state["errors"]
        if state["resolution"] != self.resolution or errors.shape != self.errors.shape:
            raise ValueError(
                f"error map in the checkpoint has resolution {state['resolution']} and "
                f"{errors.numel()} tiles; expected resolution {self.resolution} and "
                f"{self.errors.numel()} tiles "
                "(same training images and data.error_map_resolution)"
            )
        self.errors = errors.to(self.device, torch.float32)
