"""``eval.json`` and ``eval.md`` with training views beside the tested ones: the gap and how it reads."""

from __future__ import annotations

import math

import pytest

from nerf_lightning.evaluation.report import (
    ViewScore,
    report_markdown,
    report_record,
    train_test_gap,
    training_scores,
)

TESTED = [ViewScore(0, "test/a.png", 15.0, 0.5), ViewScore(1, "test/b.png", 15.4, 0.6)]
TRAINING = [ViewScore(6, "train/g.png", 31.0, 0.95), ViewScore(1, "train/b.png", 32.2, 0.97)]


def test_the_record_holds_the_training_views_and_the_gap() -> None:
    record = report_record(TESTED, "test", {"skipped": "off"}, training_scores(TRAINING), global_step=7)
    train = record["train"]
    assert train["num_views"] == 2 and [view["index"] for view in train["views"]] == [1, 6]
    assert train["views"][0] == {"index": 1, "name": "train/b.png", "psnr": 32.2, "ssim": 0.97}
    assert train["psnr"] == pytest.approx(31.6) and train["ssim"] == pytest.approx(0.96)
    assert record["gap_db"] == pytest.approx(31.6 - 15.2)
    assert list(record) == ["split", "global_step", "num_views", "lpips", "mean", "train", "gap_db", "views"]


def test_a_record_without_training_views_says_why_and_has_no_gap() -> None:
    skipped = {"skipped": "turned off (eval_report.train_views=0)"}
    record = report_record(TESTED, "test", {"skipped": "off"}, skipped)
    assert record["train"] == skipped and record["gap_db"] is None
    assert "Training views not scored: turned off (eval_report.train_views=0)." in report_markdown(record)
    assert "train" not in report_record(TESTED, "test", {"skipped": "off"})  # callers that score none


def test_the_gap_is_none_unless_both_means_are_finite_numbers() -> None:
    assert train_test_gap({"psnr": 30.0}, {"psnr": 20.0}) == 10.0
    assert train_test_gap({"psnr": math.inf}, {"psnr": 20.0}) is None  # a photo reproduced exactly
    assert train_test_gap({"psnr": 30.0}, {"psnr": math.nan}) is None  # no tested view
    assert train_test_gap({"skipped": "why"}, {"psnr": 20.0}) is None


def test_markdown_shows_training_and_tested_views_side_by_side_with_the_gap() -> None:
    record = report_record(TESTED, "val", {"skipped": "off"}, training_scores(TRAINING))
    lines = report_markdown(record).splitlines()
    start = lines.index("Training views (as fitted) against val views, scored alike:")
    assert lines[start + 2 : start + 8] == [
        "| views | count | PSNR (dB) | SSIM |",
        "| --- | ---: | ---: | ---: |",
        "| train | 2 | 31.60 | 0.9600 |",
        "| val | 2 | 15.20 | 0.5500 |",
        "",
        "Gap (train minus val PSNR): **16.40 dB**.",
    ]
    assert lines[-1].startswith("|  |  | **mean** | **15.20**")  # the per-view table still ends it
