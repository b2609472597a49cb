"""``eval.json`` and ``eval.md``: per-view scores of a test run and their means."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nerf_lightning.files import atomic_write_json, atomic_write_text

EVAL_JSON = "eval.json"
EVAL_MARKDOWN = "eval.md"


@dataclass(frozen=True)
class ViewScore:
    """The scores of one evaluated view.

    Attributes:
        index: position of the view in its split.
        name: the view's image path relative to the dataset root (``""`` when unknown).
        psnr: dB, data range 1; higher is better.
        ssim: in ``[-1, 1]``; higher is better.
        lpips: lower is better; ``None`` when LPIPS was skipped.
    """

    index: int
    name: str
    psnr: float
    ssim: float
    lpips: float | None = None


def worst_first(views: list[ViewScore]) -> list[ViewScore]:
    """Views by increasing PSNR (ties by index)."""
    return sorted(views, key=lambda view: (view.psnr, view.index))


def mean_scores(views: list[ViewScore]) -> dict[str, float | None]:
    """Mean PSNR, SSIM and LPIPS (``None`` without LPIPS) over ``views``."""

    def mean(values: list[float]) -> float:
        return math.fsum(values) / len(values) if values else math.nan

    lpips = [v.lpips for v in views if v.lpips is not None]
    return {
        "psnr": mean([v.psnr for v in views]),
        "ssim": mean([v.ssim for v in views]),
        "lpips": mean(lpips) if views and len(lpips) == len(views) else None,
    }


def training_scores(views: list[ViewScore]) -> dict[str, Any]:
    """``eval.json``'s ``train`` for training views scored beside the tested ones: how many, their mean
    PSNR and SSIM, and each view's index, name, PSNR and SSIM (no LPIPS: the gap is read in PSNR)."""
    mean = mean_scores(views)
    return {
        "num_views": len(views),
        "psnr": mean["psnr"],
        "ssim": mean["ssim"],
        "views": [{"index": view.index, "name": view.name, "psnr": view.psnr, "ssim": view.ssim}
                  for view in sorted(views, key=lambda view: view.index)],
    }


def train_test_gap(train: dict[str, Any], mean: dict[str, float | None]) -> float | None:
    """Training minus tested mean PSNR in dB; ``None`` when the training views were not scored or either
    mean is not a finite number (no views, or a view reproduced exactly)."""
    train_psnr, test_psnr = train.get("psnr"), mean.get("psnr")
    if train_psnr is None or test_psnr is None or not math.isfinite(train_psnr - test_psnr):
        return None
    return train_psnr - test_psnr


def report_record(
    views: list[ViewScore], split: str, lpips: dict[str, str], train: dict[str, Any] | None = None,
    **context: Any,
) -> dict[str, Any]:
    """The content of ``eval.json``: ``context`` (checkpoint, step...), LPIPS status, means, views by index.

    ``lpips`` is ``{"net": NAME}`` when computed, ``{"skipped": REASON}`` otherwise. ``train``, when
    given, is :func:`training_scores` or ``{"skipped": REASON}``; the record then also holds
    ``gap_db`` (:func:`train_test_gap`).
    """
    mean = mean_scores(views)
    extra = {} if train is None else {"train": train, "gap_db": train_test_gap(train, mean)}
    return {
        "split": split,
        **context,
        "num_views": len(views),
        "lpips": lpips,
        "mean": mean,
        **extra,
        "views": [asdict(view) for view in sorted(views, key=lambda view: view.index)],
    }


def _number(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _scores(psnr: float, ssim: float, lpips: float | None, with_lpips: bool) -> list[str]:
    return [_number(psnr, 2), _number(ssim, 4)] + ([_number(lpips, 4)] if with_lpips else [])


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def report_markdown(record: dict[str, Any]) -> str:
    """A readable table of ``record`` (from :func:`report_record`), worst view first, means last."""
    views = worst_first([ViewScore(**view) for view in record["views"]])
    with_lpips = "net" in record["lpips"]
    lines = [f"# Evaluation: {record['split']} split, {record['num_views']} views", ""]
    if record.get("checkpoint"):
        lines.append(f"Checkpoint: `{record['checkpoint']}` (step {record.get('global_step')})")
    lines.append(
        f"LPIPS ({record['lpips']['net']}): lower is better." if with_lpips
        else f"LPIPS skipped: {record['lpips']['skipped']}."
    )
    lines += _training_lines(record)
    lines += ["", "Sorted worst first (lowest PSNR).", ""]
    header = ["rank", "view", "name", "PSNR (dB)", "SSIM"] + (["LPIPS"] if with_lpips else [])
    lines += [_row(header), _row(["---:", "---:", "---"] + ["---:"] * (len(header) - 3))]
    for rank, view in enumerate(views, start=1):
        name = f"`{view.name}`" if view.name else ""
        scores = _scores(view.psnr, view.ssim, view.lpips, with_lpips)
        lines.append(_row([str(rank), str(view.index), name, *scores]))
    mean = record["mean"]
    scores = _scores(mean["psnr"], mean["ssim"], mean["lpips"], with_lpips)
    lines.append(_row(["", "", "**mean**", *(f"**{score}**" for score in scores)]))
    return "\n".join(lines) + "\n"


def _training_lines(record: dict[str, Any]) -> list[str]:
    """The training views beside the tested ones, and the gap; nothing for a record without ``train``."""
    train = record.get("train")
    if train is None:
        return []
    if "skipped" in train:
        return ["", f"Training views not scored: {train['skipped']}."]
    mean, split = record["mean"], record["split"]
    gap = record.get("gap_db")
    return [
        "",
        f"Training views (as fitted) against {split} views, scored alike:",
        "",
        _row(["views", "count", "PSNR (dB)", "SSIM"]),
        _row(["---", "---:", "---:", "---:"]),
        _row(["train", str(train["num_views"]), _number(train["psnr"], 2), _number(train["ssim"], 4)]),
        _row([split, str(record["num_views"]), _number(mean["psnr"], 2), _number(mean["ssim"], 4)]),
        "",
        f"Gap (train minus {split} PSNR): {'n/a' if gap is None else f'**{gap:.2f} dB**'}.",
    ]


def write_report(record: dict[str, Any], directory: Path) -> tuple[Path, Path]:
    """Write ``eval.json`` and ``eval.md`` (each atomically) into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path, markdown_path = directory / EVAL_JSON, directory / EVAL_MARKDOWN
    atomic_write_json(record, json_path)
    atomic_write_text(report_markdown(record), markdown_path)
    return json_path, markdown_path
