"""The evaluation report written by ``nerf-lightning test``: eval.json, eval.md, worst_views.png."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.evaluation.lpips import load_lpips
from nerf_lightning.evaluation.report import ViewScore, report_markdown, report_record
from tests.helpers.runs import short_run_args


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
    from nerf_lightning.system.module import ImageRender

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
    panel = Image.open(tmp_path / "panels" / "001_b.png")
    assert panel.size == (3 * 16, 12)  # rendered | target | error, no caption
    assert panel.getpixel((16, 0)) == (128, 128, 128)  # the target third


def test_panel_views_must_be_view_indices() -> None:
    from nerf_lightning.callbacks import EvalReport

    with pytest.raises(ValueError, match="panel_views"):
        EvalReport(panel_views=[-1])
