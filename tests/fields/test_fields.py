"""Encodings and radiance fields: shapes, interpolation, indexing, gradients, scene box."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from nerf_lightning.core.types import SceneBox
from nerf_lightning.fields import HashGridField, PositionalEncodingField
from nerf_lightning.fields.base import RadianceField
from nerf_lightning.nn.encodings import (
    FrequencyEncoding,
    HashGridEncoding,
    spherical_harmonics,
    spherical_harmonics_deg4,
)
from nerf_lightning.nn.hash_kernels import hash_corners

# 4 levels, resolutions 4, 10, 25, 63: the first two are dense (<= 2^12 corners), the rest hashed.
SMALL_GRID = {"num_levels": 4, "features_per_level": 2, "log2_hashmap_size": 12,
              "base_resolution": 4, "max_resolution": 64}


def small_encoding(seed: int = 0) -> HashGridEncoding:
    torch.manual_seed(seed)
    encoding = HashGridEncoding(**SMALL_GRID)
    with torch.no_grad():  # O(1) table values so interpolation errors are visible
        encoding.table.normal_()
    return encoding


def small_hash_field() -> HashGridField:
    torch.manual_seed(0)
    field = HashGridField(**SMALL_GRID, hidden_dim=16, geometry_features=7, color_layers=1)
    with torch.no_grad():  # a trained-looking table, so outputs depend on position
        field.encoding.table.uniform_(-1.0, 1.0)
    return field


def small_mlp_field() -> PositionalEncodingField:
    torch.manual_seed(0)
    return PositionalEncodingField(position_frequencies=4, direction_frequencies=2, depth=3, width=32,
                                   skip_layer=2)


FIELDS = [pytest.param(small_hash_field, id="hash_grid"), pytest.param(small_mlp_field, id="mlp")]


def unit_directions(n: int, generator: torch.Generator, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    d = torch.randn(n, 3, generator=generator, dtype=dtype)
    return d / d.norm(dim=-1, keepdim=True)


# --- HashGridEncoding ----------------------------------------------------------------------------


def test_hash_grid_layout() -> None:
    encoding = small_encoding()
    assert encoding.resolutions.tolist() == [4.0, 10.0, 25.0, 63.0]
    assert encoding.num_dense_levels == 2
    assert encoding.level_offsets.tolist() == [0, 5**3, 5**3 + 11**3, 5**3 + 11**3 + 2**12]
    assert encoding.table.shape == (2, 5**3 + 11**3 + 2 * 2**12)
    assert encoding.output_dim == 8


def test_hash_grid_corner_rows_follow_the_dense_layout_and_instant_ngp_hash() -> None:
    """Every level's 8 corner rows against a plain int64 reference: ``x + (r+1) y + (r+1)^2 z`` on
    dense levels, instant-ngp's ``(x * 1) ^ (y * 2654435761) ^ (z * 805459861) mod 2^T`` on hashed
    ones, plus the level's first row; corners in (x, y, z) bit order, z fastest."""
    encoding = small_encoding()
    gen = torch.Generator().manual_seed(1)
    points = torch.cat([torch.rand(200, 3, generator=gen), torch.zeros(1, 3), torch.ones(1, 3)])
    index, _ = hash_corners(points, encoding.resolutions, encoding.max_corner, encoding.axis_strides,
                            encoding.level_offsets, encoding.num_dense_levels, encoding.hash_mask)
    assert index.dtype == torch.int64 and index.shape == (4, 8, points.shape[0])
    primes = torch.tensor([1, 2654435761, 805459861])
    for level, offset in enumerate(encoding.level_offsets.tolist()):
        cells = int(encoding.resolutions[level])
        # [S, 3] lower corners, from the float32 product as the encoding computes it
        base = (points * encoding.resolutions[level]).floor().long().clamp_max(cells - 1)
        for corner in range(8):
            bits = torch.tensor([(corner >> 2) & 1, (corner >> 1) & 1, corner & 1])
            c = base + bits
            if level < encoding.num_dense_levels:
                row = c[:, 0] + (cells + 1) * c[:, 1] + (cells + 1) ** 2 * c[:, 2]
            else:
                hashed = c * primes
                row = (hashed[:, 0] ^ hashed[:, 1] ^ hashed[:, 2]) & (2**12 - 1)
            assert torch.equal(index[level, corner], row + offset), (level, corner)


