"""Behaviour specific to each built-in sampler (the generic contract is checked by the kit)."""

from __future__ import annotations

import pytest
import torch

from nerf_lightning.core.types import PackedSamples, Rays, SceneBox
from nerf_lightning.samplers import Hierarchical, OccupancyGrid, Proposal
from nerf_lightning.samplers.occupancy.grid import early_stop_stays_active
from nerf_lightning.samplers.pdf import interlevel_loss, outer_envelope, sample_pdf

BOX = SceneBox.cube(1.5)


def rays_towards_origin(count: int, seed: int = 0) -> Rays:
    """Rays from distance 4 aimed within 0.3 of the origin."""
    generator = torch.Generator().manual_seed(seed)
    directions = torch.nn.functional.normalize(torch.randn(count, 3, generator=generator), dim=-1)
    origins = -4.0 * directions
    targets = 0.3 * (torch.rand(count, 3, generator=generator) - 0.5)
    directions = torch.nn.functional.normalize(targets - origins, dim=-1)
    near, far = BOX.intersect(origins, directions)
    return Rays(origins, directions, near.clamp_min(0.0), far)


def sphere_density(radius: float = 0.5, sharpness: float = 200.0):
    def density(points: torch.Tensor) -> torch.Tensor:
        return sharpness * torch.sigmoid((radius - points.norm(dim=-1)) * 50.0)
    return density


def per_ray_counts(samples: PackedSamples) -> torch.Tensor:
    return samples.samples_per_ray()


# ------------------------------------------------------------------------------ PDF resampling
def test_sample_pdf_concentrates_where_the_weight_is() -> None:
    edges = torch.linspace(0.0, 1.0, 11).expand(4, -1)
    weights = torch.zeros(4, 10)
    weights[:, 7] = 1.0
    new_edges = sample_pdf(edges, weights, 32, jitter=False, padding=0.0)
    inside = ((new_edges > 0.7) & (new_edges < 0.8)).sum(dim=-1)
    assert (inside >= 29).all()
    assert torch.all(new_edges[:, 1:] >= new_edges[:, :-1])
    assert torch.all(new_edges[:, 0] == 0.0) and torch.all(new_edges[:, -1] == 1.0)


def test_sample_pdf_padding_keeps_every_interval_reachable() -> None:
    edges = torch.linspace(0.0, 1.0, 5)[None]
    weights = torch.tensor([[0.0, 0.0, 1.0, 0.0]])
    new_edges = sample_pdf(edges, weights, 400, jitter=False, padding=0.04)
    assert ((new_edges > 0.0) & (new_edges < 0.25)).any()  # the empty first interval still gets edges


def test_outer_envelope_on_hand_computed_intervals() -> None:
    source_edges = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    source_weights = torch.tensor([[0.2, 0.5, 0.3]])
    target_edges = torch.tensor([[0.0, 0.5, 1.5, 3.0]])
    envelope = outer_envelope(target_edges, source_edges, source_weights)
    torch.testing.assert_close(envelope, torch.tensor([[0.2, 0.7, 0.8]]))


def test_interlevel_loss_is_zero_when_the_proposal_bounds_the_target_and_trains_the_proposal() -> None:
    edges = torch.linspace(0.0, 1.0, 9)[None]
    target = torch.tensor([[0.0, 0.1, 0.6, 0.2, 0.1, 0.0, 0.0, 0.0]])
    assert float(interlevel_loss(edges, target, edges, target.clone())) < 1e-9
    proposal = torch.full((1, 8), 0.05, requires_grad=True)
    loss = interlevel_loss(edges, target, edges, proposal)
    loss.backward()
    assert float(loss) > 0.0 and proposal.grad is not None and float(proposal.grad[0, 2]) < 0.0


# -------------------------------------------------------------------------------- Hierarchical
def test_hierarchical_gives_coarse_plus_fine_intervals_concentrated_at_the_surface() -> None:
    rays = rays_towards_origin(64)
    sampler = Hierarchical(num_coarse=16, num_fine=32).eval()
    samples = sampler(rays, sphere_density())
    assert torch.all(per_ray_counts(samples) == 48)
    surface = rays.near.new_tensor(4.0 - 0.5)  # the sphere's front is about 3.5 along each ray
    close = ((samples.t_mids - surface).abs() < 0.3).view(64, -1).sum(dim=-1).float().mean()
    uniform_share = 48 * 0.6 / float((rays.far - rays.near).mean())
    assert float(close) > 2.0 * uniform_share


