"""`make bench`: how fast the default demo config learns, and how its cost grows with the image size.

    python -m benchmarks.speed --out bench_out/speed [--wall-s 180] [--resolutions 100 200 400]
        [--curve-every-s 5] [--set model.learning_rate=0.02 ...] [--label NAME]

The demo scene is rendered at each resolution (``make_demo_scene(resolution=R)``, same cameras and
shapes) and ``configs/demo.yaml`` trained on it for the same ``--wall-s`` training seconds
(evaluation excluded, ``benchmarks.clock.TrainClock``), then tested on the whole test split. Per
resolution: test PSNR and SSIM, steps/s, rays/s, samples/ray, peak memory, and the training
seconds until validation PSNR (mean over the curve's views) first reaches 30, 32 and 34 dB.

``--set key=value`` (dotted config keys, YAML values) changes the config for every resolution, so
an experiment and the shipped config are benchmarked by the same code; ``--label`` names the
experiment in the results. Writes ``OUT/results.json``::

    {"machine": {...}, "runs": [{"label", "resolution", "wall_s", "steps", "steps_per_s", "psnr",
                                 "ssim", "rays_per_s", "samples_per_ray", "peak_memory_mb",
                                 "seconds_to": {"30": s, "32": s, "34": s}, "curve", "stage_ms"}]}

and ``OUT/results.md``. Re-running with another label adds its runs beside the earlier ones. The final
table is also added, dated, to ``benchmarks/RESULTS.md`` (``--results PATH``; ``--results ''``: not).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import (
    REPO,
    bench_trainer,
    fit_and_test,
    fmt,
    load_config,
    machine,
    read_test_metrics,
    train_clock,
    train_stats,
)
from benchmarks.results import add_option, record_to

CONFIG = REPO / "configs" / "demo.yaml"
THRESHOLDS = (30.0, 32.0, 34.0)


def seconds_to(curve: list[list[float]], psnr: float) -> float | None:
    """Training seconds at the first curve point ``[train_s, val_psnr]`` reaching ``psnr``; ``None``
    when none does."""
    return next((t for t, p in curve if p >= psnr), None)


def apply_overrides(config: dict[str, Any], overrides: list[str]) -> None:
    """Set ``a.b.c=value`` items (``value`` parsed as YAML) in the nested ``config``; a number
    names a list item (``trainer.callbacks.1.init_args.target_samples=16384``)."""
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE, e.g. model.learning_rate=0.02")
        node: Any = config
        *parents, leaf = key.split(".")
        try:
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
            node[int(leaf) if isinstance(node, list) else leaf] = _value(value)
        except (IndexError, ValueError, TypeError):
            raise SystemExit(f"--set {item!r}: {key} does not name a place in the config (list items "
                             "by position, e.g. trainer.callbacks.1.init_args.target_samples)") from None


def _value(text: str) -> Any:
    """``text`` as YAML, with numbers like ``2e-2`` that YAML 1.1 leaves as strings read as floats."""
    value = yaml.safe_load(text)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def scene_at(resolution: int, scenes: Path) -> Path:
    """The demo scene rendered at ``resolution`` pixels, made under ``scenes`` on first use."""
    from nerf_lightning.datasets.demo_scene import is_demo_scene_complete, make_demo_scene

    root = scenes / f"demo-{resolution}"
    if not is_demo_scene_complete(root):
        make_demo_scene(root, resolution=resolution)
    return root


def run_one(resolution: int, out: Path, scenes: Path, wall_s: float, curve_every_s: float,
            overrides: list[str]) -> dict[str, Any]:
    """Train the demo config at ``resolution`` for ``wall_s`` training seconds, test it, summarise."""
    config = load_config(CONFIG)
    callbacks = [*(config["trainer"].get("callbacks") or []), train_clock(wall_s, curve_every_s, 2)]
    bench_trainer(config, callbacks)
    config["data"]["make_demo"] = False
    apply_overrides(config, overrides)
    log_dir, test_dir = fit_and_test(config, out, scene_at(resolution, scenes))
    stats = train_stats(log_dir)
    metrics = read_test_metrics(test_dir)
    memory = json.loads((out / "fit_memory.json").read_text())
    return {
        "resolution": resolution, "wall_s": stats["wall_s"], "steps": stats["steps"],
        "steps_per_s": round(stats["steps"] / stats["wall_s"], 2) if stats["wall_s"] else None,
        "psnr": round(metrics["test/psnr"], 3), "ssim": round(metrics["test/ssim"], 4),
        "rays_per_s": stats["rays_per_s"], "samples_per_ray": stats["samples_per_ray"],
        "peak_memory_mb": round(memory["peak_memory_mb"], 1),
        "seconds_to": {f"{t:.0f}": seconds_to(stats["curve"], t) for t in THRESHOLDS},
        "stage_ms": stats["stage_ms"], "curve": stats["curve"],
    }


def markdown(results: dict[str, Any]) -> str:
    info = results["machine"]
    lines = [f"Machine: {info['platform']}, torch {info['torch']}, {info['threads']} threads.", "",
             "| config | pixels | train s | steps/s | test PSNR | SSIM | rays/s | samples/ray | peak MB "
             "| s to 30 dB | s to 32 dB | s to 34 dB |", "|" + "---|" * 12]
    for r in results["runs"]:
        reach = [fmt(r["seconds_to"][f"{t:.0f}"], 1) for t in THRESHOLDS]
        lines.append(f"| {r['label']} | {r['resolution']} | {r['wall_s']} | {fmt(r['steps_per_s'])} | "
                     f"{fmt(r['psnr'])} | {fmt(r['ssim'], 3)} | {fmt(r['rays_per_s'], 0)} | "
                     f"{fmt(r['samples_per_ray'])} | {fmt(r['peak_memory_mb'], 0)} | {' | '.join(reach)} |")
    lines += ["", "Seconds to a PSNR: training seconds (evaluation excluded) until the mean validation "
                  "PSNR of two views first reaches it ('-': not within the run)."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench_out" / "speed")
    parser.add_argument("--wall-s", type=float, default=180.0, help="training seconds per run")
    parser.add_argument("--curve-every-s", type=float, default=5.0)
    parser.add_argument("--resolutions", type=int, nargs="+", default=[100, 200, 400])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="change the demo config for these runs (dotted key, YAML value)")
    parser.add_argument("--label", default="demo.yaml", help="the name of these runs in the results")
    add_option(parser)
    options = parser.parse_args()
    results_path = options.out / "results.json"
    results: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {"runs": []}
    results["machine"] = machine()
    for resolution in options.resolutions:
        print(f"{options.label} at {resolution} pixels ...", flush=True)
        started = time.perf_counter()
        run_dir = options.out / f"{options.label.replace('/', '_')}-{resolution}"
        run = {"label": options.label, "overrides": options.overrides,
               **run_one(resolution, run_dir, options.out / "scenes", options.wall_s, options.curve_every_s,
                         options.overrides)}
        run["process_s"] = round(time.perf_counter() - started, 1)
        results["runs"] = [*(r for r in results["runs"]
                             if (r["label"], r["resolution"]) != (run["label"], resolution)), run]
        options.out.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(results, indent=2))
        (options.out / "results.md").write_text(markdown(results))
        print(f"  test PSNR {run['psnr']:.2f}  steps/s {run['steps_per_s']}  seconds to 30/32/34 dB "
              f"{list(run['seconds_to'].values())}  peak {run['peak_memory_mb']:.0f} MB "
              f"({run['process_s']} s with curve and test)", flush=True)
    print(markdown(results))
    record_to(options.results, "speed", markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
