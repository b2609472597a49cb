"""What the benchmark runners share: one fit + test per process, the files a run leaves, the machine.

A run is a config (a dict, written as ``OUT/config.json``) trained and tested by
``benchmarks.fit_test`` in a process of its own; the runners read its results back from the
files it writes (``bench_curve.jsonl``, ``telemetry.jsonl``, the test run's ``run.json`` and
``eval.json``), never from printed text.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def load_config(config: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(config.read_text())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def latest_version(directory: Path) -> Path:
    """The highest ``version_N`` folder under ``directory/lightning_logs``."""
    return max((directory / "lightning_logs").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))


def train_clock(wall_s: float, curve_every_s: float, curve_views: int) -> dict[str, Any]:
    """The ``TrainClock`` callback entry of a run config (equal training time, evaluation excluded)."""
    return {"class_path": "benchmarks.clock.TrainClock",
            "init_args": {"budget_s": wall_s, "curve_every_s": curve_every_s, "curve_views": curve_views}}


def bench_trainer(config: dict[str, Any], callbacks: list[dict[str, Any]],
                  precision: str = "32-true") -> None:
    """Rewrite ``config`` for a benchmark run: no time/step limit of its own (the clock stops it), no
    validation, no progress bar, ``callbacks`` as given, and one final ``last.ckpt`` to test."""
    config["trainer"].update({"max_time": None, "max_steps": -1, "max_epochs": -1, "limit_val_batches": 0,
                              "enable_progress_bar": False, "precision": precision, "callbacks": callbacks})
    config["checkpoint"] = {**config.get("checkpoint", {}), "every_n_train_steps": 0}


def fit_and_test(config: dict[str, Any], out: Path, root: Path | None) -> tuple[Path, Path]:
    """Write ``config`` to ``out/config.json``, fit and test it in one process (``benchmarks.fit_test``,
    output in ``out/bench.log``); returns the fit's log directory and the test's."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    common = ["--config", str(out / "config.json"), "--trainer.default_root_dir", str(out)]
    if root is not None:
        common += ["--data.root", str(root)]
    with open(out / "bench.log", "w") as log:
        subprocess.run([sys.executable, "-m", "benchmarks.fit_test", *common], cwd=REPO, stdout=log,
                       stderr=subprocess.STDOUT, check=True)
    return latest_version(out), latest_version(out / "test")


def read_test_metrics(test_dir: Path) -> dict[str, float]:
    """The ``test`` metrics a test run recorded in its ``run.json``."""
    return json.loads((test_dir / "run.json").read_text())["metrics"]["test"]


def train_stats(log_dir: Path) -> dict[str, Any]:
    """Training figures of a run from ``TrainClock``'s ``bench_curve.jsonl`` and ``Telemetry``'s
    ``telemetry.jsonl``: training seconds, steps, rays and samples per second, samples per ray over
    the last fifth of training, the share of step time outside the field, mean stage times, and the
    PSNR-over-time curve ``[[train_s, val_psnr], ...]``."""
    curve = read_jsonl(log_dir / "bench_curve.jsonl")
    steps = [r for r in curve if "samples" in r]
    vals = [r for r in curve if "val_psnr" in r]
    telemetry = read_jsonl(log_dir / "telemetry.jsonl")
    wall = steps[-1]["train_s"] if steps else 0.0
    tail = steps[len(steps) * 4 // 5:] or steps
    rays = sum(r["rays"] for r in steps)
    samples = sum(r["samples"] for r in steps)
    step_time = sum(r["step"] for r in telemetry)
    stage_ms = {name: round(1000 * sum(r[name] for r in telemetry) / max(len(telemetry), 1), 2)
                for name in ("data", "sampling", "field", "render", "optimizer", "other")}
    return {
        "wall_s": round(wall, 1), "steps": len(steps),
        "rays_per_s": round(rays / wall, 1) if wall else None,
        "samples_per_s": round(samples / wall, 1) if wall else None,
        "samples_per_ray": round(sum(r["samples"] for r in tail) / max(sum(r["rays"] for r in tail), 1), 2),
        "overhead_fraction": (round(1.0 - sum(r["field"] for r in telemetry) / step_time, 3)
                              if step_time else None),
        "stage_ms": stage_ms,
        "curve": [[round(v["train_s"], 1), round(v["val_psnr"], 3)] for v in vals],
    }


def machine() -> dict[str, Any]:
    import torch

    return {"platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
            "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)
