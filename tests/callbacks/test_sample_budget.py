"""SampleBudget: holds samples per step near a target, within a memory ceiling, across a resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from nerf_lightning.callbacks import SampleBudget
from nerf_lightning.callbacks.sample_budget import _SavedTensorBytes
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.fields import HashGridField
from nerf_lightning.samplers import OccupancyGrid, Uniform
from nerf_lightning.system.module import NerfModule


class _Record(pl.Callback):
    """Records rays and samples of every step (placed after the budget)."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, int]] = []

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        self.steps.append((int(outputs["num_rays"]), int(outputs["num_samples"])))


def _small_field() -> HashGridField:
    return HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16)


def _fit(scene: Path, budget: SampleBudget, sampler: torch.nn.Module, steps: int,
         ckpt_path: str | None = None, root: Path | None = None) -> _Record:
    record = _Record()
    trainer = pl.Trainer(max_steps=steps, logger=False, enable_progress_bar=False, limit_val_batches=0,
                         enable_model_summary=False, callbacks=[budget, record],
                         enable_checkpointing=root is not None, default_root_dir=root)
    datamodule = NerfDataModule(root=str(scene), rays_per_batch=64, steps_per_epoch=1000)
    trainer.fit(NerfModule(field=_small_field(), sampler=sampler), datamodule, ckpt_path=ckpt_path)
    return record


