"""What the benchmark runners share: one fit + test per process, the files a run leaves, the machine.

A run is a config (a dict, written as ``OUT/config.json``) trained and tested by
``benchmarks.fit_test`` in a process of its own; the runners read its results back from the
files it writes into its run folder ``OUT/run`` (``bench_curve.jsonl``, ``telemetry.jsonl``) and the
test's ``OUT/run/test`` (``run.json``, ``eval.json``), never from printed text.

The recipe runs of ``benchmarks.recipes`` and ``benchmarks.generalise`` (a shipped config with
overrides, trained for a fixed time or number of steps, tested with the panels of its worst view and of
one fixed view) are :func:`run_config` and :func:`summarize`; their previews are :func:`preview`.
"""

from __future__ import annotations

import copy
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal

from benchmarks.host_cpu import cpu_shares

REPO = Path(__file__).resolve().parents[1]


def load_config(config: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(config.read_text())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


HOST_CPU_FILE = "host_cpu.json"
"""Beside a run's ``bench.log``: the shares of the machine's CPU time that other processes and the host
took while it ran (:func:`benchmarks.host_cpu.cpu_shares`)."""

RUN = "run"
"""The run folder of a benchmark's fit (``--run_name``): ``OUT/run``."""

TEST = "test"
"""The folder in the run folder of the test of its final weights on the test views: ``OUT/run/test``, the
run's first test."""

TRAIN_TEST = "test-2"
"""The folder in the run folder of the test of its final weights on its training views (``fit_test
--train-views``): ``OUT/run/test-2``, the run's second test."""


def run_folder(out: Path) -> Path:
    """The run folder of the benchmark run in ``out``: its fit's events, checkpoints and curves."""
    return out / RUN


def train_clock(wall_s: float, curve_every_s: float, curve_views: int) -> dict[str, Any]:
    """The ``TrainClock`` callback entry of a run config (equal training time, evaluation excluded)."""
    return {"class_path": "benchmarks.clock.TrainClock",
            "init_args": {"budget_s": wall_s, "curve_every_s": curve_every_s, "curve_views": curve_views}}


def bench_trainer(config: dict[str, Any], callbacks: list[dict[str, Any]],
                  precision: str = "32-true", max_steps: int = -1) -> None:
    """Rewrite ``config`` for a benchmark run: no time limit of its own (the clock stops it), at most
    ``max_steps`` training steps (``-1``: no limit), no validation, no progress bar, ``callbacks`` as
    given, and one final ``last.ckpt`` to test."""
    config["trainer"].update({"max_time": None, "max_steps": max_steps, "max_epochs": -1,
                              "limit_val_batches": 0, "enable_progress_bar": False, "precision": precision,
                              "callbacks": callbacks})
    config["checkpoint"] = {**config.get("checkpoint", {}), "every_n_train_steps": 0}


def fit_and_test(config: dict[str, Any], out: Path, root: Path | None,
                 train_views: int | Literal["all"] | None = None) -> tuple[Path, Path]:
    """Write ``config`` to ``out/config.json``, fit and test it in one process (``benchmarks.fit_test``,
    output in ``out/bench.log``); returns the fit's run folder (``out/run``) and the test's
    (``out/run/test``).

    ``train_views`` (``"all"`` or a count: the first that many) also tests the final weights on the
    training views, the same way as on the test split, into ``out/run/test-2`` (:func:`train_test_dir`);
    ``None``: not. A run of an earlier benchmark in ``out`` is replaced: its run folder is removed first,
    as its other files are overwritten."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(run_folder(out), ignore_errors=True)
    (out / "config.json").write_text(json.dumps(config, indent=1))
    common = ["--config", str(out / "config.json"), "--trainer.default_root_dir", str(out), "--run_name", RUN]
    if root is not None:
        common += ["--data.root", str(root)]
    extra = [] if train_views is None else ["--train-views", str(train_views)]
    with open(out / "bench.log", "w") as log, cpu_shares() as shares:
        subprocess.run([sys.executable, "-m", "benchmarks.fit_test", *extra, *common], cwd=REPO, stdout=log,
                       stderr=subprocess.STDOUT, check=True)
    (out / HOST_CPU_FILE).write_text(json.dumps(shares))
    return run_folder(out), run_folder(out) / TEST


def train_test_dir(out: Path) -> Path:
    """The folder of the test run of ``out``'s training views (``fit_and_test(train_views=)``)."""
    return run_folder(out) / TRAIN_TEST


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


# ------------------------------------------------------------- recipe runs
def repo_path(value: str) -> Path:
    """A path of a benchmark table: relative to the repository root (an absolute path stays itself)."""
    return REPO / Path(value).expanduser()


def relative(path: Path) -> str:
    """``path`` relative to the repository root when inside it (as tables and results name files)."""
    return path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else str(path)


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in key by key (a copy). A mapping whose ``class_path`` differs
    from the one it meets replaces it whole: another class's ``init_args`` would not fit."""
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        old = merged.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and _same_class(old, value):
            merged[key] = merge(old, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _same_class(old: dict[str, Any], new: dict[str, Any]) -> bool:
    return new.get("class_path", old.get("class_path")) == old.get("class_path")


def run_config(config_file: Path, overrides: dict[str, Any], out: Path, root: Path, wall_s: float,
               curve_every_s: float, preview_view: int,
               train_views: int | Literal["all"] | None = None, max_steps: int = -1) -> tuple[Path, Path]:
    """Fit the config (with ``overrides``) on ``root`` for ``wall_s`` training seconds or ``max_steps``
    steps, whichever comes first (``-1``: no step limit), test it with its preview panels (and on its
    training views, see :func:`fit_and_test`); returns the fit's run folder and the test's folder."""
    config = merge(load_config(config_file), overrides)
    callbacks = (config.get("trainer") or {}).get("callbacks") or []  # Telemetry, SampleBudget: kept
    clock = train_clock(wall_s, curve_every_s, curve_views=1)
    bench_trainer(config, [*callbacks, clock], max_steps=max_steps)
    config["eval_report"] = {**config.get("eval_report", {}), "enabled": True, "worst_k": 1,
                             "worst_panels": True, "panel_views": [preview_view]}
    config["data"]["make_demo"] = False
    return fit_and_test(config, out, root, train_views)


def worst_view(views: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The view of an ``eval.json`` with the lowest PSNR (the lowest index among equals)."""
    return min(views, key=lambda v: (v["psnr"], v["index"])) if views else None


def summarize(name: str, config_file: Path, log_dir: Path, test_dir: Path, run_dir: Path, out: Path,
              preview_view: int) -> dict[str, Any]:
    """One run's record from its files; writes its target | render previews into ``run_dir``."""
    stats = train_stats(log_dir)
    metrics = read_test_metrics(test_dir)
    report = json.loads((test_dir / "eval.json").read_text())
    views = report["views"]
    worst = worst_view(views)
    fixed = next((v for v in views if v["index"] == preview_view), None)
    previews = {}
    for key, view in (("worst", worst), ("view", fixed)):
        written = preview(test_dir, view, run_dir / f"preview_{key}.png") if view else None
        previews[key] = written.relative_to(out).as_posix() if written else None
    memory_file = run_dir / "fit_memory.json"
    memory = json.loads(memory_file.read_text()) if memory_file.exists() else {}
    host_file = run_dir / HOST_CPU_FILE
    host = json.loads(host_file.read_text()) if host_file.exists() else {}
    return {
        "config": name, "config_file": relative(config_file),
        "wall_s": stats["wall_s"], "steps": stats["steps"],
        "psnr": round(metrics.get("test/psnr", float("nan")), 3),
        "ssim": round(metrics.get("test/ssim", float("nan")), 4),
        "lpips": (report.get("mean") or {}).get("lpips"),
        **{key: stats[key]
           for key in ("samples_per_ray", "rays_per_s", "samples_per_s", "overhead_fraction")},
        "peak_memory_mb": memory.get("peak_memory_mb"),
        # The machine's CPU time that the run (fit and tests) did not get: other processes and steal.
        "cpu_lost": round(host["others"] + host["steal"], 3) if host else None,
        "worst_view": None if worst is None else {k: worst[k] for k in ("index", "name", "psnr")},
        "preview_view": None if fixed is None else {k: fixed[k] for k in ("index", "name", "psnr")},
        "previews": previews,
        "curve": stats["curve"],
    }


def preview(test_dir: Path, view: dict[str, Any], path: Path) -> Path | None:
    """``path``: target | render of ``view``, cut from the panel (rendered | target | error) that the
    test's evaluation report wrote; ``None`` when there is none."""
    from PIL import Image

    from nerf_lightning.callbacks.prediction_writer import view_stem
    from nerf_lightning.evaluation.worst_views import PANELS_DIR

    panel_file = test_dir / PANELS_DIR / f"{view_stem(view['index'], view['name'])}.png"
    if not panel_file.exists():
        return None
    panel = Image.open(panel_file).convert("RGB")
    width = panel.width // 3
    image = Image.new("RGB", (2 * width, panel.height))
    image.paste(panel.crop((width, 0, 2 * width, panel.height)), (0, 0))  # target
    image.paste(panel.crop((0, 0, width, panel.height)), (width, 0))  # render
    image.save(path, format="PNG")
    return path


def image_cell(path: str | None, alt: str) -> str:
    """A markdown image (``-`` without one)."""
    return f"![{alt}]({path})" if path else "-"


def view_label(view: dict[str, Any] | None) -> str:
    """``view 3 `r_3.png`, 21.50 dB`` for a view record of :func:`summarize` (``""`` without one)."""
    if not view:
        return ""
    name = f" `{view['name']}`" if view.get("name") else ""
    return f"view {view['index']}{name}, {view['psnr']:.2f} dB"