def test_hash_grid_output_shape_and_range_of_indices() -> None:
    encoding = small_encoding()
    gen = torch.Generator().manual_seed(0)
    points = torch.cat([torch.rand(50, 3, generator=gen), torch.zeros(1, 3), torch.ones(1, 3),
                        torch.tensor([[0.0, 1.0, 0.5], [1.0, 0.0, 1.0], [1.0 - 1e-7, 1.0, 0.0]])])
    out = encoding(points)
    assert out.shape == (points.shape[0], encoding.output_dim)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()


def test_hash_grid_is_linear_inside_a_cell() -> None:
    """Two close points share their cell at every level, so the midpoint's encoding is the mean."""
    encoding = small_encoding()
    finest = 63.0
    # Every coordinate of these points sits at a fraction <= 0.9 of its cell at every level.
    base = torch.tensor([[0.3137, 0.5521, 0.7213], [0.33, 0.41, 0.62], [0.07, 0.29, 0.85],
                         [0.01, 0.02, 0.97]])
    for axis in range(3):
        step = torch.zeros(3)
        step[axis] = 0.05 / finest
        p, q = base, base + step
        cell_p = (p[:, None] * encoding.resolutions[:, None]).floor()
        cell_q = (q[:, None] * encoding.resolutions[:, None]).floor()
        assert torch.equal(cell_p, cell_q), "points must share the cell at every level"
        mid = encoding(0.5 * (p + q))
        mean = 0.5 * (encoding(p) + encoding(q))
        assert (encoding(p) - encoding(q)).abs().amax() > 1e-2  # the check is not vacuous
        torch.testing.assert_close(mid, mean, rtol=0, atol=2e-4)


