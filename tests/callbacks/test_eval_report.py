"""The evaluation report written by ``nerf-lightning test``: eval.json, eval.md, worst_views.png."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from PIL import Image

from nerf_lightning.callbacks.eval_report import OVERFIT_CAUSES, EvalReport, evenly_spaced, overfit_warning
from nerf_lightning.cli import main, run_lightning_cli
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.evaluation.lpips import load_lpips
from nerf_lightning.evaluation.report import ViewScore, report_markdown, report_record, training_scores
from tests.helpers.runs import REPO, RUN, short_run_args


def _test(scene: Path, run: Path, out: Path, *extra: str):
    return run_lightning_cli(
        ["test", *short_run_args(scene, out), "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), *extra]
    )


@pytest.mark.slow
def test_test_writes_eval_report_matching_logged_metrics(
    tiny_scene: Path, tiny_run: Path, tmp_path: Path
) -> None:
    cli = _test(tiny_scene, tiny_run, tmp_path, "--eval_report.worst_k", "1")
    log_dir = Path(cli.trainer.log_dir)
    # The report of a run's checkpoint lands beside the run: RUN/test (RUN/test-N after earlier tests).
    assert log_dir.parent == tiny_run and log_dir.name.startswith("test")
    assert (log_dir / "run.json").is_file()
    record = json.loads((log_dir / "eval.json").read_text())
    num_test_views = len(cli.datamodule.splits["test"])
    assert record["num_views"] == len(record["views"]) == num_test_views == 2
    assert [view["index"] for view in record["views"]] == [0, 1]
    assert [view["name"] for view in record["views"]] == cli.datamodule.splits["test"].names
    metrics = cli.trainer.callback_metrics
    mean_psnr = math.fsum(view["psnr"] for view in record["views"]) / num_test_views
    mean_ssim = math.fsum(view["ssim"] for view in record["views"]) / num_test_views
    assert abs(mean_psnr - float(metrics["test/psnr"])) < 1e-4
    assert abs(mean_ssim - float(metrics["test/ssim"])) < 1e-4
    assert abs(record["mean"]["psnr"] - float(metrics["test/psnr"])) < 1e-4
    assert record["global_step"] == 3 and record["checkpoint"].endswith("last.ckpt")
    lpips_metric, lpips_skipped = load_lpips("alex")  # what the callback saw, decided the same way
    if lpips_metric is None:  # no torchvision or no cached backbone weights here
        assert record["lpips"] == {"skipped": lpips_skipped}
        assert record["mean"]["lpips"] is None and all(view["lpips"] is None for view in record["views"])
    else:
        assert record["lpips"] == {"net": "alex"}
        scores = [view["lpips"] for view in record["views"]]
        assert all(math.isfinite(score) and 0.0 <= score <= 1.0 for score in scores), scores
        assert record["mean"]["lpips"] == pytest.approx(math.fsum(scores) / len(scores))

    markdown = (log_dir / "eval.md").read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| 1 |") or line.startswith("| 2 |")]
    worst = min(record["views"], key=lambda view: view["psnr"])
    assert len(rows) == 2 and rows[0].startswith(f"| 1 | {worst['index']} | `{worst['name']}`")
    assert "**mean**" in markdown and f"{record['mean']['psnr']:.2f}" in markdown
    computed = "LPIPS (alex): lower is better."
    assert (computed if lpips_metric is not None else f"LPIPS skipped: {lpips_skipped}.") in markdown

    grid = Image.open(log_dir / "worst_views.png")
    assert grid.width >= 3 * 24 and grid.height == 14 + 24 + 2  # one row: caption, rendered | target | error


@pytest.mark.slow
def test_eval_report_can_be_turned_off(tiny_scene: Path, tiny_run: Path, tmp_path: Path) -> None:
    cli = _test(tiny_scene, tiny_run, tmp_path, "--eval_report.enabled", "false")
    assert not (Path(cli.trainer.log_dir) / "eval.json").exists()


def test_lpips_is_skipped_without_local_weights(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    metric, reason = load_lpips("alex")
    assert metric is None and ("torchvision" in reason or "weights" in reason)
    assert list(tmp_path.iterdir()) == []  # nothing was downloaded
    assert "unknown LPIPS network" in load_lpips("resnet")[1]


def test_lpips_with_local_weights_is_zero_for_equal_images_and_grows_with_the_difference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_download(url: str, *args: object, **kwargs: object) -> None:
        raise AssertionError(f"LPIPS tried to download {url}")

    monkeypatch.setattr(torch.hub, "download_url_to_file", no_download)  # what torchvision downloads with
    metric, reason = load_lpips("alex")
    if metric is None:
        pytest.skip(f"LPIPS cannot be computed offline here: {reason}")
    generator = torch.Generator().manual_seed(0)
    image, noise = torch.rand(2, 1, 3, 64, 64, generator=generator)
    scores = []
    for other in (image.clone(), 0.9 * image + 0.1 * noise, noise):
        metric.reset()
        scores.append(float(metric(image, other)))
    same, near, far = scores
    assert same < 1e-6 < near < far <= 1.0, scores


def test_markdown_lists_views_worst_first_with_means() -> None:
    views = [ViewScore(0, "a.png", 30.0, 0.9, 0.1), ViewScore(1, "b.png", 20.0, 0.8, 0.3),
             ViewScore(2, "c.png", 25.0, 0.7, 0.2)]
    record = report_record(views, "test", {"net": "alex"})
    assert record["mean"] == pytest.approx({"psnr": 25.0, "ssim": 0.8, "lpips": 0.2})
    lines = report_markdown(record).splitlines()
    table = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert [line.split(" | ")[2] for line in table] == ["`b.png`", "`c.png`", "`a.png`"]
    assert lines[-1] == "|  |  | **mean** | **25.00** | **0.8000** | **0.2000** |"


def test_panel_views_and_worst_panels_are_written_one_png_each(tmp_path: Path) -> None:
    """``panel_views`` and ``worst_panels``: caption-less rendered | target | error PNGs in ``panels/``,
    named as the prediction writer names views; other views' panels are not kept."""
    from types import SimpleNamespace

    from nerf_lightning.callbacks import EvalReport
    from nerf_lightning.system.image_render import ImageRender

    names = ["test/a.png", "test/b.png", "test/c.png"]
    splits = {"test": SimpleNamespace(names=names)}
    trainer = SimpleNamespace(datamodule=SimpleNamespace(splits=splits), log_dir=str(tmp_path), world_size=1,
                              is_global_zero=True, ckpt_path=None, global_step=7)
    module = SimpleNamespace(device=torch.device("cpu"))
    report = EvalReport(worst_k=1, lpips=False, panel_views=[0, 9], worst_panels=True)
    report.on_test_start(trainer, module)
    target = torch.full((12, 16, 3), 0.5)
    for index, error in enumerate([0.01, 0.2, 0.05]):  # view 1 is the worst
        image = ImageRender(target=target, rgb=target + error, depth=target[..., :1], opacity=target[..., :1],
                            samples_per_ray=target[..., :1], near=0.0, far=1.0)
        report.on_test_batch_end(trainer, module, image, SimpleNamespace(image_index=index), index)
    assert [view.index for view, _ in report._kept] == [0]
    report.on_test_end(trainer, module)
    assert sorted(p.name for p in (tmp_path / "panels").iterdir()) == ["000_a.png", "001_b.png"]
    record = json.loads((tmp_path / "eval.json").read_text())  # a data module without single-view batches
    assert record["train"] == {"skipped": "the data module SimpleNamespace makes no single image batches "
                                          "(ImageBatches: it has no num_train_images, image_batch)"}
    assert record["gap_db"] is None
    panel = Image.open(tmp_path / "panels" / "001_b.png")
    assert panel.size == (3 * 16, 12)  # rendered | target | error, no caption
    assert panel.getpixel((16, 0)) == (128, 128, 128)  # the target third


