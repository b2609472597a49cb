"""What the callbacks rely on is declared (nerf_lightning.system.contract): NerfModule and NerfDataModule
have all of it, and a callback attached to a module without its members stops at set-up with one line."""

from __future__ import annotations

from types import SimpleNamespace

import lightning.pytorch as pl
import pytest

from nerf_lightning.callbacks import AppearanceHalfFit, ErrorFeedback, SampleBudget, Telemetry, Viewer
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.fields import HashGridField
from nerf_lightning.system import contract
from nerf_lightning.system.module import NerfModule
from nerf_lightning.viewer import viewer_missing

MODULE_PROTOCOLS = [contract.SampleCeilingModule, contract.StageTimedModule, contract.RayRenderingModule,
                    contract.ImageRenderingModule]
DATA_PROTOCOLS = [contract.ResizableBatches, contract.RayErrorObserver, contract.NamedSplits,
                  contract.ScoredSplit, contract.SceneDescribing, contract.ImageBatches,
                  contract.DataWaitReporting, contract.RecordedData]


@pytest.fixture(scope="module")
def model() -> NerfModule:
    return NerfModule(field=HashGridField(num_levels=2, log2_hashmap_size=10))


@pytest.mark.parametrize("protocol", MODULE_PROTOCOLS, ids=lambda p: p.__name__)
def test_nerf_module_has_every_member_callbacks_rely_on(model: NerfModule, protocol: type) -> None:
    assert contract.members(protocol)
    assert contract.missing(model, protocol) == []


@pytest.mark.parametrize("protocol", DATA_PROTOCOLS, ids=lambda p: p.__name__)
def test_nerf_data_module_has_every_member_callbacks_rely_on(protocol: type) -> None:
    assert contract.missing(NerfDataModule(), protocol) == []


def _trainer(datamodule: object = None) -> SimpleNamespace:
    return SimpleNamespace(datamodule=datamodule, is_global_zero=True, world_size=1)


@pytest.mark.parametrize(
    ("callback", "stage", "members", "protocol"),
    [
        (SampleBudget(), "fit", "step_sample_limit", "SampleCeilingModule"),
        (Telemetry(), "fit", "stage_timer", "StageTimedModule"),
        (AppearanceHalfFit(), "test", "field, eval_chunk_rays, render_rays", "RayRenderingModule"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, pl.Callback) else None,
)
def test_a_callback_on_another_module_stops_at_setup_in_one_line(callback: pl.Callback, stage: str,
                                                                  members: str, protocol: str) -> None:
    with pytest.raises(contract.CallbackContractError) as raised:
        callback.setup(_trainer(NerfDataModule()), pl.LightningModule(), stage)
    message = str(raised.value)
    assert message == (f"{type(callback).__name__} needs a module with {members} "
                       f"(nerf_lightning.system.contract.{protocol}, as NerfModule has); it got "
                       f"LightningModule, which has no {members}")


def test_the_viewer_checks_its_module_when_it_is_on() -> None:
    if viewer_missing() is not None:
        pytest.skip(viewer_missing())
    with pytest.raises(contract.CallbackContractError, match=r"^Viewer needs a module with sampler, "
                       r"eval_chunk_rays, render_image \(.*ImageRenderingModule"):
        Viewer(enabled=True).setup(_trainer(NerfDataModule()), pl.LightningModule(), "fit")


def test_sample_budget_names_a_missing_data_module(model: NerfModule) -> None:
    expected = (r"^SampleBudget needs a data module with rays_per_batch \(.*ResizableBatches, as "
                r"NerfDataModule has\); it got no data module$")
    with pytest.raises(contract.CallbackContractError, match=expected):
        SampleBudget().setup(_trainer(None), model, "fit")
    SampleBudget().setup(_trainer(NerfDataModule()), model, "fit")


def test_callbacks_check_only_the_stages_they_act_in() -> None:
    bare = pl.LightningModule()
    SampleBudget().setup(_trainer(), bare, "test")
    Telemetry().setup(_trainer(), bare, "validate")
    AppearanceHalfFit().setup(_trainer(), bare, "fit")
    Viewer().setup(_trainer(), bare, "fit")  # off: nothing to check


def test_error_feedback_skips_a_data_module_that_does_not_observe_errors() -> None:
    seen = []

    class Observing:
        def observe_ray_errors(self, batch: object, errors: object) -> None:
            seen.append((batch, errors))

    feedback = ErrorFeedback()
    outputs = {"ray_error": "errors"}
    feedback.on_train_batch_end(_trainer(object()), pl.LightningModule(), outputs, "batch", 0)
    feedback.on_train_batch_end(_trainer(Observing()), pl.LightningModule(), outputs, "batch", 0)
    assert seen == [("batch", "errors")]


def test_a_property_counts_as_a_member_without_being_read() -> None:
    """``num_train_images`` loads the training split when read; a data module that is not set up (no
    dataset yet) still conforms, and one without the property does not."""
    assert "num_train_images" in contract.members(contract.SceneDescribing)
    assert contract.conforms(NerfDataModule(root="/nonexistent"), contract.SceneDescribing)
    unset = SimpleNamespace(scene_box=None, pixel_footprint=None)
    assert contract.missing(unset, contract.SceneDescribing) == ["num_train_images"]


class _EarlierImageBatches:
    """A third party's data module whose ``image_batch`` does not take ``as_fitted``."""

    num_train_images = 4

    def image_batch(self, split: str, index: int, device: object, centres: bool = False) -> None:
        raise AssertionError("not called")


class _OwnNames(_EarlierImageBatches):
    """Its own names for the parameters callers pass by position, and ``as_fitted`` taken."""

    def image_batch(self, which: str, i: int, on: object, centres: bool = False,  # type: ignore[override]
                    as_fitted: bool = False) -> None:
        raise AssertionError("not called")


class _PositionalOnly(_EarlierImageBatches):
    def image_batch(self, split: str, index: int, device: object, centres: bool = False,  # type: ignore[override]
                    as_fitted: bool = False, /) -> None:
        raise AssertionError("not called")


class _Keywords(_EarlierImageBatches):
    def image_batch(self, split: str, index: int, device: object, **options: object) -> None:
        raise AssertionError("not called")


def test_a_method_without_a_parameter_its_protocol_names_does_not_conform() -> None:
    """Callers pass the optional parameters by name (``image_batch(..., as_fitted=True)``): a method
    without one fails the check, named, rather than at the call; the positional ones may have any names,
    and ``**kwargs`` takes any name."""
    assert contract.missing(_EarlierImageBatches(), contract.ImageBatches) == ["image_batch(as_fitted=...)"]
    assert not contract.conforms(_EarlierImageBatches(), contract.ImageBatches)
    assert contract.missing(_PositionalOnly(), contract.ImageBatches) == [
        "image_batch(centres=...)", "image_batch(as_fitted=...)"]
    assert contract.conforms(_OwnNames(), contract.ImageBatches)
    assert contract.conforms(_Keywords(), contract.ImageBatches)
    with pytest.raises(contract.CallbackContractError,
                       match=r"it got _EarlierImageBatches, which has no image_batch\(as_fitted=\.\.\.\)$"):
        contract.require(SampleBudget(), _EarlierImageBatches(), contract.ImageBatches, role="data module")