def test_hierarchical_separate_network_is_trained_by_its_auxiliary_loss() -> None:
    rays = rays_towards_origin(32)
    sampler = Hierarchical(num_coarse=8, num_fine=8, separate_coarse_network=True).train()
    samples = sampler(rays, sphere_density(), generator=torch.Generator().manual_seed(0))
    weights = torch.softmax(-samples.t_mids.view(32, -1), dim=-1).reshape(-1)
    loss = sampler.auxiliary_loss(samples, weights)
    assert loss is not None and torch.isfinite(loss)
    loss.backward()
    grads = [p.grad for p in sampler.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    assert Hierarchical().auxiliary_loss(samples, weights) is None  # same-field mode: no loss


# ------------------------------------------------------------------------------------ Proposal
def test_proposal_gives_num_samples_per_ray_and_trains_its_networks() -> None:
    rays = rays_towards_origin(32)
    sampler = Proposal(proposal_samples=(16, 8), num_samples=8).train()
    sampler.set_scene_box(BOX)
    samples = sampler(rays, generator=torch.Generator().manual_seed(0))
    assert torch.all(per_ray_counts(samples) == 8)
    weights = torch.softmax(-samples.t_mids.view(32, -1), dim=-1).reshape(-1)
    loss = sampler.auxiliary_loss(samples, weights)
    assert loss is not None and float(loss.detach()) > 0.0
    loss.backward()
    for network in sampler.networks:
        assert float(network.encoding.table.grad.abs().sum()) > 0.0
    sampler.eval()
    sampler(rays)
    assert sampler.auxiliary_loss(samples, weights) is None  # nothing stashed in evaluation


# ------------------------------------------------------------------------------- OccupancyGrid
def test_occupancy_grid_skips_empty_cells_and_stops_at_the_surface() -> None:
    sampler = OccupancyGrid(resolution=32, warmup_steps=10, update_every=1)
    sampler.set_scene_box(BOX)
    density = sphere_density()
    sampler.update(0, density)
    assert 0.0 < sampler.occupied_fraction < 0.2
    rays = rays_towards_origin(64)
    samples = sampler.eval()(rays, density)
    counts = per_ray_counts(samples)
    uniform_count = int(sampler.steps_per_diagonal * float((rays.far - rays.near).mean()) / (3**0.5 * 3.0))
    assert float(counts.float().mean()) < uniform_count / 4  # far fewer than marching every step
    assert float(samples.positions(rays).norm(dim=-1).max()) < 0.5 + 3 * 3.0 / 32  # only near the sphere
    assert (counts > 0).all()  # every ray aims at the sphere


def test_occupancy_grid_never_starves_training_rays_and_warns_when_empty() -> None:
    sampler = OccupancyGrid(resolution=16, warmup_steps=10)
    sampler.set_scene_box(BOX)
    with pytest.warns(UserWarning, match="no cell is occupied"):
        sampler.update(0, lambda points: torch.zeros(points.shape[0]))
    rays = rays_towards_origin(50)
    trained = sampler.train()(rays, generator=torch.Generator().manual_seed(0))
    assert (per_ray_counts(trained) >= 1).all()
    evaluated = sampler.eval()(rays)
    assert len(evaluated) == 0


def test_occupancy_grid_density_pass_queries_marched_steps_only_and_starving_rays_keep_their_steps() -> None:
    sampler = OccupancyGrid(resolution=32, warmup_steps=10, early_stop_min_drop=0.0)
    sampler.set_scene_box(BOX)
    density = sphere_density()
    sampler.update(0, density, generator=torch.Generator().manual_seed(0))
    hitting = rays_towards_origin(40)
    # rays parallel to those, shifted 1.2 sideways: through the box, passing 1.0 to 1.4 from the centre
    across = torch.randn(40, 3, generator=torch.Generator().manual_seed(1))
    sideways = torch.nn.functional.normalize(torch.linalg.cross(hitting.directions, across), dim=-1)
    origins = hitting.origins + 1.2 * sideways
    near, far = BOX.intersect(origins, hitting.directions)
    missing = Rays(origins, hitting.directions, near.clamp_min(0.0), far)
    rays = Rays(*(torch.cat([a, b]) for a, b in zip(
        (hitting.origins, hitting.directions, hitting.near, hitting.far),
        (missing.origins, missing.directions, missing.near, missing.far), strict=True)))
    queried: list[torch.Tensor] = []

    def recording(points: torch.Tensor) -> torch.Tensor:
        queried.append(points)
        return density(points)

    samples = sampler.train()(rays, recording, generator=torch.Generator().manual_seed(0))
    counts = per_ray_counts(samples)
    assert (counts[40:] == sampler.exploration_samples).all()  # every missing ray explores
    assert (counts[:40] >= 1).all()
    points = torch.cat(queried)
    assert points.shape[0] > 0
    assert float(points.norm(dim=-1).max()) < 0.9  # never a missing ray's exploration step


def test_occupancy_grid_state_round_trip_restores_grid_and_step_size() -> None:
    sampler = OccupancyGrid(resolution=8)
    sampler.set_scene_box(SceneBox.cube(3.0))
    sampler.update(0, sphere_density(2.0))
    fresh = OccupancyGrid(resolution=8)
    fresh.load_state_dict(sampler.state_dict())
    assert torch.equal(fresh.occupied, sampler.occupied)
    assert fresh.step_size == pytest.approx(sampler.step_size)


def _dense_marching_reference(sampler: OccupancyGrid, rays: Rays) -> tuple[torch.Tensor, torch.Tensor]:
    """Every marching step of every ray, kept when the cell of its midpoint is occupied (eval mode)."""
    step = sampler.step_size
    steps = torch.arange(sampler.steps_per_diagonal + 1, dtype=torch.float32)
    far = torch.maximum(rays.far, rays.near)
    grid_starts = rays.near[:, None] + (steps + 0.5 - 1.0) * step
    ends = (grid_starts + step).minimum(far[:, None])
    starts = grid_starts.maximum(rays.near[:, None])
    mids = 0.5 * (starts + ends)
    points = rays.origins[:, None] + rays.directions[:, None] * mids[..., None]
    keep = (ends > starts) & sampler.occupied[sampler._cell_of(points.reshape(-1, 3))].view(mids.shape)
    return starts[keep], keep.nonzero()[:, 0]


@pytest.mark.parametrize(("resolution", "steps_per_diagonal", "occupied_share"), [
    (32, 512, 0.002),  # segments of several steps, scattered single cells
    (33, 512, 0.002),  # a resolution the coarse factor does not divide
    (32, 4, 0.02),  # steps several coarse cells long: segments of one step, clipped ones included
    (260, 1024, 0.0005),  # above 256^3 cells the flat index is combined in integers (and the
    # occupied cells below lie in the last 20 x-slices, whose indices float32 cannot all hold)
])
def test_occupancy_grid_coarse_skipping_misses_no_occupied_step(resolution: int, steps_per_diagonal: int,
                                                               occupied_share: float) -> None:
    sampler = OccupancyGrid(resolution=resolution, steps_per_diagonal=steps_per_diagonal,
                            early_stop_eps=0.0).eval()
    sampler.set_scene_box(BOX)
    generator = torch.Generator().manual_seed(3)
    occupied = torch.rand(resolution, resolution**2, generator=generator) < occupied_share
    if resolution > 256:
        occupied[: resolution - 20] = False
    sampler.occupied.copy_(occupied.view(-1))
    rays = rays_towards_origin(1000, seed=5)
    # Intervals that end inside the box too, so that clipped steps lie next to occupied cells.
    shrink = 0.4 * torch.rand(2, len(rays), generator=generator)
    rays = Rays(rays.origins, rays.directions, rays.near + shrink[0], rays.far - shrink[1])
    samples = sampler(rays)
    starts, ray_indices = _dense_marching_reference(sampler, rays)
    assert len(samples) == len(starts) > 0
    assert torch.equal(samples.ray_indices, ray_indices)
    torch.testing.assert_close(samples.t_starts, starts)


def shell_density(radius: float = 0.5, thickness: float = 0.02):
    """A thin, faint shell: marching candidates are in occupied cells, yet rays pass through."""
    def density(points: torch.Tensor) -> torch.Tensor:
        return 5.0 * ((points.norm(dim=-1) - radius).abs() < thickness).float()
    return density


@pytest.mark.parametrize("density_fn, expect_pass", [(sphere_density(), True), (shell_density(), False)])
def test_occupancy_grid_runs_the_density_pass_only_where_it_drops_enough(density_fn,
                                                                        expect_pass: bool) -> None:
    sampler = OccupancyGrid(resolution=32, warmup_steps=10, update_every=4)
    sampler.set_scene_box(BOX)
    rays = rays_towards_origin(64)
    generator = torch.Generator().manual_seed(0)
    sampler.update(0, density_fn, generator=generator)  # an update step measures the pass
    sampler(rays, density_fn, generator=torch.Generator().manual_seed(1))
    dropped = float(sampler.early_stop_drop)
    assert (dropped >= sampler.early_stop_min_drop) == expect_pass, dropped
    sampler.update(1, density_fn)  # not an update step
    with_density = sampler(rays, density_fn, generator=torch.Generator().manual_seed(2))
    without_density = sampler(rays, None, generator=torch.Generator().manual_seed(2))
    assert (len(with_density) < len(without_density)) == expect_pass
    restored = OccupancyGrid(resolution=32, warmup_steps=10, update_every=4)
    restored.load_state_dict(sampler.state_dict())  # the decision travels with checkpoints
    restored_samples = restored(rays, density_fn, generator=torch.Generator().manual_seed(2))
    assert torch.equal(restored_samples.t_starts, with_density.t_starts)


def test_early_stop_decision_keeps_its_state_inside_the_band() -> None:
    # min_drop 0.5, band 0.05: starts at 0.55, stops below 0.45, keeps its state in between.
    assert [early_stop_stays_active(False, drop, 0.5, 0.05) for drop in (0.44, 0.5, 0.54, 0.55, 0.9)] == [
        False, False, False, True, True]
    assert [early_stop_stays_active(True, drop, 0.5, 0.05) for drop in (0.0, 0.44, 0.45, 0.5, 0.54)] == [
        False, False, True, True, True]
    assert early_stop_stays_active(False, 0.0, 0.0, 0.05)  # min_drop 0: always on


def test_early_stop_state_of_a_checkpoint_without_it_follows_its_measured_drop() -> None:
    sampler = OccupancyGrid(resolution=8)
    for drop, expect in [(0.6, True), (0.3, False)]:
        state = sampler.state_dict()
        del state["early_stop_active"]  # saved before the hysteresis existed
        state["early_stop_drop"] = torch.tensor(drop)
        restored = OccupancyGrid(resolution=8)
        restored.load_state_dict(state)
        assert bool(restored.early_stop_active) == restored._early_stop_active == expect


@pytest.mark.parametrize(("num_occupied", "expect_evaluated"), [(100, 512 + 100), (2000, 512 + 1024)])
def test_occupancy_grid_update_explores_a_share_and_reevaluates_occupied_cells_up_to_a_cap(
    num_occupied: int, expect_evaluated: int
) -> None:
    sampler = OccupancyGrid(resolution=16, warmup_steps=0, update_every=1, explore_fraction=1 / 8,
                            update_fraction=1 / 4, early_stop_eps=0.0)  # no probe queries
    sampler.set_scene_box(BOX)
    sampler.occupied.zero_()
    sampler.occupied[torch.randperm(16**3, generator=torch.Generator().manual_seed(0))[:num_occupied]] = True
    queried: list[int] = []

    def density(points: torch.Tensor) -> torch.Tensor:
        queried.append(len(points))
        return torch.zeros(len(points))

    sampler.update(5, density, generator=torch.Generator().manual_seed(1))
    assert sum(queried) == expect_evaluated


def test_occupancy_grid_refuses_an_explore_fraction_outside_0_1() -> None:
    with pytest.raises(ValueError, match="explore_fraction must be in"):
        OccupancyGrid(explore_fraction=0.0)


def _updates_until_the_shell_empties(shrink_at: int, **grid: float) -> int:
    """A field that fills a ball of radius 0.7, then from step ``shrink_at`` only radius 0.2: the
    grid updates (every 16 steps, one random point per cell) until no cell of the emptied shell
    between the two radii is occupied any more; returns how many updates after the shrink."""
    sampler = OccupancyGrid(resolution=24, early_stop_eps=0.0, **grid)
    sampler.set_scene_box(BOX)
    generator = torch.Generator().manual_seed(0)
    centres = sampler._cell_centers(torch.arange(24**3), torch.full((24**3, 3), 0.5))
    radius = centres.norm(dim=-1)
    # Cells (0.125 wide) wholly inside the large ball and clear of the small one's soft edge.
    shell = (radius > 0.45) & (radius < 0.58)
    assert int(shell.sum()) > 100
    for update in range(400):
        step = 16 * update
        ball = sphere_density(0.7 if step < shrink_at else 0.2)
        sampler.update(step, ball, generator=generator)
        if step >= shrink_at and not bool(sampler.occupied[shell].any()):
            return update - shrink_at // 16
    return 400


def test_occupancy_grid_forgets_faster_while_the_field_is_young() -> None:
    """A cell the field has emptied stays marked until its remembered maximum decays below the
    threshold: with ``early_decay`` 0.8 within the first ``early_decay_steps`` that takes a few
    few dozen updates, with 0.95 (later, or when turned off) over a hundred."""
    early = _updates_until_the_shell_empties(shrink_at=128, early_decay=0.8, early_decay_steps=1024)
    off = _updates_until_the_shell_empties(shrink_at=128, early_decay=0.8, early_decay_steps=0)
    late = _updates_until_the_shell_empties(shrink_at=1280, early_decay=0.8, early_decay_steps=1024)
    assert early <= 35 and off >= 100 and late >= 100, (early, off, late)  # measured 27, 116, 117


def test_occupancy_grid_refuses_a_decay_outside_0_1() -> None:
    with pytest.raises(ValueError, match=r"^early_decay must be a factor in \[0, 1\], got 1\.5$"):
        OccupancyGrid(early_decay=1.5)
