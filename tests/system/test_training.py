"""Integration: real Trainer runs from the CLI on a tiny generated scene."""

from __future__ import annotations

import json
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nerf_lightning.cli import main, run_lightning_cli
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.samplers import OccupancyGrid, Uniform
from nerf_lightning.system.module import NerfModule
from tests.helpers.runs import RUN, short_run_args

pytestmark = pytest.mark.slow  # every test starts a Trainer (or LightningCLI)


@pytest.fixture(scope="module")
def trained_run(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("run")
    run_lightning_cli(["fit", *short_run_args(tiny_scene, out)])
    return out / RUN


def _events(log_dir: Path) -> EventAccumulator:
    accumulator = EventAccumulator(str(log_dir), size_guidance={"images": 0, "scalars": 0})
    accumulator.Reload()
    return accumulator


def test_fit_logs_scalars_and_previews_to_tensorboard(trained_run: Path) -> None:
    events = _events(trained_run)
    scalars = set(events.Tags()["scalars"])
    for tag in [
        "train/loss",
        "train/psnr",
        "train/rays_per_batch",
        "train/samples_per_ray",
        "val/psnr",
        "val/ssim",
        "budget/rays",
        "budget/samples",
        "budget/target",
    ]:
        assert tag in scalars, f"{tag} missing from {sorted(scalars)}"
    losses = [event.value for event in events.Scalars("train/loss")]
    assert len(losses) == 6 and all(torch.isfinite(torch.tensor(losses)))
    val_psnr = events.Scalars("val/psnr")
    assert len(val_psnr) == 2  # two epochs of 3 steps, validated at each end
    images = [tag for tag in events.Tags()["images"] if tag.startswith("val/preview/")]
    assert sorted(images) == ["val/preview/000", "val/preview/001"]
    preview = events.Images("val/preview/000")[-1]
    assert (preview.width, preview.height) == (5 * 24, 24)  # target | prediction | depth | opacity | samples


def test_fit_writes_last_checkpoint_that_validate_and_test_load(
    trained_run: Path, tiny_scene: Path, tmp_path: Path
) -> None:
    last = trained_run / "checkpoints" / "last.ckpt"
    assert last.is_file()
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == 6
    assert "sampler.occupied" in state["state_dict"]  # sampler buffers travel with checkpoints
    cli = run_lightning_cli(["validate", *short_run_args(tiny_scene, tmp_path), "--ckpt_path", str(last)])
    assert "val/psnr" in cli.trainer.callback_metrics
    assert Path(cli.trainer.log_dir) == trained_run / "validate"  # beside the run it scored
    cli = run_lightning_cli(["test", *short_run_args(tiny_scene, tmp_path), "--ckpt_path", str(last)])
    metrics = cli.trainer.callback_metrics
    assert Path(cli.trainer.log_dir) == trained_run / "test"
    assert 0.0 < float(metrics["test/ssim"]) <= 1.0 and float(metrics["test/psnr"]) > 5.0


def test_sampler_is_selected_by_short_name(tiny_scene: Path, tmp_path: Path) -> None:
    cli = run_lightning_cli(
        [
            "fit",
            *short_run_args(tiny_scene, tmp_path, steps=2),
            "--model.sampler=Uniform",
            "--model.sampler.num_samples=8",
        ]
    )
    assert type(cli.model.sampler) is Uniform and cli.model.sampler.num_samples == 8
    assert float(cli.trainer.callback_metrics["train/samples_per_ray"]) == 8.0


def test_print_config_shows_resolved_sampler_class_path(
    tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        run_lightning_cli(
            ["fit", *short_run_args(tiny_scene, tmp_path), "--model.sampler=Uniform", "--print_config"]
        )
    printed = capsys.readouterr().out
    assert "class_path: nerf_lightning.samplers.Uniform" in printed


def test_sampler_help_lists_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run_lightning_cli(["fit", "--model.sampler.help", "OccupancyGrid"])
    printed = capsys.readouterr().out
    assert "--model.sampler.steps_per_diagonal" in printed


def test_broken_dataset_gives_one_line_per_problem(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "transforms_train.json").write_text('{"camera_angle_x": 0.7, "frames": []}')
    code = main(["fit", "--config", str(Path(__file__).parents[2] / "configs" / "demo.yaml"),
                 "--data.root", str(tmp_path), "--data.make_demo", "false",
                 "--trainer.default_root_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    problems = [line for line in err if line.startswith("nerf-lightning: dataset error:")]
    assert any("transforms_train.json" in line and "frames" in line for line in problems)
    assert any("transforms_val.json" in line for line in problems)  # every problem, not only the first
    assert err[-1].endswith(f"list them again with 'nerf-lightning data validate {tmp_path}'")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []  # no run folder left


class _ResizeAt(pl.Callback):
    """Changes ``rays_per_batch`` after step ``at`` and records every batch size seen."""

    def __init__(self, at: int, size: int) -> None:
        self.at, self.size, self.seen = at, size, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen.append(len(batch))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.at:
            trainer.datamodule.rays_per_batch = self.size


def test_rays_per_batch_change_applies_on_the_very_next_step(tiny_scene: Path) -> None:
    recorder = _ResizeAt(at=2, size=37)
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=64, steps_per_epoch=100)
    module = NerfModule(sampler=Uniform(num_samples=4))
    trainer = pl.Trainer(
        max_steps=5,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        limit_val_batches=0,
        callbacks=[recorder],
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule)
    assert recorder.seen == [64, 64, 37, 37, 37]


def test_occupancy_grid_trains_with_variable_samples(tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), rays_per_batch=256, steps_per_epoch=100)
    module = NerfModule(sampler=OccupancyGrid(resolution=16, update_every=2, warmup_steps=4))
    trainer = pl.Trainer(
        max_steps=6,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        limit_val_batches=0,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule)
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    counts = module.sampler.occupied
    assert 0 < int(counts.sum()) <= counts.numel()


@pytest.mark.parametrize("sampler", ["Uniform", "OccupancyGrid", "Hierarchical", "Proposal"])
def test_every_builtin_sampler_trains_from_the_cli(sampler: str, tiny_scene: Path, tmp_path: Path) -> None:
    args = short_run_args(
        tiny_scene,
        tmp_path,
        f"--model.sampler={sampler}",
        "--trainer.limit_val_batches",
        "1",
        steps=3,
        sampler_args=(),
    )
    cli = run_lightning_cli(["fit", *args])
    metrics = cli.trainer.callback_metrics
    assert type(cli.model.sampler).__name__ == sampler
    assert torch.isfinite(metrics["train/loss"]) and float(metrics["train/samples_per_ray"]) > 0
    assert "val/psnr" in metrics


def test_telemetry_splits_step_time_and_logs_sampling_statistics(trained_run: Path) -> None:
    events = _events(trained_run)
    scalars = set(events.Tags()["scalars"])
    stages = ["data", "sampling", "field", "render", "optimizer", "other"]
    for tag in [f"telemetry/ms_{s}" for s in stages] + ["telemetry/ms_step", "telemetry/overhead_fraction",
                                                          "telemetry/rays_per_s", "telemetry/samples_per_s",
                                                          "telemetry/peak_memory_mb"]:
        assert tag in scalars, f"{tag} missing"
    step_ms = [e.value for e in events.Scalars("telemetry/ms_step")]
    parts = [sum(values) for values in zip(*([e.value for e in events.Scalars(f"telemetry/ms_{s}")]
                                             for s in stages), strict=True)]
    assert parts == pytest.approx(step_ms, rel=1e-4)  # the stages account for the whole step
    assert all(e.value > 0 for e in events.Scalars("telemetry/ms_field"))
    assert all(e.value > 0 for e in events.Scalars("telemetry/ms_optimizer"))
    assert all(0.0 < e.value < 1.0 for e in events.Scalars("telemetry/overhead_fraction"))
    assert events.Scalars("telemetry/peak_memory_mb")[-1].value > 10.0
    assert "telemetry/samples_per_ray" in events.Tags()["histograms"]
    records = [json.loads(line) for line in (trained_run / "telemetry.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in records] == list(range(1, 7))
    rays = [e.value for e in events.Scalars("budget/rays")]
    assert [r["rays"] for r in records] == rays  # one record per training step, same batches


@pytest.mark.parametrize(("start", "floor", "expected"), [(0, 0.0, 0.1 ** (8 / 4)), (0, 0.05, 0.05),
                                                         (6, 0.0, 0.1 ** (2 / 4))])
def test_learning_rate_decays_tenfold_per_decay_steps_after_its_start_down_to_its_floor(
        start: int, floor: float, expected: float, tiny_scene: Path, tmp_path: Path) -> None:
    cli = run_lightning_cli(["fit", *short_run_args(tiny_scene, tmp_path / "out", steps=8),
                             "--model.learning_rate_decay_steps", "4",
                             "--model.learning_rate_decay_start", str(start),
                             "--model.learning_rate_decay_floor", str(floor)])
    assert cli.trainer.global_step == 8
    groups = cli.trainer.optimizers[0].param_groups
    assert groups[0]["lr"] == pytest.approx(cli.model.learning_rate * expected, rel=1e-6)


def test_the_decay_factor_is_constant_before_its_start_and_held_at_its_floor() -> None:
    from nerf_lightning.system.learning_rate import decay_factor

    assert [decay_factor(step, 100, 50, 0.05) for step in (0, 50, 150, 250, 10**6)] == pytest.approx(
        [1.0, 1.0, 0.1, 0.05, 0.05])
    assert decay_factor(10**6, 0, 0, 0.5) == 1.0  # no decay steps: constant


def test_a_decay_floor_outside_zero_to_one_is_one_line(tiny_scene: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", *short_run_args(tiny_scene, tmp_path / "out"),
                 "--model.learning_rate_decay_floor", "1.5"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["nerf-lightning: model (NerfModule): learning_rate_decay_floor must be a fraction in "
                   "[0, 1], got 1.5"], err