def test_hash_grid_matches_manual_trilinear_on_a_dense_level() -> None:
    encoding = small_encoding()
    point = torch.tensor([[0.3, 0.55, 0.8]])
    res, features = 4, encoding.features_per_level
    scaled = point[0].double() * res
    base = scaled.floor().long()
    frac = scaled - base
    expected = torch.zeros(features, dtype=torch.float64)
    for dx in (0, 1):
        for dy in (0, 1):
            for dz in (0, 1):
                x, y, z = base[0] + dx, base[1] + dy, base[2] + dz
                w = ((frac[0] if dx else 1 - frac[0]) * (frac[1] if dy else 1 - frac[1])
                     * (frac[2] if dz else 1 - frac[2]))
                expected += w * encoding.table[:, x + 5 * y + 25 * z].double()
    torch.testing.assert_close(encoding(point)[0, :features].double(), expected.detach(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("corner", [(0, 0, 0), (1, 2, 3), (4, 0, 2), (4, 4, 4), (3, 1, 0)])
def test_hash_grid_coarsest_corner_reads_its_table_entry(corner: tuple[int, int, int]) -> None:
    encoding = small_encoding()
    res = 4
    point = torch.tensor([corner], dtype=torch.float32) / res  # exact in binary
    x, y, z = corner
    dense_index = x + (res + 1) * y + (res + 1) ** 2 * z
    out = encoding(point)[0, : encoding.features_per_level]
    torch.testing.assert_close(out, encoding.table[:, dense_index].detach(), rtol=0, atol=1e-6)


def test_hash_grid_gradient_touches_at_most_8_corners_per_level() -> None:
    encoding = small_encoding()
    point = torch.tensor([[0.37, 0.61, 0.29]])
    encoding(point).sum().backward()
    nonzero_rows = (encoding.table.grad != 0).any(dim=0)
    offsets = [*encoding.level_offsets.tolist(), encoding.table.shape[1]]
    per_level = [int(nonzero_rows[offsets[i]:offsets[i + 1]].sum()) for i in range(encoding.num_levels)]
    assert all(1 <= count <= 8 for count in per_level), per_level
    # Generic point on the dense levels: exactly its 8 corners.
    assert per_level[:2] == [8, 8]


def test_hash_grid_gradient_at_a_corner_is_that_row_only() -> None:
    encoding = small_encoding()
    encoding(torch.tensor([[0.25, 0.5, 0.75]])).sum().backward()  # corner (1, 2, 3) of level 0
    level0 = encoding.table.grad[:, : 5**3]
    assert (level0 != 0).any(dim=0).nonzero().flatten().tolist() == [1 + 5 * 2 + 25 * 3]


# --- Fields ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("make_field", FIELDS)
def test_field_outputs(make_field) -> None:
    field: RadianceField = make_field()
    gen = torch.Generator().manual_seed(0)
    positions = (torch.rand(64, 3, generator=gen) - 0.5) * 4.0  # some outside the default box
    directions = unit_directions(64, gen)
    density, rgb = field(positions, directions)
    assert density.shape == (64,) and rgb.shape == (64, 3)
    assert (density >= 0).all() and torch.isfinite(density).all()
    assert (rgb >= 0).all() and (rgb <= 1).all()
    torch.testing.assert_close(field.density(positions), density)


@pytest.mark.parametrize("make_field", FIELDS)
def test_field_scene_box_normalisation_and_state_dict(make_field) -> None:
    field: RadianceField = make_field()
    box = SceneBox(torch.tensor([0.0, -1.0, 2.0]), torch.tensor([4.0, 1.0, 3.0]))
    inside = torch.tensor([[1.0, 0.0, 2.5]])
    before = field.density(inside)
    field.set_scene_box(box)
    torch.testing.assert_close(field.scene_bounds, box.as_tensor())
    torch.testing.assert_close(field.normalize_positions(inside), torch.tensor([[0.25, 0.5, 0.5]]))
    assert not torch.allclose(field.density(inside), before)

    outside = torch.tensor([[-3.0, 0.5, 10.0], [9.0, -7.0, 2.25]])
    clamped = torch.tensor([[0.0, 0.5, 3.0], [4.0, -1.0, 2.25]])
    torch.testing.assert_close(field.normalize_positions(outside), field.normalize_positions(clamped))
    torch.testing.assert_close(field.normalize_positions(outside), torch.tensor([[0.0, 0.75, 1.0],
                                                                                [1.0, 0.0, 0.25]]))
    torch.testing.assert_close(field.density(outside), field.density(clamped))

    state = field.state_dict()
    assert "scene_bounds" in state
    torch.testing.assert_close(state["scene_bounds"], box.as_tensor())
    fresh = type(field)(**_constructor_args(field))
    assert not torch.allclose(fresh.scene_bounds, box.as_tensor())
    fresh.load_state_dict(state)
    torch.testing.assert_close(fresh.scene_bounds, box.as_tensor())
    probe = torch.tensor([[0.5, 0.2, 2.9], [-1.0, 0.0, 0.0]])
    torch.testing.assert_close(fresh.density(probe), field.density(probe))


def _constructor_args(field: RadianceField) -> dict:
    if isinstance(field, HashGridField):
        return {**SMALL_GRID, "hidden_dim": 16, "geometry_features": 7, "color_layers": 1}
    return {"position_frequencies": 4, "direction_frequencies": 2, "depth": 3, "width": 32, "skip_layer": 2}


@pytest.mark.parametrize("make_field", FIELDS)
def test_field_fits_a_constant_colour(make_field) -> None:
    field: RadianceField = make_field()
    gen = torch.Generator().manual_seed(0)
    positions = (torch.rand(256, 3, generator=gen) - 0.5) * 3.0
    directions = unit_directions(256, gen)
    target = torch.tensor([0.9, 0.1, 0.6])
    optimizer = torch.optim.Adam(field.parameters(), lr=1e-2)
    losses = []
    for _ in range(20):
        _, rgb = field(positions, directions)
        loss = ((rgb - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses


def test_hash_grid_field_gradient_reaches_the_table() -> None:
    field = small_hash_field()
    positions = torch.tensor([[0.1, 0.2, 0.3], [-0.5, 0.7, 1.1]])
    density, rgb = field(positions, torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))
    (density.sum() + rgb.sum()).backward()
    assert field.encoding.table.grad is not None and field.encoding.table.grad.abs().sum() > 0


def test_level_mean_squares_weighs_every_level_alike_whatever_its_rows() -> None:
    encoding = small_encoding()
    offsets = [*encoding.level_offsets.tolist(), encoding.table.shape[1]]
    levels = [encoding.table[:, start:end] for start, end in itertools.pairwise(offsets)]
    assert [level.shape[1] for level in levels] == [5**3, 11**3, 2**12, 2**12]
    want = sum(level.square().mean() for level in levels)
    torch.testing.assert_close(encoding.level_mean_squares(), want)
    # The gradient of one row is 2 * value / (F * rows of its level): the coarse level's rows, fewer,
    # are pulled harder than the fine ones'.
    encoding.level_mean_squares().backward()
    grad, table = encoding.table.grad, encoding.table.detach()
    torch.testing.assert_close(grad[:, 0], 2 * table[:, 0] / (2 * 5**3))
    torch.testing.assert_close(grad[:, -1], 2 * table[:, -1] / (2 * 2**12))


def test_grid_decay_adds_the_gradient_of_its_penalty_to_the_table_and_nothing_else() -> None:
    def field(decay: float) -> HashGridField:
        torch.manual_seed(0)
        return HashGridField(**SMALL_GRID, hidden_dim=16, grid_decay=decay)

    plain, decayed = field(0.0), field(0.1)
    generator = torch.Generator().manual_seed(0)
    positions, directions = torch.rand(64, 3, generator=generator), unit_directions(64, generator)
    for model in (plain, decayed):
        density, rgb = model(positions, directions)
        (density.sum() + rgb.sum()).backward()
    table = decayed.encoding.table
    penalty = torch.autograd.grad(0.1 * decayed.encoding.level_mean_squares(), table)[0]
    torch.testing.assert_close(table.grad, plain.encoding.table.grad + penalty)
    for name, parameter in plain.named_parameters():
        if name != "encoding.table":
            assert torch.equal(parameter.grad, decayed.get_parameter(name).grad), name
    with pytest.raises(ValueError, match="grid_decay must be >= 0, got -1"):
        HashGridField(**SMALL_GRID, grid_decay=-1.0)


def test_direction_degree_sets_how_far_colour_may_follow_the_view() -> None:
    generator = torch.Generator().manual_seed(0)
    positions = torch.rand(64, 3, generator=generator).repeat(2, 1)
    directions = unit_directions(128, generator)  # every position seen along two directions

    def colours(degree: int) -> tuple[torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)
        field = HashGridField(**SMALL_GRID, hidden_dim=16, direction_degree=degree)
        with torch.no_grad():
            field.encoding.table.uniform_(-1.0, 1.0)
            rgb = field(positions, directions)[1]
        assert field.color_mlp[0].in_features == 15 + degree**2
        return rgb[:64], rgb[64:]

    first, second = colours(1)  # the constant band only: one colour per position
    assert torch.equal(first, second)
    for degree in (2, 4):
        first, second = colours(degree)
        assert (first - second).abs().max() > 1e-3, degree
    for degree in (0, 5):
        with pytest.raises(ValueError, match=f"direction_degree must be 1 to 4 .*got {degree}"):
            HashGridField(**SMALL_GRID, direction_degree=degree)


# --- FrequencyEncoding and spherical harmonics ----------------------------------------------------


def test_frequency_encoding() -> None:
    encoding = FrequencyEncoding(num_frequencies=3)
    assert encoding.output_dim(3) == 21
    assert FrequencyEncoding(3, include_input=False).output_dim(2) == 12
    out = encoding(torch.zeros(2, 3))
    assert out.shape == (2, 21)
    assert out[:, :12].abs().max().item() == 0.0  # x and every sine
    assert out[:, 12:].tolist() == [[1.0] * 9] * 2  # every cosine

    x = torch.tensor([[0.25, -0.5]])
    out = FrequencyEncoding(2)(x)
    angles = torch.tensor([0.25 * math.pi, 0.5 * math.pi, -0.5 * math.pi, -math.pi])  # d-major
    torch.testing.assert_close(out, torch.cat([x[0], angles.sin(), angles.cos()])[None])
    without = FrequencyEncoding(2, include_input=False)(x)
    torch.testing.assert_close(without, out[:, 2:])


def test_spherical_harmonics_low_degrees_closed_form() -> None:
    gen = torch.Generator().manual_seed(0)
    d = unit_directions(100, gen, torch.float64)
    sh = spherical_harmonics_deg4(d)
    assert sh.shape == (100, 16)
    c0 = 0.5 / math.sqrt(math.pi)
    c1 = math.sqrt(3.0 / (4.0 * math.pi))
    x, y, z = d.unbind(-1)
    torch.testing.assert_close(sh[:, 0], torch.full_like(x, c0))
    torch.testing.assert_close(sh[:, 1], -c1 * y)
    torch.testing.assert_close(sh[:, 2], c1 * z)
    torch.testing.assert_close(sh[:, 3], -c1 * x)


def test_spherical_harmonics_of_a_degree_are_the_first_bands() -> None:
    d = unit_directions(50, torch.Generator().manual_seed(0))
    full = spherical_harmonics_deg4(d)
    for degree in (1, 2, 3, 4):
        assert torch.equal(spherical_harmonics(d, degree), full[:, : degree**2])


def test_spherical_harmonics_orthonormal() -> None:
    gen = torch.Generator().manual_seed(0)
    d = unit_directions(200_000, gen, torch.float64)
    sh = spherical_harmonics_deg4(d)
    gram = sh.T @ sh * (4.0 * math.pi / d.shape[0])
    torch.testing.assert_close(gram, torch.eye(16, dtype=torch.float64), rtol=0, atol=0.05)
