"""``data.test_split``: the split the ``test`` stage scores (the training views for a train-test gap)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.data.datamodule import NerfDataModule
from tests.helpers.runs import short_run_args


def _trainer(stage: str) -> SimpleNamespace:
    """What the data module reads of its trainer, one process in ``stage``."""
    return SimpleNamespace(training=False, validating=False, sanity_checking=False,
                           testing=stage == "test", predicting=stage == "predict", world_size=1,
                           global_rank=0, strategy=SimpleNamespace(root_device=torch.device("cpu")))


def test_testing_the_train_split_scores_whole_training_views_and_predict_keeps_the_test_split(
        tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False, test_split="train")
    datamodule.setup("test")
    train = datamodule.splits["train"]
    assert "test" not in datamodule.splits  # nothing else is loaded
    assert len(datamodule.test_dataloader()) == len(train) == 8
    datamodule.trainer = _trainer("test")  # type: ignore[assignment]
    batch = datamodule.on_after_batch_transfer(3, 0)
    height, width = train.images[3].shape[:2]
    assert batch.image_index == 3 and batch.image_size == (height, width)
    assert torch.equal(batch.rgb, train.images[3].reshape(-1, 3))
    # A training photo is scored as it was fitted: its rays name it, for its per-image parameters.
    assert batch.camera_indices is not None
    assert torch.equal(batch.camera_indices, torch.full((height * width,), 3))
    centre = train.cameras.camera_to_world[3, :, 3]
    assert torch.allclose(batch.rays.origins, centre.expand(height * width, 3))
    datamodule.setup("predict")
    assert len(datamodule.predict_dataloader()) == len(datamodule.splits["test"]) == 2
    datamodule.trainer = _trainer("predict")  # type: ignore[assignment]
    predicted = datamodule.on_after_batch_transfer(1, 0)
    assert torch.equal(predicted.rgb, datamodule.splits["test"].images[1].reshape(-1, 3))
    assert predicted.camera_indices is None  # a new view: no training photo's parameters


def test_the_default_is_the_test_split_and_an_unknown_split_is_refused_naming_the_choices(
        tiny_scene: Path) -> None:
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False)
    datamodule.setup("test")
    assert datamodule.test_split == "test" and len(datamodule.test_dataloader()) == 2
    refusal = r"^test_split must be one of 'train', 'val', 'test', got 'training'$"
    with pytest.raises(ValueError, match=refusal):
        NerfDataModule(root=str(tiny_scene), test_split="training")  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_test_command_scores_the_training_views_when_asked(tiny_scene: Path, tiny_run: Path,
                                                               tmp_path: Path) -> None:
    cli = run_lightning_cli(["test", *short_run_args(tiny_scene, tmp_path), "--data.test_split", "train",
                             "--ckpt_path", str(tiny_run / "checkpoints" / "last.ckpt")])
    log_dir = Path(cli.trainer.log_dir)
    assert log_dir.parent == tiny_run and log_dir.name.startswith("test")  # RUN/test, RUN/test-N
    report = json.loads((log_dir / "eval.json").read_text())
    assert [view["index"] for view in report["views"]] == list(range(8))  # every training view
    assert report["split"] == "train"
    assert [view["name"] for view in report["views"]] == [f"train/r_{i}.png" for i in range(8)]
    recorded = json.loads((log_dir / "run.json").read_text())["metrics"]["test"]["test/psnr"]
    assert recorded == pytest.approx(report["mean"]["psnr"], abs=1e-4)