class _ChangeCost(pl.Callback):
    """Makes every ray four times as expensive after step ``at`` (as when a grid update refines)."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                           batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.at:
            pl_module.sampler.num_samples *= 4


@pytest.mark.slow
def test_samples_per_step_return_to_the_target_after_the_cost_per_ray_changes(tiny_scene: Path) -> None:
    budget = SampleBudget(target_samples=4000, min_rays=16, max_rays=4096, smoothing=0.5)
    record = _Record()
    trainer = pl.Trainer(max_steps=24, logger=False, enable_progress_bar=False, limit_val_batches=0,
                         enable_model_summary=False, enable_checkpointing=False,
                         callbacks=[budget, _ChangeCost(at=10), record])
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=64, steps_per_epoch=1000)
    trainer.fit(NerfModule(field=_small_field(), sampler=Uniform(num_samples=8)), datamodule)
    samples = [s for _, s in record.steps]
    assert samples[0] == 64 * 8 and all(abs(s - 4000) <= 8 for s in samples[3:10])  # converged
    assert samples[10] > 3 * 4000  # the first step at the new cost overshoots: it cannot be known before
    assert all(abs(s - 4000) <= 0.1 * 4000 for s in samples[15:]), samples  # and the budget recovers
    assert [r for r, _ in record.steps][-1] == 4000 // 32


@pytest.mark.slow
def test_memory_ceiling_caps_the_rays(tiny_scene: Path) -> None:
    free = SampleBudget(target_samples=4096, min_rays=16, max_rays=8192)
    capped = SampleBudget(target_samples=4096, min_rays=16, max_rays=8192, max_memory_mb=1.0)
    free_steps = _fit(tiny_scene, free, Uniform(num_samples=16), steps=4).steps
    capped_steps = _fit(tiny_scene, capped, Uniform(num_samples=16), steps=4).steps
    assert free_steps[-1][0] == 4096 // 16
    assert capped.bytes_per_sample is not None and capped.bytes_per_sample > 0
    ceiling_rays = int(2**20 / (capped.bytes_per_sample * 16))
    assert capped_steps[-1][0] == ceiling_rays < free_steps[-1][0]


def test_saved_activation_bytes_grow_with_the_batch() -> None:
    module = NerfModule(field=_small_field(), sampler=Uniform(num_samples=8))
    counter = _SavedTensorBytes()
    sizes = []
    for num_rays in (100, 200):
        from nerf_lightning.core.types import Rays

        rays = Rays(origins=torch.zeros(num_rays, 3), directions=torch.nn.functional.normalize(
            torch.randn(num_rays, 3, generator=torch.Generator().manual_seed(0)), dim=-1),
            near=torch.full((num_rays,), 0.1), far=torch.full((num_rays,), 1.0))
        counter.start()
        out, _ = module.render_rays(rays, torch.ones(3))
        counter.stop()
        sizes.append(counter.bytes)
        out.rgb.sum().backward()
    assert sizes[1] == pytest.approx(2 * sizes[0], rel=0.05)


@pytest.mark.slow
def test_budget_state_is_saved_and_restored(tiny_scene: Path, tmp_path: Path) -> None:
    first = SampleBudget(target_samples=2000, min_rays=16, max_rays=4096)
    _fit(tiny_scene, first, OccupancyGrid(resolution=16), steps=5, root=tmp_path)
    checkpoint = next(tmp_path.rglob("*.ckpt"))
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state = next(v for k, v in saved["callbacks"].items() if k.startswith("SampleBudget"))
    assert state["rays_per_batch"] == first.rays_per_batch
    resumed = SampleBudget(target_samples=2000, min_rays=16, max_rays=4096)
    record = _fit(tiny_scene, resumed, OccupancyGrid(resolution=16), steps=6, ckpt_path=str(checkpoint),
                  root=tmp_path / "resumed")
    assert record.steps[0][0] == first.rays_per_batch  # continues with the saved size, not 64


@pytest.mark.slow
def test_a_jump_in_samples_per_ray_is_cut_at_the_ceiling_within_the_step(tiny_scene: Path) -> None:
    """Sixteen times the samples per ray from one step to the next (an occupancy grid filling up
    after an empty one): the step trains on the leading rays that fit under ``max_samples``,
    error-driven pixel selection gets the errors of those rays, and the budget recovers."""
    from nerf_lightning.callbacks import ErrorFeedback

    class _Jump(_ChangeCost):
        def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any,
                               batch: Any, batch_idx: int) -> None:
            if trainer.global_step == self.at:
                pl_module.sampler.num_samples *= 16

    budget = SampleBudget(target_samples=4000, min_rays=16, max_rays=4096, smoothing=0.5, max_samples=6000)
    record = _Record()
    trainer = pl.Trainer(max_steps=20, logger=False, enable_progress_bar=False, limit_val_batches=0,
                         enable_model_summary=False, enable_checkpointing=False,
                         callbacks=[budget, _Jump(at=8), ErrorFeedback(), record])
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=64, steps_per_epoch=1000,
                                pixel_selection="error")
    trainer.fit(NerfModule(field=_small_field(), sampler=Uniform(num_samples=4)), datamodule)
    rays, samples = zip(*record.steps, strict=True)
    assert rays[7] == 1000 and samples[7] == 4000  # converged before the jump
    assert rays[8] == 6000 // 64 and samples[8] == 93 * 64  # cut: 1000 rays were drawn, 93 fit
    assert max(samples) <= 6000
    assert all(abs(s - 4000) <= 0.1 * 4000 for s in samples[14:]), samples
    assert datamodule.error_map is not None and torch.isfinite(datamodule.error_map.errors).all()


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["Proposal", "Hierarchical"])
def test_samplers_with_an_auxiliary_loss_train_through_a_cut_step(sampler: str, tiny_scene: Path) -> None:
    """Their loss keeps per-ray state from forward: after a cut it must cover only the rays kept."""
    from nerf_lightning.samplers import Hierarchical, Proposal

    made = (Proposal(proposal_samples=(16,), num_samples=8, proposal_max_resolution=(32,))
            if sampler == "Proposal"
            else Hierarchical(num_coarse=8, num_fine=8, separate_coarse_network=True))
    budget = SampleBudget(target_samples=4000, min_rays=200, max_rays=4096, max_samples=1000)
    record = _Record()
    trainer = pl.Trainer(max_steps=3, logger=False, enable_progress_bar=False, limit_val_batches=0,
                         enable_model_summary=False, enable_checkpointing=False, callbacks=[budget, record])
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=200, steps_per_epoch=1000)
    trainer.fit(NerfModule(field=_small_field(), sampler=made), datamodule)
    assert all(samples <= 1000 and rays < 200 for rays, samples in record.steps), record.steps
