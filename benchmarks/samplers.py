"""Compare samplers at equal training time on the demo scene (and fern when present).

    python -m benchmarks.samplers --out bench_out/samplers [--budget 180] [--samplers Uniform OccupancyGrid]

Each run is a real ``nerf-lightning fit`` in its own process (one at a time: on two cores two
runs would slow each other down), validated every ``--val-every`` steps on a few views with
validation excluded from the training clock (``benchmarks.clock.TrainClock``), then
``nerf-lightning test`` on the full test split. Writes ``results.json`` and ``results.md``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SCENES = {
    "demo": {"config": REPO / "configs" / "demo.yaml", "root": None},
    "fern": {"config": REPO / "configs" / "llff.yaml", "root": REPO.parent / "shared" / "datasets" / "fern"},
}
SAMPLERS = ("Uniform", "OccupancyGrid", "Hierarchical", "Proposal")


def _config_callbacks(config: Path) -> list[dict[str, Any]]:
    """The config's own callbacks (e.g. ``SampleBudget``), kept beside the clock."""
    import yaml

    return (yaml.safe_load(config.read_text()).get("trainer") or {}).get("callbacks") or []


def run_one(scene: str, sampler: str, out: Path, budget_s: float, val_every: int, val_views: int,
            budget: bool = True) -> dict[str, Any]:
    """Fit ``sampler`` on ``scene`` for ``budget_s`` training seconds, test it, summarise the run."""
    spec = SCENES[scene]
    out.mkdir(parents=True, exist_ok=True)
    clock = {"class_path": "benchmarks.clock.TrainClock", "init_args": {"budget_s": budget_s}}
    callbacks = (_config_callbacks(spec["config"]) if budget else []) + [clock]
    (out / "overlay.json").write_text(json.dumps({
        "trainer": {"max_time": None, "max_steps": -1, "max_epochs": -1, "limit_val_batches": val_views,
                    "enable_progress_bar": False, "callbacks": callbacks},
        "data": {"steps_per_epoch": val_every},
    }))
    common = ["--config", str(spec["config"]), "--config", str(out / "overlay.json"),
              "--trainer.default_root_dir", str(out), f"--model.sampler={sampler}"]
    if spec["root"] is not None:
        common += ["--data.root", str(spec["root"])]
    with open(out / "bench.log", "w") as log:
        subprocess.run([sys.executable, "-m", "nerf_lightning", "fit", *common], cwd=REPO, stdout=log,
                       stderr=subprocess.STDOUT, check=True)
        version = max((out / "lightning_logs").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
        subprocess.run([sys.executable, "-m", "nerf_lightning", "test", *common,
                        "--ckpt_path", str(version / "checkpoints" / "last.ckpt"),
                        "--trainer.default_root_dir", str(out / "test")],
                       cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True)
    test_runs = sorted((out / "test" / "lightning_logs").glob("version_*/run.json"))
    test_metrics = json.loads(test_runs[-1].read_text())["metrics"]["test"]
    return summarize(scene, sampler, budget, version / "bench_curve.jsonl", test_metrics)


def summarize(scene: str, sampler: str, budget: bool, curve_path: Path,
              test_metrics: dict[str, float]) -> dict[str, Any]:
    records = [json.loads(line) for line in curve_path.read_text().splitlines()]
    steps = [r for r in records if "samples" in r]
    vals = [r for r in records if "val_psnr" in r]
    wall = steps[-1]["train_s"] if steps else 0.0
    tail = steps[len(steps) * 4 // 5:] or steps
    rays = sum(r["rays"] for r in steps)
    samples = sum(r["samples"] for r in steps)
    return {
        "scene": scene, "sampler": sampler, "budget": budget, "wall_s": round(wall, 1),
        "steps": len(steps),
        "psnr": round(test_metrics.get("test/psnr", float("nan")), 3),
        "ssim": round(test_metrics.get("test/ssim", float("nan")), 4),
        "rays_per_s": round(rays / wall, 1) if wall else None,
        "samples_per_s": round(samples / wall, 1) if wall else None,
        "samples_per_ray": round(sum(r["samples"] for r in tail) / max(sum(r["rays"] for r in tail), 1), 2),
        "val_curve": [[round(v["train_s"], 1), round(v["val_psnr"], 3)] for v in vals],
    }


def time_to_reach(curve: list[list[float]], psnr: float) -> float | None:
    """Training seconds at the first validation reaching ``psnr`` (``None`` if never)."""
    return next((t for t, p in curve if p >= psnr), None)


def markdown(results: list[dict[str, Any]]) -> str:
    header = ("| scene | sampler | budget | train s | steps | test PSNR | SSIM | rays/s | samples/s "
              "| samples/ray (last fifth) | final val PSNR | s to Uniform's final val PSNR |")
    lines = [header, "|" + "---|" * 12]
    reference = {r["scene"]: r["val_curve"][-1][1] for r in results
                 if r["sampler"] == "Uniform" and r["budget"] and r["val_curve"]}
    for r in results:
        final_val = r["val_curve"][-1][1] if r["val_curve"] else float("nan")
        reach = time_to_reach(r["val_curve"], reference[r["scene"]]) if r["scene"] in reference else None
        lines.append(f"| {r['scene']} | {r['sampler']} | {'on' if r['budget'] else 'off'} | {r['wall_s']} | "
                     f"{r['steps']} | {r['psnr']:.2f} | {r['ssim']:.3f} | {r['rays_per_s']} | "
                     f"{r['samples_per_s']} | {r['samples_per_ray']} | {final_val:.2f} | "
                     f"{'never' if reach is None else reach} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench_out" / "samplers")
    parser.add_argument("--budget", type=float, default=180.0, help="training seconds per run")
    parser.add_argument("--val-every", type=int, default=50)
    parser.add_argument("--val-views", type=int, default=2)
    parser.add_argument("--scenes", nargs="+", default=list(SCENES))
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS))
    options = parser.parse_args()
    results = []
    results_path = options.out / "results.json"
    if results_path.exists():
        results = json.loads(results_path.read_text())
    for scene in options.scenes:
        if SCENES[scene]["root"] is not None and not SCENES[scene]["root"].exists():
            print(f"skipping {scene}: {SCENES[scene]['root']} not found")
            continue
        for sampler in options.samplers:
            print(f"{scene} / {sampler} ...", flush=True)
            result = run_one(scene, sampler, options.out / scene / sampler, options.budget, options.val_every,
                             options.val_views)
            results = [r for r in results if (r["scene"], r["sampler"], r["budget"]) !=
                       (scene, sampler, result["budget"])] + [result]
            options.out.mkdir(parents=True, exist_ok=True)
            results_path.write_text(json.dumps(results, indent=2))
            (options.out / "results.md").write_text(markdown(results))
            print(f"  test PSNR {result['psnr']:.2f}  samples/ray {result['samples_per_ray']}", flush=True)
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
