"""OccupancyGrid's cascaded levels and growing steps (``levels``, ``cone_angle``) for unbounded scenes:
the step map, which level holds a position, marching against a dense reference (for one level and
fixed steps too: one marching function serves all), the kit, export, and a real short fit with
unbounded rays and a contracting field."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nerf_lightning.cli import main, run_lightning_cli
from nerf_lightning.core.types import Rays, SceneBox
from nerf_lightning.export.pt2 import export_pt2, load_pt2
from nerf_lightning.export.torchscript import build_standalone, script_standalone
from nerf_lightning.runs.trained import load_trained, run_config_path
from nerf_lightning.samplers import OccupancyGrid
from nerf_lightning.samplers.occupancy.cascade import (
    cell_positions,
    grid_units,
    level_boxes,
    positions_to_cells,
)
from nerf_lightning.samplers.occupancy.marching import OccupancyMarcher, clip_to_grid
from nerf_lightning.samplers.occupancy.stepping import (
    lattice_origin,
    lattice_steps,
    step_distance,
    step_number,
    steps_within,
)
from nerf_lightning.testing import check_sampler, synthetic_density, synthetic_scene_box
from tests.helpers.runs import RUN, short_run_args

BOX = SceneBox(torch.tensor([-1.0, -0.5, -2.0]), torch.tensor([2.0, 1.0, 1.0]))  # not a cube, off centre
CONE = 1.0 / 256.0


# ------------------------------------------------------------------------------------- steps
def test_steps_are_fixed_near_the_camera_then_grow_by_the_cone_angle() -> None:
    step = 0.01
    switch = step / CONE  # 2.56: where c t reaches the smallest step
    u = torch.arange(0.0, 2000.0, dtype=torch.float64)
    t = step_distance(u, step, CONE)
    lengths = t[1:] - t[:-1]
    fixed = t[:-1] < switch - 1e-9
    torch.testing.assert_close(lengths[fixed], torch.full_like(lengths[fixed], step))
    grown = t[:-1] >= switch
    torch.testing.assert_close(lengths[grown], CONE * t[:-1][grown])  # nerfacc's dt = t * cone_angle
    assert bool((lengths >= step * (1 - 1e-9)).all())
    torch.testing.assert_close(step_number(t, step, CONE), u)  # the two maps are inverse
    torch.testing.assert_close(step_distance(u, step, 0.0), u * step)  # no cone: fixed steps


@pytest.mark.parametrize("cone_angle", [0.0, CONE, 1.0 / 32])
def test_step_count_bound_holds_from_any_near(cone_angle: float) -> None:
    step, length = 0.01, 50.0
    bound = steps_within(length, step, cone_angle)
    near = torch.cat([torch.zeros(1), torch.logspace(-4, 3, 200)]).double()
    span = step_number(near + length, step, cone_angle) - step_number(near, step, cone_angle)
    assert float(span.max()) + 2 <= bound <= float(span.max()) + 4  # a bound, and a tight one


# ------------------------------------------------------------------------------------ levels
@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_a_point_in_level_k_shell_is_marked_and_queried_in_level_k(level: int) -> None:
    resolution, levels = 16, 4
    sampler = OccupancyGrid(resolution=resolution, levels=levels, cone_angle=CONE, warmup_steps=1,
                            early_stop_eps=0.0).eval()
    sampler.set_scene_box(BOX)
    centre, half = 0.5 * (BOX.lower + BOX.upper), 0.5 * (BOX.upper - BOX.lower)
    # Inside level k's box, outside level k - 1's: 0.75 of the way out along a skewed direction.
    box_point = torch.tensor([0.8, -0.3, 0.5]) * 2.0**level * (1.0 if level == 0 else 0.9)
    point = centre + half * box_point
    cell = int(positions_to_cells(point[None], BOX.as_tensor(), resolution, levels)[0])
    assert cell // resolution**3 == level

    # Marked: an update with density only around the point occupies its cell in level k (the ball
    # holds the whole cell, whichever random point of it the update evaluates).
    radius = 2.0 * float(half.max()) * 2.0**level * 2 / resolution  # two level-k cells
    ball = lambda points: 1e3 * ((points - point).norm(dim=-1) < radius).float()  # noqa: E731
    sampler.update(0, ball, generator=torch.Generator().manual_seed(0))
    assert bool(sampler.occupied[cell])
    assert float(sampler.occupied.float().mean()) < 0.01

    # Queried: a ray through the point is sampled there exactly when that level-k cell is occupied.
    direction = torch.nn.functional.normalize(torch.tensor([[0.2, 1.0, -0.4]]), dim=-1)
    origin = point[None] - 0.5 * direction
    rays = Rays(origin, direction, torch.zeros(1), torch.full((1,), 1e5))
    sampler.occupied.zero_()
    sampler.occupied[cell] = True
    sampler._coarse = None
    samples = sampler(rays)
    assert len(samples) > 0
    cells = positions_to_cells(samples.positions(rays), BOX.as_tensor(), resolution, levels)
    assert bool((cells == cell).all())  # every sample in that cell (and so in level k)
    assert float((samples.t_mids - 0.5).abs().min()) <= float(samples.deltas.max())  # at the point
    sampler.occupied[cell] = False
    sampler._coarse = None
    assert len(sampler(rays)) == 0


def test_one_level_is_the_scene_box_and_every_cell_round_trips() -> None:
    """Level 0's box is the scene box bit for bit (so one level places and finds cells exactly as a
    single grid over the box), and the centre of each cell maps back to it unless a finer level holds
    it (the central half of levels above 0)."""
    bounds = BOX.as_tensor()
    lower, upper = level_boxes(bounds, 3)
    assert torch.equal(lower[0], bounds[0]) and torch.equal(upper[0], bounds[1])
    torch.testing.assert_close(upper[2] - lower[2], 4.0 * (bounds[1] - bounds[0]))
    jitter = torch.rand(64, 3, generator=torch.Generator().manual_seed(0))
    cells = torch.arange(64) * 61
    expected = bounds[0] + (torch.stack([cells // 256, cells // 16 % 16, cells % 16], -1) + jitter) / 16 * (
        bounds[1] - bounds[0])  # a single grid of 16^3 cells over the box
    assert torch.equal(cell_positions(cells, jitter, 16, 1, bounds), expected)
    assert torch.equal(cell_positions(cells, jitter, 16, 3, bounds), expected)  # level 0 of a cascade
    for levels in (1, 3):
        cells = torch.arange(levels * 16**3)
        centres = cell_positions(cells, torch.full((len(cells), 3), 0.5), 16, levels, bounds)
        found = positions_to_cells(centres, bounds, 16, levels)
        ijk = torch.stack([cells // 256 % 16, cells // 16 % 16, cells % 16], -1)
        inner = (cells >= 16**3) & ((ijk >= 4) & (ijk < 12)).all(-1)
        assert torch.equal(found[~inner], cells[~inner])
        assert bool((found[inner] // 16**3 < cells[inner] // 16**3).all())


def _dense_reference(sampler: OccupancyGrid, rays: Rays) -> tuple[torch.Tensor, torch.Tensor]:
    """Every step of every ray (eval mode), kept when its midpoint's cell is occupied; rays clipped to
    the outermost box when the sampler clips them (else as far as its steps reach)."""
    step, cone, bounds = sampler.step_size, sampler.cone_angle, sampler.bounds
    near, far = rays.near, torch.maximum(rays.far, rays.near)
    if sampler.clips_rays:
        near, far = clip_to_grid(*grid_units(rays.origins, rays.directions, bounds, sampler.resolution),
                                 near, far, sampler.resolution, sampler.levels)
    lattice = lattice_origin(near, torch.full_like(near, 0.5), step, cone)  # as evaluation offsets it
    k = torch.arange(sampler.max_steps, dtype=torch.float32).expand(len(rays), -1)
    begins, finishes = lattice_steps(lattice[:, None], k, step, cone)
    starts, ends = begins.maximum(near[:, None]), finishes.minimum(far[:, None])
    mids = 0.5 * (starts + ends)
    points = rays.origins[:, None] + rays.directions[:, None] * mids[..., None]
    cells = positions_to_cells(points.reshape(-1, 3), bounds, sampler.resolution, sampler.levels)
    keep = (ends > starts) & sampler.occupied[cells].view(mids.shape)
    return starts[keep], keep.nonzero()[:, 0]


@pytest.mark.parametrize(("levels", "cone_angle", "resolution", "occupied_share"), [
    (4, CONE, 32, 0.002),
    (3, 0.0, 16, 0.01),  # cascades with fixed steps
    (1, 1.0 / 64, 32, 0.003),  # growing steps in the scene box alone
    (5, 1.0 / 32, 8, 0.02),  # steps that outgrow the coarse cells: long segments
    (1, 0.0, 32, 0.003),  # the single grid: unclipped rays, beyond the box in its boundary cells
])
def test_marching_misses_no_occupied_step(levels: int, cone_angle: float, resolution: int,
                                                  occupied_share: float) -> None:
    sampler = OccupancyGrid(resolution=resolution, levels=levels, cone_angle=cone_angle,
                            steps_per_diagonal=256, early_stop_eps=0.0).eval()
    sampler.set_scene_box(BOX)
    generator = torch.Generator().manual_seed(3)
    sampler.occupied.copy_(torch.rand(sampler.occupied.shape, generator=generator) < occupied_share)
    count = 600
    directions = torch.nn.functional.normalize(torch.randn(count, 3, generator=generator), dim=-1)
    spread = torch.tensor([0.3, 1.0, 3.0, 20.0]).repeat(count // 4)[:, None]  # inside, around, far away
    origins = torch.randn(count, 3, generator=generator) * spread
    near = 0.3 * torch.rand(count, generator=generator)
    far = torch.full((count,), 1e4)
    far[::3] = near[::3] + 10.0 * torch.rand(count, generator=generator)[::3]  # some end inside
    rays = Rays(origins, directions, near, far)
    samples = sampler(rays)
    starts, ray_indices = _dense_reference(sampler, rays)
    assert len(samples) == len(starts) > 0
    assert torch.equal(samples.ray_indices, ray_indices)
    assert torch.equal(samples.t_starts, starts)


def test_growing_steps_bound_rays_that_run_to_a_thousand_diagonals() -> None:
    diagonal = float((BOX.upper - BOX.lower).norm())
    generator = torch.Generator().manual_seed(0)
    directions = torch.nn.functional.normalize(torch.randn(256, 3, generator=generator), dim=-1)
    origins = 0.5 * (BOX.lower + BOX.upper) + 0.3 * torch.randn(256, 3, generator=generator)
    rays = Rays(origins, directions, torch.full((256,), 0.02 * diagonal), torch.full((256,), 1e3 * diagonal))
    counts = {}
    for cone_angle in (0.0, CONE):
        sampler = OccupancyGrid(resolution=32, levels=4, cone_angle=cone_angle, early_stop_eps=0.0).eval()
        sampler.set_scene_box(BOX)  # every cell occupied until the first update: every step is kept
        per_ray = sampler(rays).samples_per_ray()
        assert int(per_ray.max()) <= sampler.max_steps
        counts[cone_angle] = float(per_ray.float().mean())
    print(f"steps per ray to 1000 diagonals, 4 levels: {counts[0.0]:.0f} fixed, "
          f"{counts[CONE]:.0f} with cone 1/256")
    assert counts[CONE] < counts[0.0] / 1.8  # measured 651 and 1277


def test_bad_levels_and_cone_angle_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match=r"^levels must be >= 1, with a resolution "
                                         r"divisible by 4 when above 1; got levels=2, resolution=30$"):
        OccupancyGrid(resolution=30, levels=2)
    with pytest.raises(ValueError, match=r"^levels must be .* got levels=0"):
        OccupancyGrid(levels=0)
    with pytest.raises(ValueError,
                       match=r"^cone_angle must be a number in \[0, 1\), got -0\.1$"):
        OccupancyGrid(cone_angle=-0.1)


@pytest.mark.parametrize("options", [dict(levels=4, cone_angle=CONE), dict(levels=3), dict(cone_angle=CONE)],
                         ids=["cascade+cone", "cascade", "cone"])
def test_kit_passes_cascaded_grids(options: dict) -> None:
    check_sampler(OccupancyGrid(resolution=16, **options))
    trained = OccupancyGrid(resolution=16, warmup_steps=1, **options)  # with a grid that has content
    trained.set_scene_box(synthetic_scene_box())
    trained.update(0, synthetic_density, generator=torch.Generator().manual_seed(0))
    assert 0.0 < trained.occupied_fraction < 0.5
    check_sampler(trained)


def test_state_round_trip_restores_the_cascade() -> None:
    sampler = OccupancyGrid(resolution=16, levels=3, cone_angle=CONE, warmup_steps=1)
    sampler.set_scene_box(BOX)
    sampler.update(0, synthetic_density, generator=torch.Generator().manual_seed(0))
    fresh = OccupancyGrid(resolution=16, levels=3, cone_angle=CONE)
    fresh.load_state_dict(sampler.state_dict())
    assert fresh.occupied.shape == (3 * 16**3,) and torch.equal(fresh.occupied, sampler.occupied)
    rays = Rays(torch.zeros(8, 3), torch.nn.functional.normalize(torch.randn(8, 3), dim=-1),
                torch.zeros(8), torch.full((8,), 1e3))
    a, b = sampler.eval()(rays), fresh.eval()(rays)
    assert torch.equal(a.t_starts, b.t_starts) and torch.equal(a.ray_indices, b.ray_indices)


# ----------------------------------------------------------------- a real fit, and its export
def _events(log_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return accumulator


@pytest.mark.slow
def test_unbounded_fit_with_a_cascade_trains_samples_bounded_and_exports(tiny_scene: Path, tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]
                                                                        ) -> None:
    out = tmp_path / "run"
    sampler_args = ("--model.sampler.resolution", "16", "--model.sampler.levels", "3",
                    "--model.sampler.cone_angle", str(CONE), "--model.sampler.warmup_steps", "4",
                    "--model.sampler.steps_per_diagonal", "512",
                    "--model.sampler.update_every", "2")
    # No validation: what is checked is the training's log and last.ckpt, and a validation renders the
    # val views' unbounded rays (hundreds of samples each) after every 3-step epoch.
    run_lightning_cli(["fit", *short_run_args(tiny_scene, out, "--data.unbounded", "true",
                                              "--model.field.contraction", "linf",
                                              "--trainer.limit_val_batches", "0", steps=10,
                                              sampler_args=sampler_args)])
    run = out / RUN
    checkpoint = run / "checkpoints" / "last.ckpt"
    events = _events(run)
    losses = [event.value for event in events.Scalars("train/loss")]
    per_ray = [event.value for event in events.Scalars("train/samples_per_ray")]
    assert len(losses) == 10 and all(math.isfinite(value) for value in losses)
    assert losses[-1] < losses[0]

    model, datamodule = load_trained(checkpoint, run_config_path(checkpoint))
    sampler = model.sampler
    assert isinstance(sampler, OccupancyGrid) and (sampler.levels, sampler.cone_angle) == (3, CONE)
    assert datamodule.far is not None and max(per_ray) <= sampler.max_steps
    assert 0.0 < sampler.occupied_fraction < 1.0  # the trained grid came back
    # The test view's rays run to 1000 box diagonals: growing steps spend far fewer samples on them.
    batch = datamodule.image_batch("test", 0, torch.device("cpu"))
    assert bool((batch.rays.far > 100 * (batch.rays.near.max())).all())
    image = model.render_image(batch)
    fixed = OccupancyGrid(resolution=16, levels=3, early_stop_eps=0.0).eval()
    fixed.load_state_dict(sampler.state_dict())
    unpruned = OccupancyGrid(resolution=16, levels=3, cone_angle=CONE, early_stop_eps=0.0).eval()
    unpruned.load_state_dict(sampler.state_dict())
    with torch.no_grad():
        fixed_count, cone_count = len(fixed(batch.rays)), len(unpruned(batch.rays))
    rendered = float(image.samples_per_ray.float().mean())
    print(f"test view: {rendered:.1f} samples/ray; without early termination "
          f"{cone_count / len(batch.rays):.1f} with cone 1/256, {fixed_count / len(batch.rays):.1f} fixed")
    assert 0 < cone_count < 0.75 * fixed_count  # measured 332 and 550 per ray

    # Exported (pt2) and rendering as the checkpoint does, more tightly than ``--verify``'s 0.1 dB (whose
    # fresh process tests/export/test_export_pt2.py runs on a single-level grid).
    pt2 = tmp_path / "scene.pt2"
    code = main(["export", "--ckpt_path", str(checkpoint), "--format", "pt2", "--out", str(pt2)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    renderer, info = load_pt2(pt2)
    assert info["sampler"] == "OccupancyGrid"
    with torch.no_grad():
        rgb, depth, _ = renderer(batch.rays.origins, batch.rays.directions, batch.rays.near, batch.rays.far,
                                 batch.background)
    height, width = batch.image_size
    assert float((rgb.reshape(height, width, 3) - image.rgb).abs().max()) < 1e-5
    torch.testing.assert_close(depth.reshape(height, width, 1), image.depth, rtol=1e-4, atol=1e-3)


@pytest.mark.slow  # scripting and tracing: seconds
def test_standalone_cascade_matches_evaluation_scripted_and_traced(tiny_scene: Path, tmp_path: Path) -> None:
    """A sparse cascade with early termination: TorchScript and torch.export reproduce evaluation."""
    from nerf_lightning.data.datamodule import NerfDataModule
    from nerf_lightning.fields import HashGridField
    from nerf_lightning.system.module import NerfModule

    torch.manual_seed(0)
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16,
                          contraction="linf")
    with torch.no_grad():
        field.encoding.table.uniform_(-1.0, 1.0)
        field.density_mlp[-1].bias[0] += 3.0  # dense enough for rays to terminate early
    sampler = OccupancyGrid(resolution=16, levels=3, cone_angle=CONE, early_stop_eps=1e-2,
                            alpha_threshold=1e-3)
    model = NerfModule(field=field, sampler=sampler, eval_chunk_rays=100)
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False, unbounded=True)
    datamodule.setup("test")
    assert datamodule.scene_box is not None
    model.set_scene_box(datamodule.scene_box)
    generator = torch.Generator().manual_seed(1)
    sampler.occupied.copy_(torch.rand(sampler.occupied.shape, generator=generator) < 0.3)
    sampler._coarse = None
    model.eval()
    renderer = build_standalone(model, datamodule.background)
    assert isinstance(renderer.sampler, OccupancyMarcher) and renderer.sampler.early_stop
    batch = datamodule.image_batch("test", 0, torch.device("cpu"))
    image = model.render_image(batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = script_standalone(renderer)
    export_pt2(model, datamodule.background, tmp_path / "m.pt2")
    program, _ = load_pt2(tmp_path / "m.pt2")
    rays, (height, width) = batch.rays, batch.image_size
    for module in (scripted, program):
        with torch.no_grad():
            rgb, depth, _ = module(rays.origins, rays.directions, rays.near, rays.far, batch.background)
        assert float((rgb.reshape(height, width, 3) - image.rgb).abs().max()) < 1e-5
        torch.testing.assert_close(depth.reshape(height, width, 1), image.depth, rtol=1e-4, atol=1e-3)
    with torch.no_grad():  # the sparse grid and early termination shaped the samples
        assert 0 < len(sampler(rays, field.density)) < len(sampler(rays, None))
