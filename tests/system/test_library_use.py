"""Library use: ``NerfModule.load_from_checkpoint`` rebuilds a trained model from its checkpoint alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.core.types import SceneBox
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.fields import HashGridField
from nerf_lightning.rendering.renderer import VolumeRenderer
from nerf_lightning.samplers import OccupancyGrid, Uniform
from nerf_lightning.system.image_render import ImageRender
from nerf_lightning.system.module import NerfModule
from tests.helpers.runs import RUN, short_run_args

CPU = torch.device("cpu")
Fit = tuple[NerfModule, NerfDataModule, Path]  # trained model, its data module, last.ckpt


def _plain(value: Any) -> bool:
    """Only what weights-only loading and a YAML config can hold."""
    if value is None or type(value) in (bool, int, float, str):
        return True
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    return isinstance(value, dict) and all(isinstance(k, str) and _plain(v) for k, v in value.items())


def _render(model: NerfModule, datamodule: NerfDataModule) -> ImageRender:
    return model.eval().render_image(datamodule.image_batch("test", 0, CPU))


def _assert_same_render(a: ImageRender, b: ImageRender) -> None:
    for name in ("rgb", "depth", "opacity", "samples_per_ray"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def _assert_same_state(a: NerfModule, b: NerfModule) -> None:
    state_a, state_b = a.state_dict(), b.state_dict()
    assert state_a.keys() == state_b.keys()
    for key in state_a:
        assert torch.equal(state_a[key], state_b[key]), key


@pytest.fixture(scope="module")
def cli_fit(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Fit:
    """A 3-step ``fit`` from the command line: its trained model, data module and ``last.ckpt``."""
    out = tmp_path_factory.mktemp("cli_fit")
    cli = run_lightning_cli(["fit", *short_run_args(tiny_scene, out, "--model.eval_chunk_rays", "200",
                                                    steps=3)])
    return cli.model, cli.datamodule, out / RUN / "checkpoints" / "last.ckpt"


@pytest.mark.slow
def test_a_cli_checkpoint_loads_back_into_the_trained_model(cli_fit: Fit) -> None:
    trained, datamodule, last = cli_fit
    hparams = torch.load(last, map_location="cpu", weights_only=True)["hyper_parameters"]
    assert _plain(hparams)
    assert hparams["sampler"]["init_args"]["resolution"] == 16
    assert hparams["field"]["init_args"]["num_levels"] == 4

    loaded = NerfModule.load_from_checkpoint(last, map_location="cpu", weights_only=True)
    assert type(loaded.field) is HashGridField and type(loaded.sampler) is OccupancyGrid
    assert type(loaded.renderer) is VolumeRenderer
    assert (loaded.sampler.resolution, loaded.eval_chunk_rays) == (16, 200)
    # The scene box and the occupancy grid come back from the state_dict, not from a data module.
    assert datamodule.scene_box is not None
    assert torch.equal(loaded.field.scene_bounds, datamodule.scene_box.as_tensor())
    assert not torch.equal(loaded.sampler.bounds, SceneBox.cube(1.5).as_tensor())
    assert loaded.sampler.step_size == trained.sampler.step_size
    _assert_same_state(loaded, trained)
    _assert_same_render(_render(loaded, datamodule), _render(trained, datamodule))


@pytest.mark.slow
def test_a_python_trainer_checkpoint_loads_back_into_the_trained_model(tiny_scene: Path,
                                                                       tmp_path: Path) -> None:
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16)
    model = NerfModule(field=field,
                       sampler=OccupancyGrid(resolution=16, steps_per_diagonal=128),
                       renderer=VolumeRenderer(background_override=(0.0, 0.0, 0.0),
                                               near_gradient_distance=1.5),
                       learning_rate=5e-3)
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=256, steps_per_epoch=3)
    trainer = pl.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                         default_root_dir=tmp_path)
    trainer.fit(model, datamodule)
    path = tmp_path / "model.ckpt"
    trainer.save_checkpoint(path)

    hparams = torch.load(path, map_location="cpu", weights_only=True)["hyper_parameters"]
    assert _plain(hparams)
    loaded = NerfModule.load_from_checkpoint(path, weights_only=True)
    assert loaded.learning_rate == 5e-3
    assert (loaded.sampler.resolution, loaded.sampler.steps_per_diagonal) == (16, 128)
    assert loaded.field.encoding.num_levels == 4
    assert tuple(loaded.renderer.background_override) == (0.0, 0.0, 0.0)
    assert loaded.renderer.near_gradient_distance == 1.5
    assert bool((loaded.sampler.occupancy >= 0).any())  # updated at step 0: the trained grid came back
    _assert_same_state(loaded, model)
    _assert_same_render(_render(loaded, datamodule), _render(model, datamodule))

    # A checkpoint from before the renderer had near_gradient_distance loads with it off.
    old = torch.load(path, map_location="cpu", weights_only=True)
    del old["hyper_parameters"]["renderer"]["init_args"]["near_gradient_distance"]
    torch.save(old, tmp_path / "old.ckpt")
    older = NerfModule.load_from_checkpoint(tmp_path / "old.ckpt", weights_only=True)
    assert older.renderer.near_gradient_distance == 0.0
    assert tuple(older.renderer.background_override) == (0.0, 0.0, 0.0)


def test_defaults_and_arguments_given_positionally_are_recorded() -> None:
    model = NerfModule(None, Uniform(32, False))
    hparams = dict(model.hparams)
    assert hparams["sampler"] == {"class_path": "nerf_lightning.samplers.uniform.Uniform",
                                  "init_args": {"num_samples": 32, "jitter": False}}
    assert hparams["field"]["class_path"] == "nerf_lightning.fields.hash_grid.HashGridField"
    assert hparams["field"]["init_args"]["num_levels"] == 16  # the default, filled in
    assert hparams["renderer"] == {"class_path": "nerf_lightning.rendering.renderer.VolumeRenderer",
                                   "init_args": {"background_override": None, "near_gradient_distance": 0.0}}


@pytest.mark.slow
def test_test_command_takes_the_model_from_the_checkpoint_under_the_config_and_options(
    cli_fit: Fit, tiny_scene: Path, tmp_path: Path
) -> None:
    _, _, last = cli_fit
    # Without the sampler's --model.sampler.resolution 16 the config alone builds a 64^3 grid that
    # the checkpoint's state would not fit: the checkpoint's hyperparameters fill it in.
    args = short_run_args(tiny_scene, tmp_path, sampler_args=())
    cli = run_lightning_cli(["test", *args, "--ckpt_path", str(last)])
    assert cli.model.sampler.resolution == 16 and cli.model.eval_chunk_rays == 200
    # An option given on the command line wins over the checkpoint's value.
    cli = run_lightning_cli(["test", *args, "--ckpt_path", str(last), "--model.eval_chunk_rays", "64"])
    assert cli.model.eval_chunk_rays == 64 and cli.model.sampler.resolution == 16

    # A checkpoint saved before NerfModule kept hyperparameters loads as before: the model is the config's.
    old = torch.load(last, map_location="cpu", weights_only=True)
    for key in ("hyper_parameters", "hparams_name"):
        old.pop(key, None)
    old_path = tmp_path / "old.ckpt"
    torch.save(old, old_path)
    cli = run_lightning_cli(["test", *short_run_args(tiny_scene, tmp_path), "--ckpt_path", str(old_path)])
    assert float(cli.trainer.callback_metrics["test/psnr"]) > 5.0
    assert cli.model.eval_chunk_rays == 8192  # nothing came from the checkpoint
