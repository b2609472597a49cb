"""The one colour-map module (kornia's maps): depth colours, depth ranges and count heatmaps."""

from __future__ import annotations

import math

import pytest
import torch
from kornia.color import ColorMap
from torch import Tensor

from nerf_lightning.rendering.colormap import NUM_COLORS, apply_colormap, colorize_depth, depth_range, heatmap


def _palette(name: str) -> Tensor:
    """``[P, 3]`` kornia's ``name`` palette as the module builds it."""
    return ColorMap(base=name, num_colors=NUM_COLORS, dtype=torch.float32).colors.T


def _palette_index(colours: Tensor, name: str) -> Tensor:
    """``[N]`` index of each ``[N, 3]`` colour in the palette (the first of equal entries: the
    resampled palette repeats its end colours)."""
    return torch.cdist(colours.reshape(-1, 3), _palette(name)).argmin(dim=-1)


def _column(*values: float) -> Tensor:
    """``[1, W, 1]``: one row of pixels."""
    return torch.tensor(values, dtype=torch.float32).reshape(1, -1, 1)


def test_depth_colours_run_monotonically_from_red_near_to_blue_far() -> None:
    depth = torch.linspace(1.0, 3.0, 300).reshape(1, 300, 1)
    colours = colorize_depth(depth, torch.ones_like(depth), 1.0, 3.0)
    assert colours.shape == (1, 300, 3) and colours.dtype == torch.float32
    index = _palette_index(colours[0], "turbo")
    palette = _palette("turbo")
    assert torch.equal(colours[0, 0], palette[-1]) and torch.equal(colours[0, -1], palette[0])  # all of it
    assert bool((index[1:] <= index[:-1]).all())  # never back towards near as depth grows
    near, far = colours[0, 0], colours[0, -1]
    assert near[0] > near[2] and far[2] > far[0]  # red near, blue far


def test_depths_outside_the_range_take_its_end_colours() -> None:
    depth = _column(0.0, 1.0, 3.0, 10.0)
    colours = colorize_depth(depth, torch.ones_like(depth), 1.0, 3.0)[0]
    assert torch.equal(colours[0], colours[1]) and torch.equal(colours[2], colours[3])
    assert not torch.equal(colours[1], colours[2])
    collapsed = colorize_depth(depth, torch.ones_like(depth), 2.0, 2.0)  # near == far: no division by 0
    assert bool(torch.isfinite(collapsed).all())
    assert 0.0 <= float(collapsed.min()) <= float(collapsed.max()) <= 1.0


def test_empty_transparent_and_non_finite_pixels_are_black() -> None:
    depth = _column(2.0, math.nan, 2.0, 2.0, math.inf, 2.0)
    opacity = _column(0.0, 1.0, math.nan, 0.5, 1.0, 1.0)
    colours = colorize_depth(depth, opacity, 1.0, 3.0)[0]
    for black in (0, 1, 2, 4):
        assert colours[black].tolist() == [0.0, 0.0, 0.0], black
    assert torch.allclose(colours[3], 0.5 * colours[5])  # faded by the opacity
    assert float(colours[5].sum()) > 0.0
    assert colorize_depth(torch.zeros(0, 5, 1), torch.zeros(0, 5, 1), 0.0, 1.0).shape == (0, 5, 3)


def test_depth_range_uses_the_finite_depths_of_opaque_pixels() -> None:
    depth = torch.linspace(1.0, 2.0, 101).reshape(1, 101, 1)
    opaque = torch.ones_like(depth)
    assert depth_range(depth, opaque) == pytest.approx((1.02, 1.98), abs=1e-5)
    with_outliers = torch.cat([depth, _column(100.0, math.nan, math.inf)], dim=1)
    opacity = torch.cat([opaque, _column(0.0, 1.0, 1.0)], dim=1)  # a transparent far pixel, two non-finite
    assert depth_range(with_outliers, opacity) == pytest.approx((1.02, 1.98), abs=1e-5)
    assert depth_range(depth, torch.zeros_like(depth)) == (0.0, 1.0)  # nothing opaque
    assert depth_range(torch.zeros(0, 3, 1), torch.zeros(0, 3, 1)) == (0.0, 1.0)  # no pixels
    near, far = depth_range(torch.full((1, 4, 1), 2.5), torch.ones(1, 4, 1))
    assert near == pytest.approx(2.5) and far > near


def test_heatmap_is_viridis_on_a_log_scale_from_zero_to_high() -> None:
    counts = torch.tensor([0.0, 1.0, 3.0, 15.0, 40.0, 64.0, 500.0, -2.0, math.nan]).reshape(1, -1, 1)
    colours = heatmap(counts, high=64.0)[0]
    assert colours.shape == (9, 3)
    palette = _palette("viridis")
    for darkest in (0, 7, 8):  # zero, negative and NaN counts
        assert torch.equal(colours[darkest], palette[0]), darkest
    assert torch.equal(colours[5], palette[-1]) and torch.equal(colours[6], palette[-1])  # high and above
    index = _palette_index(colours, "viridis")
    assert bool((index[1:6] > index[:5]).all())  # strictly brighter as counts grow
    # log scale: 3 samples (log 4 / log 65 = 0.33 of the way) sits well above 3 / 64 = 0.05 of it
    assert 0.28 < float(index[2]) / (NUM_COLORS - 1) < 0.38


def test_one_nan_does_not_change_the_other_colours() -> None:
    # kornia reads a float input whose values are not all <= 1 (a NaN among them) as 0..255.
    values = torch.linspace(0.0, 1.0, 11)
    with_nan = torch.cat([values, torch.tensor([math.nan])])
    assert torch.equal(apply_colormap(with_nan)[:11], apply_colormap(values))
    assert apply_colormap(torch.zeros(0)).shape == (0, 3)
    assert apply_colormap(torch.tensor([[2.0, -1.0]])).shape == (1, 2, 3)
