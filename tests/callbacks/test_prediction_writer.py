"""``nerf-lightning predict`` writes each rendered view as PNGs (PredictionWriter, a real predict run)."""

from __future__ import annotations

import warnings
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from PIL import Image

from nerf_lightning.callbacks.prediction_writer import PredictionWriter, view_stem
from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.config.errors import ConstructorArgumentError
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.rendering.colormap import colorize_depth, depth_range
from nerf_lightning.scenes.images import quantize_to_uint8
from nerf_lightning.system.image_render import ImageRender
from nerf_lightning.system.module import NerfModule
from tests.helpers.runs import short_run_args

CPU = torch.device("cpu")


def _png(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        assert (image.format, image.mode) == ("PNG", "RGB")
        return np.asarray(image)


@pytest.mark.slow
def test_predict_writes_rgb_and_depth_of_every_test_view(tiny_run: Path, tiny_scene: Path,
                                                         tmp_path: Path) -> None:
    assert not (tiny_run / "predictions").exists()  # fit writes none
    out = tmp_path / "out"
    last = tiny_run / "checkpoints" / "last.ckpt"
    filters = list(warnings.filters)
    cli = run_lightning_cli(["predict", *short_run_args(tiny_scene, out), "--ckpt_path", str(last),
                             "--predict_writer.raw_depth", "true"])
    assert warnings.filters == filters  # the writer's filter lasted only as long as predict
    assert not cli.trainer.predict_loop.return_predictions  # written, not also kept in memory
    # The predictions of a run's checkpoint go beside the run it rendered: RUN/predict (or predict-N).
    directory = Path(cli.trainer.log_dir) / "predictions"
    assert directory.parent.parent == tiny_run and directory.parent.name.startswith("predict")
    assert not out.exists()  # no run folder under --trainer.default_root_dir
    names = cli.datamodule.splits["test"].names
    stems = [view_stem(index, name) for index, name in enumerate(names)]
    assert len(stems) == 2 and all(Path(name).stem in stem for name, stem in zip(names, stems, strict=True))
    assert sorted(path.name for path in directory.iterdir()) == sorted(  # and no temporary left behind
        f"{stem}_{kind}" for stem in stems for kind in ("rgb.png", "depth.png", "depth.npy"))
    model = cli.model.eval()
    for index, stem in enumerate(stems):
        render = model.render_image(cli.datamodule.image_batch("test", index, CPU))
        rgb = _png(directory / f"{stem}_rgb.png")
        assert rgb.shape == (24, 24, 3)
        assert np.array_equal(rgb, quantize_to_uint8(render.rgb).numpy())
        colours = colorize_depth(render.depth, render.opacity, *depth_range(render.depth, render.opacity))
        assert np.array_equal(_png(directory / f"{stem}_depth.png"), quantize_to_uint8(colours).numpy())
        raw = np.load(directory / f"{stem}_depth.npy", allow_pickle=False)
        assert raw.dtype == np.float32 and np.array_equal(raw, render.depth[..., 0].numpy())


@pytest.mark.slow
def test_output_dir_and_a_fixed_depth_range(tiny_run: Path, tiny_scene: Path, tmp_path: Path) -> None:
    target = tmp_path / "views"
    cli = run_lightning_cli(["predict", *short_run_args(tiny_scene, tmp_path / "out"), "--ckpt_path",
                             str(tiny_run / "checkpoints" / "last.ckpt"), "--predict_writer.output_dir",
                             str(target), "--predict_writer.depth_range", "[2.0, 5.0]",
                             "--return_predictions", "true"])
    assert cli.trainer.predict_loop.return_predictions and len(cli.trainer.predict_loop.predictions) == 2
    stem = view_stem(1, cli.datamodule.splits["test"].names[1])
    assert sorted(path.name for path in target.iterdir()) == sorted(
        [f"{view_stem(0, cli.datamodule.splits['test'].names[0])}_rgb.png",
         f"{view_stem(0, cli.datamodule.splits['test'].names[0])}_depth.png",
         f"{stem}_rgb.png", f"{stem}_depth.png"])
    render = cli.model.eval().render_image(cli.datamodule.image_batch("test", 1, CPU))
    colours = quantize_to_uint8(colorize_depth(render.depth, render.opacity, 2.0, 5.0)).numpy()
    assert np.array_equal(_png(target / f"{stem}_depth.png"), colours)


@pytest.mark.slow
def test_trainer_predict_returns_the_renders_and_the_writer_writes_them(tiny_run: Path, tiny_scene: Path,
                                                                        tmp_path: Path) -> None:
    model = NerfModule.load_from_checkpoint(tiny_run / "checkpoints" / "last.ckpt", weights_only=True)
    datamodule = NerfDataModule(root=str(tiny_scene))
    trainer = pl.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False,
                         callbacks=[PredictionWriter(output_dir=str(tmp_path / "views"))])
    renders = trainer.predict(model, datamodule)
    assert isinstance(renders, list) and len(renders) == 2
    assert all(isinstance(render, ImageRender) and render.rgb.device.type == "cpu" for render in renders)
    stem = view_stem(1, datamodule.splits["test"].names[1])
    written = _png(tmp_path / "views" / f"{stem}_rgb.png")
    assert np.array_equal(written, quantize_to_uint8(renders[1].rgb).numpy())


def test_view_stems_are_index_and_a_safe_file_stem() -> None:
    assert view_stem(3, "test/r_3.png") == "003_r_3"
    assert view_stem(12, "images/frame 1:a.jpg") == "012_frame_1_a"
    assert view_stem(7, "") == "007"


@pytest.mark.slow  # LightningCLI parses the config
def test_a_depth_range_whose_far_is_not_beyond_near_is_refused(tiny_scene: Path, tmp_path: Path) -> None:
    refused = (r"^predict_writer \(PredictionWriter\): depth_range must be \[near, far\] with far > near, "
               r"got \[3.0, 3.0\]$")
    with pytest.raises(ConstructorArgumentError, match=refused):
        run_lightning_cli(["predict", *short_run_args(tiny_scene, tmp_path), "--predict_writer.depth_range",
                           "[3.0, 3.0]"])