def test_panel_views_must_be_view_indices() -> None:
    from nerf_lightning.callbacks import EvalReport

    with pytest.raises(ValueError, match="panel_views"):
        EvalReport(panel_views=[-1])


# ------------------------------------------------------------------ training views and the gap
OVERFIT_PREFIX = "test: training views "
LEAN = ("--eval_report.lpips", "false", "--eval_report.worst_k", "0")
"""Report options that keep these tests to the scores (no LPIPS backbone, no worst-views image)."""


@pytest.fixture
def info_lines() -> Iterator[list[str]]:
    """The messages Lightning's loggers (``rank_zero_info``, the report's channel) emit meanwhile."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger, handler = logging.getLogger("lightning.pytorch"), Collect(logging.INFO)
    logger.addHandler(handler)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)


def _eval_json(cli) -> dict:
    return json.loads((Path(cli.trainer.log_dir) / "eval.json").read_text())


def test_training_views_are_spread_over_the_split() -> None:
    assert evenly_spaced(3, 8) == [1, 4, 6]
    assert evenly_spaced(8, 100) == [6, 18, 31, 43, 56, 68, 81, 93]  # not the first eight
    assert evenly_spaced(1, 5) == [2]
    assert evenly_spaced(8, 5) == [0, 1, 2, 3, 4]
    assert evenly_spaced(0, 5) == []
    assert all(len(set(evenly_spaced(k, n))) == min(k, n) for n in range(1, 30) for k in range(1, 35))


def test_the_overfit_line_names_the_figures_the_threshold_and_the_settings_to_check() -> None:
    record = report_record([ViewScore(0, "", 15.2, 0.5)], "test", {"skipped": "off"},
                           training_scores([ViewScore(3, "", 31.6, 0.9)]))
    assert overfit_warning(record, 3.0) == (
        "test: training views 31.6 dB, test views 15.2 dB (gap 16.4 dB > eval_report.overfit_gap_db 3.0): "
        "the model fits the photos but not the scene; likely causes: the scene box or the contracted region "
        "beyond it (data.scene_box_scale, data.scene_box, data.unbounded with model.field.contraction), the "
        "near plane (rays start where they enter the scene box, so it moves with the box), too few or too "
        "clustered training views")
    assert overfit_warning(record, 3.0) in (REPO / "docs" / "runs.md").read_text()  # the documented line
    assert overfit_warning(record, 16.4 + 1e-9) is None and overfit_warning(record, math.inf) is None
    skipped = report_record([ViewScore(0, "", 15.2, 0.5)], "test", {"skipped": "off"}, {"skipped": "why"})
    assert overfit_warning(skipped, -100.0) is None


def test_config_keys_named_by_the_overfit_line_exist() -> None:
    from nerf_lightning.data.datamodule import NerfDataModule
    from nerf_lightning.fields import HashGridField

    data, field = NerfDataModule(), HashGridField(num_levels=2, log2_hashmap_size=10)
    for key in ("data.scene_box_scale", "data.scene_box", "data.unbounded", "model.field.contraction"):
        assert key in OVERFIT_CAUSES
    assert (data.scene_box_scale, data.explicit_scene_box, data.unbounded) == (1.0, None, False)
    assert field.contraction is not None


@pytest.mark.parametrize(("option", "value"), [("train_views", -1), ("overfit_gap_db", math.nan)])
def test_invalid_training_view_options_are_refused_naming_them(option: str, value: float) -> None:
    with pytest.raises(ValueError, match=rf"^{option} must be "):
        EvalReport(**{option: value})


@pytest.mark.slow
def test_report_scores_evenly_spaced_training_views_as_test_split_train_scores_them(
    tiny_scene: Path, tiny_run: Path, tmp_path: Path, info_lines: list[str]
) -> None:
    """Beside the test views, three training views, their mean and the gap; the same views tested with
    ``--data.test_split train`` score the same (the same batches through ``render_image``), and that run
    makes no second pass and prints no overfit line even with the threshold forced below any gap."""
    cli = _test(tiny_scene, tiny_run, tmp_path / "a", *LEAN, "--eval_report.train_views", "3",
                "--eval_report.overfit_gap_db", "100")
    record = _eval_json(cli)
    train = record["train"]
    names = cli.datamodule.splits["train"].names
    assert [view["index"] for view in train["views"]] == [1, 4, 6] and train["num_views"] == 3
    assert [view["name"] for view in train["views"]] == [names[1], names[4], names[6]]
    assert train["psnr"] == pytest.approx(math.fsum(view["psnr"] for view in train["views"]) / 3)
    assert record["gap_db"] == pytest.approx(train["psnr"] - record["mean"]["psnr"])
    assert record["mean"]["psnr"] == pytest.approx(float(cli.trainer.callback_metrics["test/psnr"]), abs=1e-4)
    markdown = (Path(cli.trainer.log_dir) / "eval.md").read_text()
    assert f"| train | 3 | {train['psnr']:.2f} |" in markdown and f"**{record['gap_db']:.2f} dB**" in markdown
    assert not any(line.startswith(OVERFIT_PREFIX) for line in info_lines)

    as_tested = _eval_json(_test(tiny_scene, tiny_run, tmp_path / "b", *LEAN, "--data.test_split", "train",
                                 "--eval_report.overfit_gap_db", "-100"))
    assert as_tested["split"] == "train" and as_tested["num_views"] == 8
    skipped = "the tested views are the training views (data.test_split=train)"
    assert as_tested["train"] == {"skipped": skipped}
    assert as_tested["gap_db"] is None
    tested = {view["index"]: (view["psnr"], view["ssim"]) for view in as_tested["views"]}
    for view in train["views"]:
        assert (view["psnr"], view["ssim"]) == pytest.approx(tested[view["index"]], abs=1e-5)
    assert not any(line.startswith(OVERFIT_PREFIX) for line in info_lines)


@pytest.mark.slow
def test_test_prints_the_overfit_line_once_the_gap_exceeds_the_threshold(
    tiny_scene: Path, tiny_run: Path, tmp_path: Path, info_lines: list[str]
) -> None:
    cli = _test(tiny_scene, tiny_run, tmp_path, *LEAN, "--eval_report.overfit_gap_db", "-100")
    record = _eval_json(cli)
    assert record["train"]["num_views"] == 8  # the default, all of this split's eight
    assert [line for line in info_lines if line.startswith(OVERFIT_PREFIX)] == [
        overfit_warning(record, -100.0)]
    assert "(data.scene_box_scale, data.scene_box, data.unbounded" in info_lines[-1]


@pytest.mark.slow
def test_a_negative_train_views_is_one_line_naming_it(tiny_scene: Path, tiny_run: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    args = short_run_args(tiny_scene, tmp_path, "--ckpt_path", str(tiny_run / "checkpoints" / "last.ckpt"),
                          "--eval_report.train_views", "-1")
    assert main(["test", *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("nerf-lightning")] == [
        "nerf-lightning: eval_report (EvalReport): train_views must be an integer >= 0, got -1"]


@pytest.mark.slow
def test_the_progress_bar_shows_train_and_val_psnr(tiny_scene: Path, tmp_path: Path) -> None:
    cli = run_lightning_cli(["fit", *short_run_args(tiny_scene, tmp_path, steps=3)])
    shown = cli.trainer.progress_bar_metrics
    assert {"train/psnr", "val/psnr"} <= set(shown) and "val/ssim" not in shown
    assert shown["val/psnr"] == pytest.approx(float(cli.trainer.callback_metrics["val/psnr"]))


@pytest.mark.slow
def test_a_checkpoint_of_a_smaller_capture_scores_its_test_views_and_says_why_not_its_training_photos(
        tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A model with appearance codes for 8 training photos, tested on a capture of 12: its test views are
    scored and the report written; the training photos past its codes cannot be rendered as fitted, which
    ``train.skipped`` says; testing those photos outright is one line naming the checkpoint."""
    larger = make_demo_scene(tmp_path / "larger", num_train=12, num_val=1, num_test=2, resolution=24)
    fit = short_run_args(tiny_scene, tmp_path / "fit", "--model.field.appearance_dim", "4", steps=3)
    assert main(["fit", *fit]) == 0
    checkpoint = tmp_path / "fit" / RUN / "checkpoints" / "last.ckpt"
    cli = _test(larger, checkpoint.parent.parent, tmp_path / "a", *LEAN, "--model.field.appearance_dim", "4",
                "--eval_report.train_views", "12")
    record = _eval_json(cli)
    assert record["num_views"] == 2 and record["gap_db"] is None
    assert record["train"] == {"skipped": f"the training photos cannot be rendered as fitted ({checkpoint}: "
                                          "training photo 8 has no row in its appearance codes (8 rows): "
                                          "expected the training split it was fitted on)"}
    capsys.readouterr()
    args = short_run_args(larger, tmp_path / "b", "--model.field.appearance_dim", "4", "--ckpt_path",
                          str(checkpoint), "--data.test_split", "train", *LEAN)
    assert main(["test", *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("nerf-lightning")] == [
        f"nerf-lightning: {checkpoint}: training photo 8 has no row in its appearance codes (8 rows): "
        "expected the training split it was fitted on"]
