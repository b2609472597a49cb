"""The recipe benchmark's table, run summary and report, from fabricated files (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

from benchmarks.common import REPO, RUN, TEST
from benchmarks.recipes import TABLE, load_table, markdown, merge, scene_configs, summarize, write


def _run(config: str, psnr: float, ssim: float, samples_per_ray: float, steps: int) -> dict:
    return {"config": config, "config_file": f"configs/{config}.yaml", "wall_s": 300.0, "steps": steps,
            "psnr": psnr, "ssim": ssim, "lpips": None, "samples_per_ray": samples_per_ray,
            "worst_view": {"index": 3, "name": "images/0042.jpg", "psnr": psnr - 2.0},
            "preview_view": {"index": 0, "name": "images/0001.jpg", "psnr": psnr + 1.0},
            "previews": {"worst": f"fox/{config}/preview_worst.png", "view": None}, "curve": []}


def test_report_has_a_table_per_scene_the_delta_against_the_first_config_and_the_previews(
        tmp_path: Path) -> None:
    results = {"machine": {"platform": "x", "torch": "y", "threads": 2}, "settings": {"wall_s": 300.0},
               "scenes": {"fox": {"reference": "today",
                                  "runs": [_run("today", 20.0, 0.6, 128.0, 1000),
                                           _run("real", 22.5, 0.7, 32.0, 1500)]},
                          "fern": {"reference": "llff", "runs": [_run("llff", 21.0, 0.65, 64.0, 900)]}}}
    text = markdown(results)
    assert "## fox" in text and "## fern" in text
    assert "| config | file | PSNR | SSIM | samples/ray | steps | train s |" in text
    assert "| real | `configs/real.yaml` | 22.50 | 0.700 | 32.00 | 1500 | 300 |" in text
    assert ("real vs today: +2.50 dB PSNR, +0.100 SSIM, 0.25x the samples per ray, 1.50x the steps, "
            "at 300 vs 300 training seconds.") in text
    assert "![fox real worst view](fox/real/preview_worst.png)" in text
    assert "view 3 `images/0042.jpg`, 20.50 dB" in text
    assert text.count(" vs ") == 2  # fern has only its reference: no delta line
    write(results, tmp_path)
    assert json.loads((tmp_path / "results.json").read_text()) == results
    assert (tmp_path / "results.md").read_text() == text


def test_overrides_merge_key_by_key_and_a_new_class_replaces_the_old_one() -> None:
    base = {"model": {"field": {"class_path": "A", "init_args": {"x": 1, "y": 2}}, "lr": 0.01},
            "data": {"downscale": 4}}
    merged = merge(base, {"model": {"field": {"init_args": {"y": 3}}}, "data": {"downscale": 8}})
    assert merged["model"] == {"field": {"class_path": "A", "init_args": {"x": 1, "y": 3}}, "lr": 0.01}
    assert merged["data"] == {"downscale": 8} and base["data"] == {"downscale": 4}  # a copy
    replaced = merge(base, {"model": {"field": {"class_path": "B", "init_args": {"z": 0}}}})
    assert replaced["model"]["field"] == {"class_path": "B", "init_args": {"z": 0}}


def test_the_table_lists_fox_and_fern_with_todays_config_first(tmp_path: Path) -> None:
    table = load_table([TABLE])
    assert {"fox", "fern"} <= set(table)
    fox = scene_configs(table["fox"])
    assert [(name, path.name) for name, path, _ in fox][:2] == [("today", "nerfstudio.yaml"),
                                                                 ("recipe", "real.yaml")]
    assert all(overrides["data"]["downscale"] == 4 for _, _, overrides in fox)
    extra = tmp_path / "extra.yaml"
    extra.write_text("scenes:\n  tiny:\n    root: /somewhere\n    configs:\n"
                     "      a: {config: configs/demo.yaml, overrides: {data: {downscale: 1}}}\n")
    tiny = scene_configs(load_table([TABLE, extra])["tiny"])
    assert tiny[0][0] == "a" and tiny[0][1].name == "demo.yaml" and tiny[0][2] == {"data": {"downscale": 1}}


def _jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_summary_reads_the_run_files_and_cuts_target_and_render_from_the_report_panels(
        tmp_path: Path) -> None:
    out, run_dir = tmp_path / "out", tmp_path / "out" / "fox" / "real"
    log_dir = run_dir / RUN  # the fit's run folder, with its test's folder in it
    test_dir = log_dir / TEST
    for folder in (log_dir, test_dir / "panels"):
        folder.mkdir(parents=True)
    _jsonl(log_dir / "bench_curve.jsonl",
           [{"train_s": 0.5 * (i + 1), "step": i + 1, "rays": 10, "samples": 320} for i in range(10)])
    metrics = {"test/psnr": 21.0, "test/ssim": 0.7}
    (test_dir / "run.json").write_text(json.dumps({"metrics": {"test": metrics}}))
    views = [{"index": 0, "name": "images/0001.jpg", "psnr": 22.0, "ssim": 0.7, "lpips": None},
             {"index": 1, "name": "images/0042.jpg", "psnr": 20.0, "ssim": 0.7, "lpips": None}]
    (test_dir / "eval.json").write_text(json.dumps({"mean": {"lpips": None}, "views": views}))
    panel = np.zeros((4, 6, 3), np.uint8)
    panel[:, 0:2] = 10  # rendered | target | error
    panel[:, 2:4] = 200
    Image.fromarray(panel).save(test_dir / "panels" / "001_0042.png")
    run = summarize("real", REPO / "configs" / "real.yaml", log_dir, test_dir, run_dir, out, preview_view=0)
    assert run["config_file"] == "configs/real.yaml"
    assert (run["psnr"], run["ssim"], run["steps"], run["samples_per_ray"]) == (21.0, 0.7, 10, 32.0)
    assert run["worst_view"] == {"index": 1, "name": "images/0042.jpg", "psnr": 20.0}
    assert run["previews"] == {"worst": "fox/real/preview_worst.png", "view": None}  # no panel of view 0
    preview = np.asarray(Image.open(out / run["previews"]["worst"]))
    assert preview.shape == (4, 4, 3) and (preview[:, :2] == 200).all() and (preview[:, 2:] == 10).all()
