"""Empty-space skipping with an occupancy grid, in pure PyTorch (instant-NGP / nerfacc style)."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor, nn

from nerf_lightning.core.types import DensityFn, PackedSamples, Rays, SceneBox
from nerf_lightning.samplers.base import Sampler
from nerf_lightning.samplers.occupancy.cascade import cascade_coarse, cell_positions, positions_to_cells
from nerf_lightning.samplers.occupancy.early_stop import early_stop_stays_active, probe_rays
from nerf_lightning.samplers.occupancy.exploration import StepLattice, explore_starving
from nerf_lightning.samplers.occupancy.marching import (
    OccupancyMarcher,
    march_occupied_steps,
    useful_marched_steps,
)
from nerf_lightning.samplers.occupancy.stepping import lattice_steps_across

__all__ = ["OccupancyGrid", "early_stop_stays_active"]


class OccupancyGrid(Sampler):
    """Marches rays with a fixed step through a grid of occupancy over the scene box.

    The grid holds, per cell, a decaying maximum of the field's opacity over one marching
    step (``density * step``). Every ``update_every`` training steps some cells are
    re-evaluated at a random point inside them: all cells during the first
    ``warmup_steps``, then a random ``explore_fraction`` of all cells plus the occupied ones (a
    random ``update_fraction`` of all cells' worth when more are occupied). A cell is occupied when its value
    exceeds ``min(occupancy_threshold, mean value)``.

    Rays are marched from ``near`` to ``far`` with ``steps_per_diagonal`` steps across the box
    diagonal (jittered per ray in training); steps in unoccupied cells are skipped. When the
    field's density is given, a no-grad pass then drops the steps whose transmittance is
    already below ``early_stop_eps`` (rays that have hit a surface) or whose opacity is below
    ``alpha_threshold``. Each ray therefore gets a *variable* number of samples, from none
    (empty space) to a few around its first surface.

    That pass costs density queries (:func:`.marching.useful_marched_steps`), so it runs only while it
    drops at least about ``early_stop_min_drop`` of the candidates of random probe rays, measured at
    every grid update (``early_stop_drop``, ``early_stop_active``), with hysteresis (:mod:`.early_stop`).

    Starvation guard: in training, rays left with no step (their cells all unoccupied, or, with an
    ``alpha_threshold`` above 0, every step too faint) receive ``exploration_samples`` steps at random
    places along them (:mod:`.exploration`), after the density pass, which does not query them.

    Unbounded scenes (``data.unbounded``, a contracting field): ``levels`` grids of the same
    resolution, level ``k`` over the scene box scaled by ``2^k`` about its centre, each position
    marked and looked up in the finest level holding it (nerfacc's cascade, :mod:`.cascade`; one
    level is the single grid). With ``cone_angle > 0`` the step starting at distance ``t`` is
    ``max(step, cone_angle t)`` long (:mod:`.stepping`), so steps through the outer levels grow
    with their cells: ``levels=4, cone_angle=1/256`` marches a ray at most 970 steps through a box
    8 times the scene's (4097 with fixed steps). The field is queried at world positions and
    applies its own contraction. One marching function serves every ``levels`` and
    ``cone_angle`` (:func:`.marching.march_occupied_steps`); they differ in one rule
    (:attr:`clips_rays`): a cascade or growing steps sample nothing beyond the outermost box,
    while a single grid with fixed steps marches its steps from ``near`` as the rays come.

    Args:
        resolution: cells along each side of the grid.
        steps_per_diagonal: marching steps across the box diagonal (sets the step size).
        update_every: training steps between grid updates.
        warmup_steps: steps during which every cell is re-evaluated at each update (a full
            sweep costs a density query per cell, so a few sweeps while the field changes
            fastest; afterwards an update evaluates the occupied cells and a few random ones).
        update_fraction: at most this share of all cells is re-evaluated among the occupied
            ones at each update after the warm-up (a random subset when more are occupied).
        explore_fraction: share of all cells drawn at random at each update after the warm-up,
            where density may have appeared in empty space. instant-NGP draws 1/4 on a GPU; on a
            CPU a density query costs a good part of a training sample, and after the warm-up
            random draws find few newly occupied cells, so the default draws 1/16 (drawing 1/8
            instead changed neither test PSNR nor budget hold in the sampler benchmark).
        decay: per-update decay of cell values.
        early_decay: the decay during the first ``early_decay_steps``: a cell stays marked until its
            old maximum decays below the threshold, which at 0.95 per 16 steps took hundreds of steps
            after a young, fast-changing field had emptied it. Later, the slower ``decay`` keeps thin
            surfaces that a cell's random point misses now and then.
        early_decay_steps: how long ``early_decay`` applies (0: never; configs set 512, see
            docs/benchmarks.md).
        occupancy_threshold: opacity per step above which a cell is occupied.
        early_stop_eps: transmittance below which a ray stops (``0`` disables the density pass).
        alpha_threshold: steps with less opacity than this are dropped.
        early_stop_min_drop: run the density pass between grid updates only while it drops at
            least about this share of candidate samples (``0``: always run it; see the
            hysteresis above).
        exploration_samples: steps given in training to a ray with none.
        eval_chunk_cells: cells evaluated per density call during updates (on a CPU, pieces that
            stay in cache sweep the grid faster than large ones).
        levels: cascaded grids, each twice the size of the one inside it (``resolution`` must then
            be a multiple of 4, so that a level's cells nest in the next one's); 1: the scene box only.
        cone_angle: how steps grow with distance (nerfacc uses 1/256 for unbounded scenes); 0: fixed.
    """

    COARSE_FACTOR = 2  # measured fastest on the demo scene among 1, 2, 3, 4 and 8
    PROBE_RAYS = 256  # random rays through the box that measure what early termination drops
    EARLY_STOP_BAND = 0.05  # half-width of the hysteresis band around early_stop_min_drop
    occupancy: Tensor
    occupied: Tensor
    bounds: Tensor
    early_stop_drop: Tensor
    early_stop_active: Tensor

    def __init__(
        self,
        resolution: int = 64,
        steps_per_diagonal: int = 512,
        update_every: int = 16,
        warmup_steps: int = 64,
        update_fraction: float = 0.125,
        explore_fraction: float = 0.0625,
        decay: float = 0.95,
        early_decay: float = 0.8,
        early_decay_steps: int = 0,
        occupancy_threshold: float = 0.01,
        early_stop_eps: float = 1e-4,
        alpha_threshold: float = 0.0,
        early_stop_min_drop: float = 0.5,
        exploration_samples: int = 1,
        eval_chunk_cells: int = 8192,
        levels: int = 1,
        cone_angle: float = 0.0,
    ) -> None:
        super().__init__()
        if resolution < 1 or steps_per_diagonal < 1 or update_every < 1:
            raise ValueError("resolution, steps_per_diagonal and update_every must be >= 1")
        if levels < 1 or (levels > 1 and resolution % 4):
            raise ValueError(f"levels must be >= 1, with a resolution divisible by 4 when "
                             f"above 1; got levels={levels}, resolution={resolution}")
        if not 0.0 <= cone_angle < 1.0:
            raise ValueError(f"cone_angle must be a number in [0, 1), got {cone_angle}")
        self.levels, self.cone_angle = levels, cone_angle
        self.resolution = resolution
        self.steps_per_diagonal = steps_per_diagonal
        self.update_every = update_every
        self.warmup_steps = warmup_steps
        for name, fraction in (("update_fraction", update_fraction), ("explore_fraction", explore_fraction)):
            if not 0.0 < fraction <= 1.0:
                raise ValueError(f"{name} must be in (0, 1], got {fraction}")
        self.update_fraction = update_fraction
        self.explore_fraction = explore_fraction
        for name, value in (("decay", decay), ("early_decay", early_decay)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be a factor in [0, 1], got {value}")
        if early_decay_steps < 0:
            raise ValueError(f"early_decay_steps must be >= 0, got {early_decay_steps}")
        self.decay, self.early_decay, self.early_decay_steps = decay, early_decay, early_decay_steps
        self.occupancy_threshold = occupancy_threshold
        self.early_stop_eps = early_stop_eps
        self.alpha_threshold = alpha_threshold
        self.early_stop_min_drop = early_stop_min_drop
        self.exploration_samples = exploration_samples
        self.eval_chunk_cells = eval_chunk_cells
        num_cells = levels * resolution**3
        self.register_buffer("occupancy", torch.full((num_cells,), -1.0))  # -1: never evaluated
        self.register_buffer("occupied", torch.ones(num_cells, dtype=torch.bool))
        self.register_buffer("bounds", SceneBox.cube(1.5).as_tensor())
        # Share of candidates the density pass dropped when last measured (1: run it until measured).
        self.register_buffer("early_stop_drop", torch.ones(()))
        # Whether the pass runs (on until measured), kept on the host too: deciding reads no device.
        self.register_buffer("early_stop_active", torch.ones((), dtype=torch.bool))
        self._early_stop_active = True
        self._warned_empty = False
        self._step_size = self._compute_step_size()
        self._coarse: Tensor | None = None  # derived from `occupied` and `bounds`, rebuilt on change

    # ----------------------------------------------------------------- geometry
    def set_scene_box(self, box: SceneBox) -> None:
        self.bounds.copy_(box.as_tensor())
        self._step_size = self._compute_step_size()
        self._coarse = None

    def _compute_step_size(self) -> float:
        return float((self.bounds[1] - self.bounds[0]).norm()) / self.steps_per_diagonal

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        drop = state_dict.get(prefix + "early_stop_drop")
        if drop is not None and prefix + "early_stop_active" not in state_dict:  # saved before hysteresis
            state_dict[prefix + "early_stop_active"] = torch.tensor(float(drop) >= self.early_stop_min_drop)
        super()._load_from_state_dict(state_dict, prefix, *args)
        self._early_stop_active = bool(self.early_stop_active)
        self._step_size = self._compute_step_size()
        self._coarse = None

    @property
    def step_size(self) -> float:
        """Marching step in world units, kept as a Python float so sampling needs no host read."""
        return self._step_size

    @property
    def max_steps(self) -> int:
        """Marching steps per ray at most: the outermost box's diagonal from any ``near``."""
        return lattice_steps_across(self.steps_per_diagonal * 2 ** (self.levels - 1), self._step_size,
                                    self.cone_angle)

    @property
    def clips_rays(self) -> bool:
        """Whether rays are marched only inside the outermost box: with several levels or growing
        steps, whose outermost box is where the grids end and nothing lies beyond to mark. A single
        grid with fixed steps marches ``max_steps`` steps from ``near`` whatever the rays' ``far``:
        bounded scenes' rays end at the box anyway, and on unbounded rays the steps beyond the box
        look positions up in its boundary cells, which then stand for the background
        (``docs/samplers.md`` compares the two on unbounded rays)."""
        return self.levels > 1 or self.cone_angle > 0.0

    def _cell_of(self, positions: Tensor) -> Tensor:
        """``[S]`` flat cell index of world positions ``[S, 3]`` (clamped into the grid)."""
        return positions_to_cells(positions, self.bounds, self.resolution, self.levels)

    def _cell_centers(self, cells: Tensor, jitter: Tensor) -> Tensor:
        """World positions ``[C, 3]`` inside ``cells [C]`` at offsets ``jitter [C, 3]`` in ``[0, 1)``."""
        return cell_positions(cells, jitter, self.resolution, self.levels, self.bounds)

    # ------------------------------------------------------------------- update
    @torch.no_grad()
    def update(self, step: int, density_fn: DensityFn, *, generator: torch.Generator | None = None) -> None:
        if step % self.update_every != 0:
            return
        num_cells = self.occupancy.numel()
        device = self.occupancy.device
        if step < self.warmup_steps:
            cells = torch.arange(num_cells, device=device)
        else:
            explored = max(1, int(num_cells * self.explore_fraction))
            uniform = torch.randint(0, num_cells, (explored,), device=device, generator=generator)
            share = max(1, int(num_cells * self.update_fraction))
            occupied = self.occupied.nonzero()[:, 0]  # a host read, once per update
            if occupied.numel() > share:
                pick = torch.randint(0, occupied.numel(), (share,), device=device, generator=generator)
                occupied = occupied[pick]
            cells = torch.cat([uniform, occupied])
        step_size = self.step_size
        values = torch.empty(cells.shape[0], device=device)
        # Densities in float32 also under autocast: a young field's densities differ from cell
        # to cell by less than bf16 resolves, and ties with the mean leave no cell above it.
        with torch.autocast(device.type, enabled=False):
            for start in range(0, cells.shape[0], self.eval_chunk_cells):
                chunk = cells[start : start + self.eval_chunk_cells]
                jitter = torch.rand(chunk.shape[0], 3, device=device, generator=generator)
                positions = self._cell_centers(chunk, jitter)
                values[start : start + chunk.shape[0]] = density_fn(positions).float() * step_size
        # A cell drawn several times keeps the largest of its values. Writing them with
        # ``occupancy[cells] = values`` would keep whichever write lands last, which on a CPU
        # depends on thread timing once ``cells`` passes the parallel grain (runs would differ);
        # the decayed old value is the same for every duplicate, and a maximum is order-free.
        decay = self.early_decay if step < self.early_decay_steps else self.decay
        self.occupancy[cells] = self.occupancy[cells] * decay
        self.occupancy.scatter_reduce_(0, cells, values, reduce="amax")
        evaluated = self.occupancy >= 0
        mean = self.occupancy[evaluated].mean() if bool(evaluated.any()) else self.occupancy.new_tensor(0.0)
        threshold = torch.clamp(mean, max=self.occupancy_threshold)
        self.occupied.copy_((self.occupancy > threshold) | ~evaluated)
        self._coarse = None
        self._measure_early_stop(density_fn, generator)
        occupied_fraction = float(self.occupied.float().mean())
        if occupied_fraction == 0.0 and not self._warned_empty:
            warnings.warn(
                f"OccupancyGrid: no cell is occupied after the update at step {step} "
                f"(threshold {float(threshold):.3g}); rays only get exploration samples until "
                "the field grows density again",
                stacklevel=2,
            )
            self._warned_empty = True
        elif occupied_fraction > 0.0:
            self._warned_empty = False

    @property
    def occupied_fraction(self) -> float:
        """Share of cells currently occupied (a host read: for logging, not the hot loop)."""
        return float(self.occupied.float().mean())

    @torch.no_grad()
    def occupied_points(self, max_points: int) -> Tensor | None:
        """Centres of the occupied cells, evenly thinned to at most ``max_points``."""
        cells = self.occupied.nonzero(as_tuple=True)[0]
        if cells.numel() > max_points:
            picks = torch.linspace(0, cells.numel() - 1, max_points, device=cells.device).long()
            cells = cells[picks]
        return self._cell_centers(cells, torch.full((cells.numel(), 3), 0.5, device=cells.device))

    # ----------------------------------------------------------------- sampling
    def _refresh_coarse(self) -> None:
        """Rebuild the coarse, dilated occupancy used to skip long empty stretches at once.

        A coarse cell covers ``COARSE_FACTOR^3`` cells and is occupied when any of them or of
        its 26 neighbours' cells is (with the finer levels folded in, :func:`.cascade.cascade_coarse`):
        testing one point of a ray segment no longer than a coarse cell against it can never miss
        an occupied cell the segment touches.
        """
        res = self.resolution
        self._coarse = cascade_coarse(self.occupied, res, self.levels, self.COARSE_FACTOR)
        coarse_cell = float((self.bounds[1] - self.bounds[0]).min()) / res * self.COARSE_FACTOR
        self._steps_per_segment = max(1, min(64, int(coarse_cell / self._step_size)))

    def forward(
        self, rays: Rays, density_fn: DensityFn | None = None, *, generator: torch.Generator | None = None
    ) -> PackedSamples:
        num_rays, device = len(rays), rays.device
        if self.training:
            offsets = torch.rand(num_rays, device=device, generator=generator)
        else:
            offsets = torch.full((num_rays,), 0.5, device=device)
        ray_index, starts, ends, lattice, near, far = self._march(rays, offsets)

        # Early ray termination, when it pays (see the class docstring), on the marched steps only.
        if density_fn is not None and self.early_stop_eps > 0.0 and self._early_stop_active:
            useful = useful_marched_steps(density_fn, rays, ray_index, starts, ends, self.early_stop_eps,
                                          self.alpha_threshold)
            selected = useful.nonzero(as_tuple=True)[0]
            ray_index, starts, ends = ray_index[selected], starts[selected], ends[selected]

        # Starvation guard: rays left without samples get random steps (training only). After the pass,
        # so it never queries them: they are kept whatever their density, and in an object scene most
        # rays of a batch miss the object.
        if self.training and self.exploration_samples > 0:
            steps = StepLattice(lattice, self._step_size, self.cone_angle)
            ray_index, starts, ends = explore_starving(
                ray_index, starts, ends, near, far, steps, self.exploration_samples, self.max_steps - 1,
                generator,
            )
        return PackedSamples(t_starts=starts, t_ends=ends, ray_indices=ray_index, num_rays=num_rays)

    def standalone(self, field: nn.Module) -> OccupancyMarcher:
        """Evaluation's marching, and its density pass through ``field`` when that runs."""
        self._refresh_coarse()  # the coarse dilated grid exactly as evaluation builds it
        assert self._coarse is not None
        return OccupancyMarcher(
            self.occupied.cpu(), self._coarse.cpu(), self.bounds.cpu(), self.resolution, self.levels,
            self.step_size, self.cone_angle, self.max_steps, self._steps_per_segment, self.COARSE_FACTOR,
            self.clips_rays, field, early_stop=self._early_stop_active and self.early_stop_eps > 0.0,
            early_stop_eps=self.early_stop_eps, alpha_threshold=self.alpha_threshold,
        )

    def _march(self, rays: Rays, offsets: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The marching steps of ``rays`` that lie in occupied cells (:func:`march_occupied_steps`).

        Args:
            rays: ``R`` rays.
            offsets: ``[R]`` position of each ray's step lattice, in steps, in ``[0, 1)``.

        Returns:
            ``ray_index [S]`` (grouped by ray, ordered along it), ``starts [S]``, ``ends [S]``,
            ``lattice [R]``, where each ray's step ``0`` begins (a distance for fixed steps, a step
            number otherwise: :class:`StepLattice`), and the ``near, far [R]`` marched.
        """
        if self._coarse is None or self._coarse.device != self.occupied.device:
            self._refresh_coarse()
        assert self._coarse is not None
        return march_occupied_steps(
            rays.origins, rays.directions, rays.near, rays.far, offsets, self.occupied, self._coarse,
            self.resolution, self.levels, self.bounds, self._step_size, self.cone_angle, self.max_steps,
            self._steps_per_segment, self.COARSE_FACTOR, self.clips_rays,
        )

    @torch.no_grad()
    def _measure_early_stop(self, density_fn: DensityFn, generator: torch.Generator | None) -> None:
        """Share of the marching steps of random probe rays that the density pass would drop.

        Probe rays come from the update's generator, which is the same in every process of a
        data-parallel run, so every process reaches the same decision without communicating.
        """
        if self.early_stop_eps <= 0.0:
            drop = 0.0
        else:
            rays = probe_rays(self.bounds, self.PROBE_RAYS, generator)
            offsets = torch.rand(len(rays), device=rays.device, generator=generator)
            ray_index, starts, ends, *_ = self._march(rays, offsets)
            kept = int(useful_marched_steps(density_fn, rays, ray_index, starts, ends, self.early_stop_eps,
                                            self.alpha_threshold).sum())
            drop = 1.0 - kept / max(ray_index.numel(), 1)
        self.early_stop_drop.fill_(drop)
        self._early_stop_active = early_stop_stays_active(
            self._early_stop_active, drop, self.early_stop_min_drop, self.EARLY_STOP_BAND
        )
        self.early_stop_active.fill_(self._early_stop_active)
