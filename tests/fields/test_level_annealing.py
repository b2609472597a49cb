"""Coarse-to-fine annealing of the hash grid's levels (``level_anneal_steps``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.fields import HashGridField
from nerf_lightning.system.module import NerfModule
from tests.helpers.runs import RUN, short_run_args


def annealed_field(steps: int = 30) -> HashGridField:
    torch.manual_seed(0)
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16,
                          level_anneal_steps=steps)
    with torch.no_grad():  # features far from zero, so every level moves the density
        field.encoding.table.uniform_(-1.0, 1.0)
    return field


def points(count: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    positions = torch.rand(count, 3, generator=generator) * 2.0 - 1.0
    directions = torch.nn.functional.normalize(torch.randn(count, 3, generator=generator), dim=-1)
    return positions, directions


def levels_that_count(field: HashGridField) -> list[bool]:
    """For each level: does changing its table rows change the density?"""
    positions, _ = points()
    encoding = field.encoding
    ends = [*encoding.level_offsets.tolist()[1:], encoding.table.shape[1]]
    before = field.density(positions)
    counts = []
    for start, end in zip(encoding.level_offsets.tolist(), ends, strict=True):
        saved = encoding.table.detach()[:, start:end].clone()
        with torch.no_grad():
            encoding.table[:, start:end] += 0.5
        counts.append(not torch.equal(field.density(positions), before))
        with torch.no_grad():
            encoding.table[:, start:end] = saved
    return counts


def test_levels_switch_on_coarsest_first_and_all_count_after_the_ramp() -> None:
    field = annealed_field(steps=30)
    field.set_training_step(0)
    assert levels_that_count(field) == [True, False, False, False]
    field.set_training_step(15)  # half-way: levels 0 and 1 in full, level 2 fading in
    assert levels_that_count(field) == [True, True, True, False]
    assert 0.0 < float(field.level_weights[2]) < 1.0
    field.set_training_step(30)
    assert levels_that_count(field) == [True, True, True, True]
    field.set_training_step(10_000)
    assert torch.equal(field.level_weights, torch.ones(4))


def test_without_annealing_every_level_counts_from_the_start() -> None:
    torch.manual_seed(0)
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16)
    with torch.no_grad():
        field.encoding.table.uniform_(-1.0, 1.0)
    field.set_training_step(0)
    assert levels_that_count(field) == [True, True, True, True]


def test_a_field_saved_mid_ramp_renders_as_it_trained_when_loaded_and_exported() -> None:
    field = annealed_field(steps=30)
    field.set_training_step(17)
    positions, directions = points()
    density, rgb = field(positions, directions)
    loaded = annealed_field(steps=30)  # a fresh field is at step 0 until told otherwise
    loaded.load_state_dict(field.state_dict())
    assert torch.equal(loaded(positions, directions)[0], density)
    exported_density, exported_rgb = field.standalone()(positions, directions)
    torch.testing.assert_close(exported_density, density, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(exported_rgb, rgb, atol=1e-6, rtol=1e-5)


def test_a_negative_ramp_is_one_line_naming_the_option() -> None:
    with pytest.raises(ValueError, match="level_anneal_steps must be >= 0"):
        HashGridField(level_anneal_steps=-1)


def _fit(scene: Path, out: Path, steps: int, *extra: str) -> Path:
    run_lightning_cli(["fit", *short_run_args(scene, out, "--model.field.level_anneal_steps", "8",
                                              "--checkpoint.every_n_train_steps", "1",
                                              "--trainer.limit_val_batches", "0",
                                              "--trainer.accelerator", "cpu",  # bitwise resume: on the CPU
                                              *extra, steps=steps)])
    return out / RUN / "checkpoints" / "last.ckpt"


@pytest.mark.slow
def test_a_fit_anneals_by_its_training_steps_and_resumes_mid_ramp_bitwise(tiny_scene: Path,
                                                                          tmp_path: Path) -> None:
    reference = torch.load(_fit(tiny_scene, tmp_path / "ref", 6), map_location="cpu", weights_only=True)
    # 6 steps of an 8-step ramp over 4 levels: the last step (index 5) reaches 1 + 3 * 5 / 8 levels.
    weights = reference["state_dict"]["field.level_weights"].tolist()
    assert weights[:2] == [1.0, 1.0] and weights[3] == 0.0
    assert weights[2] == pytest.approx((1.0 - torch.cos(torch.tensor(0.875 * torch.pi)).item()) / 2.0)
    # Stopped after 3 steps (the last reached 1.75 levels: level 2 still off) and resumed to 6.
    partial = _fit(tiny_scene, tmp_path / "part", 3)
    stopped = torch.load(partial, map_location="cpu", weights_only=True)
    assert stopped["state_dict"]["field.level_weights"].tolist()[2:] == [0.0, 0.0]
    resumed = torch.load(_fit(tiny_scene, tmp_path / "part", 6, "--ckpt_path", str(partial)),
                         map_location="cpu", weights_only=True)
    assert resumed["global_step"] == reference["global_step"] == 6
    for name, value in reference["state_dict"].items():
        assert torch.equal(resumed["state_dict"][name], value), f"{name} differs after resume"
    model = NerfModule.load_from_checkpoint(tmp_path / "ref" / RUN / "checkpoints" / "last.ckpt")
    assert isinstance(model.field, HashGridField)
    assert model.field.level_weights.tolist() == weights  # a loaded run renders as it trained
