"""Constructor specs: what fields, samplers and renderers record, and what cannot be recorded."""

from __future__ import annotations

import copy
import enum
import pickle
from pathlib import Path

import pytest
import torch
from torch import Tensor

from nerf_lightning.core.constructor_spec import NotRecordableError, component_spec
from nerf_lightning.fields import HashGridField
from nerf_lightning.rendering.renderer import VolumeRenderer
from nerf_lightning.samplers import OccupancyGrid, Proposal, Uniform
from nerf_lightning.system.module import NerfModule


class OffsetField(HashGridField):
    """A field with an argument that is no plain value."""

    def __init__(self, offset: Tensor | None = None) -> None:
        super().__init__(num_levels=2, log2_hashmap_size=10, max_resolution=32, hidden_dim=8)
        self.offset = offset


class Mode(enum.IntEnum):
    FAST = 1


def test_specs_hold_every_argument_with_tuples_as_lists() -> None:
    spec = component_spec(Proposal(proposal_samples=(32, 16), proposal_max_resolution=(64, 128)))
    assert spec["class_path"] == "nerf_lightning.samplers.proposal.Proposal"
    assert spec["init_args"] == {"proposal_samples": [32, 16], "num_samples": 32,
                                 "proposal_max_resolution": [64, 128], "loss_weight": 1.0,
                                 "spacing": "linear", "contraction": "none", "anneal_steps": 0,
                                 "distortion_loss_weight": 0.0, "distortion_loss_start": 0}


def test_copies_and_pickles_keep_the_recorded_arguments() -> None:
    sampler = OccupancyGrid(resolution=8, decay=0.5)
    assert component_spec(copy.deepcopy(sampler)) == component_spec(sampler)
    assert component_spec(pickle.loads(pickle.dumps(sampler))) == component_spec(sampler)
    assert component_spec(sampler)["init_args"]["resolution"] == 8


def test_arguments_that_are_no_plain_values_are_refused_by_name() -> None:
    with pytest.raises(NotRecordableError, match=r"OffsetField\(offset=...\): a Tensor is not a plain value"):
        component_spec(OffsetField(torch.zeros(3)))
    with pytest.raises(NotRecordableError, match=r"a Mode is not a plain value"):  # would pickle its class
        component_spec(Uniform(num_samples=Mode.FAST))
    with pytest.raises(NotRecordableError, match="does not subclass"):
        component_spec(torch.nn.Linear(2, 2))


def test_a_component_that_cannot_be_recorded_is_left_out_and_passed_in_to_load(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"field is not recorded .*load_from_checkpoint\(field=\.\.\.\)"):
        model = NerfModule(field=OffsetField(torch.zeros(3)), sampler=Uniform(num_samples=8),
                           renderer=VolumeRenderer())
    assert model.hparams["field"] is None and model.hparams["sampler"]["init_args"]["num_samples"] == 8
    path = tmp_path / "model.ckpt"
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
                "pytorch-lightning_version": "2.6.6"}, path)
    with pytest.warns(UserWarning, match="field is not recorded"):  # the rebuilt model says so again
        loaded = NerfModule.load_from_checkpoint(path, weights_only=True, field=OffsetField(torch.ones(3)))
    assert type(loaded.field) is OffsetField and float(loaded.field.offset.sum()) == 3.0
    assert loaded.sampler.num_samples == 8
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_a_plugin_sampler_comes_back_from_a_checkpoint(tmp_path: Path) -> None:
    plugin = pytest.importorskip("nerf_lightning_disparity")
    model = NerfModule(field=OffsetField(), sampler=plugin.Disparity(num_samples=12, min_near=0.25))
    path = tmp_path / "model.ckpt"
    torch.save({"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams),
                "pytorch-lightning_version": "2.6.6"}, path)
    loaded = NerfModule.load_from_checkpoint(path, weights_only=True)
    assert type(loaded.sampler) is plugin.Disparity
    assert (loaded.sampler.num_samples, loaded.sampler.min_near) == (12, 0.25)
    assert type(loaded.field) is OffsetField and loaded.field.offset is None
