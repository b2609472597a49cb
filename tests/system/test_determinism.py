"""Bitwise determinism at realistic sizes on a multi-threaded CPU.

The tiny scenes of ``test_runs.py`` stay below the sizes where CPU kernels split their work
over threads; these tests run above them, with two threads, where an operation whose result
depends on thread timing (such as an index write with duplicate indices) makes two runs
differ.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.core.types import SceneBox
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.nn.encodings import HashGridEncoding
from nerf_lightning.nn.hash_kernels import hash_corners
from nerf_lightning.samplers import OccupancyGrid
from tests.helpers.runs import DEMO_CONFIG, RUN

THREADS = 2
# The grid's warm-up (full sweeps) ends at step 8 instead of the config's 64, so the updates with
# repeated random cells (steps 8 and 16) come after 24 steps rather than 80; everything whose size
# decides whether kernels split over threads (scene, grid, field, samples per step) stays shipped.
GRID_WARMUP = 8
STEPS = 24


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)


def _encode_and_backward(encoding: HashGridEncoding, points: torch.Tensor,
                         grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    encoding.table.grad = None
    features = encoding(points)
    features.backward(grad_out)
    return features.detach(), encoding.table.grad.clone()


def test_hash_grid_gather_and_scatter_are_thread_count_independent() -> None:
    """The default hash grid (16 levels, 2^17 rows) on a demo step's 16384 samples: features and table
    gradient bitwise equal on one and on two threads (the kernels split the feature rows over threads),
    and equal to a float64 gather and scatter of the same corners up to float32 rounding."""
    torch.manual_seed(0)
    encoding = HashGridEncoding()
    with torch.no_grad():
        encoding.table.normal_()
    generator = torch.Generator().manual_seed(1)
    points = torch.rand(16384, 3, generator=generator) * 0.6 + 0.2  # an object's share of the box
    grad_out = torch.randn(16384, encoding.output_dim, generator=generator)
    before = torch.get_num_threads()
    try:
        results = {}
        for threads in (1, THREADS):
            torch.set_num_threads(threads)
            results[threads] = _encode_and_backward(encoding, points, grad_out)
    finally:
        torch.set_num_threads(before)
    for got, want in zip(results[THREADS], results[1], strict=True):
        assert torch.equal(got, want)

    index, weights = hash_corners(points, encoding.resolutions, encoding.max_corner, encoding.axis_strides,
                                  encoding.level_offsets, encoding.num_dense_levels, encoding.hash_mask)
    table = encoding.table.detach().double()  # [F, T]
    corners = table[:, index]  # [F, L, 8, S]
    features = (corners * weights.double()).sum(2).permute(2, 1, 0).reshape(16384, -1)  # [S, L * F]
    grad = grad_out.double().reshape(16384, encoding.num_levels, -1).permute(2, 1, 0)  # [F, L, S]
    sources = (weights.double() * grad[:, :, None, :]).reshape(table.shape[0], -1)
    grad_table = torch.stack([torch.zeros_like(row).index_add_(0, index.reshape(-1), source)
                              for row, source in zip(table, sources, strict=True)])
    torch.testing.assert_close(results[1][0].double(), features, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(results[1][1].double(), grad_table, rtol=1e-5, atol=1e-5)


def _sphere_density(positions: torch.Tensor) -> torch.Tensor:
    return torch.where(positions.norm(dim=-1) < 0.6, 50.0, 0.0) + 0.1 * positions[:, 0].sin().abs()


def test_occupancy_update_with_repeated_cells_is_repeatable(two_threads: None) -> None:
    """After the warm-up an update draws cells with replacement (default 128^3 grid)."""
    grid = OccupancyGrid()
    grid.set_scene_box(SceneBox.cube(1.0))
    grid.update(0, _sphere_density, generator=torch.Generator().manual_seed(0))  # a full sweep
    state = {name: value.clone() for name, value in grid.state_dict().items()}
    results = []
    for _ in range(4):
        grid.load_state_dict(state)
        grid.update(grid.warmup_steps, _sphere_density, generator=torch.Generator().manual_seed(1))
        results.append(grid.occupancy.clone())
    assert all(torch.equal(results[0], result) for result in results[1:])
    cells = torch.randint(0, grid.occupancy.numel(), (int(grid.occupancy.numel() * grid.explore_fraction),),
                          generator=torch.Generator().manual_seed(2))
    assert cells.unique().numel() < cells.numel()  # the draw sizes above do repeat cells


@pytest.fixture(scope="module")
def demo_scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo scene at its shipped size: its 100 training views of 100x100, byte for byte (each split's
    cameras come from a seed of their own). One validation and one test view instead of 10 and 20: the fits
    below, without validation, render none of them, and the 28 spared are a fifth of the scene's making."""
    return make_demo_scene(tmp_path_factory.mktemp("demo") / "demo", num_val=1, num_test=1)


def _checkpoint(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    if isinstance(a, torch.Tensor):
        return [] if isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b) else [where]
    if isinstance(a, dict):
        return [f"{where}/{key}" for key in a.keys() ^ b.keys()] + [
            d for key in a.keys() & b.keys() for d in _differences(a[key], b[key], f"{where}/{key}")
        ]
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return [where]
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in _differences(x, y, f"{where}[{i}]")]
    return [] if a == b else [where]


@pytest.mark.slow
def test_demo_config_trains_bitwise_repeatably_on_two_threads(
    demo_scene: Path, tmp_path: Path, two_threads: None
) -> None:
    """Two 24-step runs of the shipped demo config (past the occupancy grid's warm-up, with
    error-driven pixels): identical weights, optimizer moments, sampler grid and callback state."""
    checkpoints = []
    for name in ("a", "b"):
        out = tmp_path / name
        run_lightning_cli(["fit", "--config", str(DEMO_CONFIG), "--data.root", str(demo_scene),
                           "--data.make_demo", "false", "--trainer.default_root_dir", str(out),
                           "--run_name", RUN, "--trainer.accelerator", "cpu", "--trainer.max_time", "null",
                           "--trainer.max_steps", str(STEPS), "--trainer.limit_val_batches", "0",
                           "--trainer.enable_progress_bar", "false", "--seed_everything", "7",
                           "--data.pixel_selection", "error", "--data.cache", "false",
                           "--model.sampler.warmup_steps", str(GRID_WARMUP),
                           "--model.sampler.update_every", str(GRID_WARMUP)])
        checkpoints.append(_checkpoint(out / RUN / "checkpoints" / "last.ckpt"))
    a, b = checkpoints
    assert a["global_step"] == b["global_step"] == STEPS
    keys = ("state_dict", "optimizer_states", "callbacks", "loops")
    differences = _differences({k: a[k] for k in keys}, {k: b[k] for k in keys})
    output_paths = {"dirpath", "last_model_path"}  # the two runs write into different folders
    # Wall-clock times, which schedule validation but never touch what is trained:
    clock = {f"/callbacks/TimedValidation/{name}" for name in ("elapsed", "spent", "last_end",
                                                               "last_duration")}
    assert [d for d in differences if d.rsplit("/", 1)[-1] not in output_paths and d not in clock] == []
