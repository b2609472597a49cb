"""Fast module and sampler checks on every device present (CPU always, CUDA when there is one)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from nerf_lightning.core.distributed import buffer_versions, changed_buffers
from nerf_lightning.core.types import Rays, SceneBox
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.data.error_map import PixelErrorMap
from nerf_lightning.fields import HashGridField
from nerf_lightning.nn.encodings import HashGridEncoding
from nerf_lightning.rendering.packed import render_weights
from nerf_lightning.samplers import Hierarchical, OccupancyGrid, Proposal, Uniform
from nerf_lightning.system.module import NerfModule

BOX = SceneBox.cube(1.5)
SAMPLERS = {
    "Uniform": lambda: Uniform(num_samples=16),
    "OccupancyGrid": lambda: OccupancyGrid(resolution=16, update_every=2, warmup_steps=2),
    "Hierarchical": lambda: Hierarchical(num_coarse=8, num_fine=8),
    "Proposal": lambda: Proposal(proposal_samples=(16, 8), num_samples=8, proposal_max_resolution=(32, 32)),
}


def _rays(count: int, device: torch.device) -> Rays:
    generator = torch.Generator().manual_seed(0)
    directions = torch.nn.functional.normalize(torch.randn(count, 3, generator=generator), dim=-1)
    origins = -4.0 * directions
    near, far = BOX.intersect(origins, directions)
    return Rays(origins, directions, near.clamp_min(0.0), far).to(device)


def _sphere(points: torch.Tensor) -> torch.Tensor:
    return 200.0 * torch.sigmoid((0.5 - points.norm(dim=-1)) * 50.0)


def _generator(device: torch.device, seed: int) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_sampler_update_and_forward_are_deterministic_on_the_device(name: str, device: torch.device) -> None:
    def run(global_seed: int) -> tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor]:
        torch.manual_seed(0)  # the samplers' own networks start the same
        sampler = SAMPLERS[name]().to(device)
        sampler.set_scene_box(BOX)
        # From here on only the generators passed in may decide anything: the global RNG (CPU and
        # CUDA) is left in a different state for each run, so a sampler drawing from it differs.
        torch.manual_seed(global_seed)
        for step in range(4):  # the same update generator on every rank gives the same buffers
            sampler.update(step, _sphere, generator=_generator(device, 100 + step))
        samples = sampler(_rays(64, device), _sphere, generator=_generator(device, 7))
        return {k: v.clone() for k, v in sampler.state_dict().items()}, samples.t_starts, samples.ray_indices

    state_a, starts_a, rays_a = run(global_seed=1)
    state_b, starts_b, rays_b = run(global_seed=2)
    assert starts_a.device.type == device.type and rays_a.device.type == device.type
    assert torch.equal(starts_a, starts_b) and torch.equal(rays_a, rays_b)
    assert state_a.keys() == state_b.keys() and all(torch.equal(state_a[k], state_b[k]) for k in state_a)


def test_buffer_changes_are_detected_only_when_an_update_writes_them(device: torch.device) -> None:
    grid = OccupancyGrid(resolution=8, update_every=3, warmup_steps=0).to(device)
    updated = ["early_stop_active", "early_stop_drop", "occupancy", "occupied"]
    for step, expect in [(0, updated), (1, []), (2, []), (3, updated)]:
        before = buffer_versions(grid)
        grid.update(step, _sphere, generator=_generator(device, step))
        changed = changed_buffers(grid, before)
        named = {id(buffer): name for name, buffer in grid.named_buffers()}
        assert sorted(named[id(buffer)] for buffer in changed) == expect, step
    before = buffer_versions(grid)
    grid.occupancy = grid.occupancy.clone()  # a replaced buffer counts as changed too
    assert len(changed_buffers(grid, before)) == 1


def test_error_map_sums_of_parts_equal_one_update_of_the_whole(device: torch.device) -> None:
    shapes = [(24, 24)] * 3
    whole, parts = (PixelErrorMap(shapes, resolution=4, device=device) for _ in range(2))
    generator = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 3 * 24 * 24, (256,), generator=generator).to(device)
    errors = torch.rand(256, generator=generator).to(device)
    whole.update(pixels, errors)
    # What the all-reduce does across two ranks: sum the two ranks' tile sums, then apply.
    first, second = parts.tile_sums(pixels[:100], errors[:100]), parts.tile_sums(pixels[100:], errors[100:])
    parts.apply_tile_sums(first + second)
    torch.testing.assert_close(parts.errors, whole.errors)


def test_encoding_weights_and_transmittance_stay_float32_under_autocast(device: torch.device) -> None:
    dtype = torch.bfloat16 if device.type == "cpu" else torch.float16
    torch.manual_seed(0)
    encoding = HashGridEncoding(num_levels=4, log2_hashmap_size=12, max_resolution=512).to(device)
    points = torch.rand(1000, 3, device=device)
    exact = encoding(points)
    with torch.autocast(device.type, dtype=dtype):
        mixed = encoding(points)
        field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16).to(device)
        density, rgb = field(points * 2 - 1, torch.nn.functional.normalize(points, dim=-1))
        low = torch.full((1000,), 30.0, device=device, dtype=dtype)
        weights, transmittance = render_weights(low, torch.full((1000,), 0.01, device=device),
                                                torch.zeros(1000, dtype=torch.long, device=device), 1)
    assert mixed.dtype == torch.float32 and torch.equal(mixed, exact)
    assert density.dtype == torch.float32 and rgb.dtype == torch.float32
    assert weights.dtype == transmittance.dtype == torch.float32
    torch.testing.assert_close(weights.sum(), torch.tensor(1.0, device=device), atol=1e-4, rtol=0)


def test_hash_grid_table_gradient_under_deterministic_algorithms(device: torch.device) -> None:
    """``--trainer.deterministic true``: CUDA's deterministic scatter-add takes 1-D rows only, so the
    table's gradient is written row by row there; the same gradient as without."""
    torch.manual_seed(0)
    encoding = HashGridEncoding(num_levels=4, log2_hashmap_size=12, max_resolution=512).to(device)
    points = torch.rand(1000, 3, device=device)
    grad_out = torch.randn(1000, encoding.output_dim, device=device)
    encoding(points).backward(grad_out)
    default = encoding.table.grad.clone()
    encoding.table.grad = None
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        encoding(points).backward(grad_out)
    finally:
        torch.use_deterministic_algorithms(before)
    torch.testing.assert_close(encoding.table.grad, default)


@pytest.mark.slow
def test_training_steps_on_the_device(tiny_scene: Path, device: torch.device) -> None:
    torch.manual_seed(0)
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16)
    module = NerfModule(field=field, sampler=OccupancyGrid(resolution=16, update_every=2, warmup_steps=2))
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=128, steps_per_epoch=1000)
    trainer = pl.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, max_steps=3,
                         logger=False, enable_progress_bar=False, enable_model_summary=False,
                         enable_checkpointing=False, limit_val_batches=0)
    trainer.fit(module, datamodule)
    assert trainer.global_step == 3
    assert module.sampler.occupancy.device.type == device.type and (module.sampler.occupancy >= 0).all()
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
