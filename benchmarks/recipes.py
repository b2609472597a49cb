"""`make bench`: today's configs against the new recipe on real captures, at equal training time.

    python -m benchmarks.recipes --out bench_out/recipes [--wall-s 300] [--scenes fox fern]
        [--table benchmarks/recipes.yaml [MORE.yaml ...]]

The scenes and their configs are data: ``benchmarks/recipes.yaml`` (later ``--table`` files add
scenes or replace them by name). For each scene whose folder exists (otherwise one line says it is
skipped), every config is a real ``nerf-lightning fit`` and then ``test`` on the whole test split
in a process of its own (``benchmarks.fit_test``, one at a time), with ``--wall-s`` seconds of
training, evaluation excluded (``benchmarks.clock.TrainClock``): ``benchmarks.common.run_config``,
shared with ``benchmarks.generalise`` as is ``summarize``, the record. Figures come from the files
each run leaves: samples per ray from the per-step records, steps, PSNR and SSIM from the test's
``run.json``, per-view scores from its ``eval.json``, and the test's evaluation report writes the
panels of the worst view and of the scene's ``preview_view`` (``--eval_report.panel_views``,
``--eval_report.worst_panels``): nothing is rendered twice.

Writes ``OUT/results.json``::

    {"machine": {...}, "settings": {...},
     "scenes": {"fox": {"reference": "today",
                        "runs": [{"config", "config_file", "wall_s", "steps", "psnr", "ssim", "lpips",
                                  "samples_per_ray", "rays_per_s", "samples_per_s", "peak_memory_mb",
                                  "worst_view": {"index", "name", "psnr"},
                                  "previews": {"worst": PATH, "view": PATH}}, ...]}}}

(``previews`` paths relative to ``OUT``: target | render PNGs), ``OUT/results.md`` (a table per
scene, the deltas against the scene's first config, the previews) and ``OUT/<scene>/<config>/``,
each run's own folder. The tables, without the previews (their images stay in ``OUT``), are also
added, dated, to ``benchmarks/RESULTS.md`` (``--results PATH``; ``--results ''``: not).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    REPO,
    fmt,
    image_cell,
    load_config,
    machine,
    merge,
    relative,
    repo_path,
    run_config,
    summarize,
    view_label,
)
from benchmarks.results import add_option, record_to

TABLE = REPO / "benchmarks" / "recipes.yaml"


# ------------------------------------------------------------------ the table
def load_table(paths: list[Path]) -> dict[str, dict[str, Any]]:
    """The scenes of the table files, later files adding scenes or replacing them by name."""
    scenes: dict[str, dict[str, Any]] = {}
    for path in paths:
        scenes.update(load_config(path).get("scenes") or {})
    return scenes


def scene_configs(spec: dict[str, Any]) -> list[tuple[str, Path, dict[str, Any]]]:
    """``(name, config file, overrides)`` of a scene's configs, the reference first."""
    entries = []
    for name, entry in (spec.get("configs") or {}).items():
        entry = {"config": entry} if isinstance(entry, str) else entry
        overrides = merge(spec.get("overrides") or {}, entry.get("overrides") or {})
        entries.append((name, repo_path(entry["config"]), overrides))
    return entries


# ------------------------------------------------------------------ summary
def deltas(entry: dict[str, Any]) -> list[str]:
    """One line per run against the scene's reference run (its first config)."""
    runs = entry["runs"]
    reference = next((r for r in runs if r["config"] == entry.get("reference")), None)
    if reference is None:
        return []
    lines = []
    for run in runs:
        if run is reference:
            continue
        spr = (f"{run['samples_per_ray'] / reference['samples_per_ray']:.2f}x the samples per ray"
               if reference["samples_per_ray"] else "samples per ray n/a")
        steps = (f"{run['steps'] / reference['steps']:.2f}x the steps" if reference["steps"] else "steps n/a")
        lines.append(f"{run['config']} vs {reference['config']}: "
                     f"{run['psnr'] - reference['psnr']:+.2f} dB PSNR, "
                     f"{run['ssim'] - reference['ssim']:+.3f} SSIM, {spr}, {steps}, "
                     f"at {fmt(run['wall_s'], 0)} vs {fmt(reference['wall_s'], 0)} training seconds.")
    return lines


def markdown(results: dict[str, Any], with_previews: bool = True) -> str:
    lines = [f"Machine: {results['machine']['platform']}, torch {results['machine']['torch']}, "
             f"{results['machine']['threads']} threads. Settings: {json.dumps(results['settings'])}", "",
             "Each config trained for the same time (evaluation excluded), then tested on the whole test "
             "split. Previews: target | render.", ""]
    for scene, entry in results["scenes"].items():
        lines += [f"## {scene}", "", "| config | file | PSNR | SSIM | samples/ray | steps | train s |",
                  "|" + "---|" * 7]
        for r in entry["runs"]:
            lines.append(f"| {r['config']} | `{r['config_file']}` | {fmt(r['psnr'])} | {fmt(r['ssim'], 3)} | "
                         f"{fmt(r['samples_per_ray'])} | {r['steps']} | {fmt(r['wall_s'], 0)} |")
        lines += ["", *deltas(entry)]
        if not with_previews:
            lines.append("")
            continue
        lines += ["", "| config | worst test view | fixed test view |", "|---|---|---|"]
        for r in entry["runs"]:
            previews, alt = r.get("previews") or {}, f"{scene} {r['config']}"
            lines.append(f"| {r['config']} | {view_label(r.get('worst_view'))}<br>"
                         f"{image_cell(previews.get('worst'), alt + ' worst view')} | "
                         f"{view_label(r.get('preview_view'))}<br>"
                         f"{image_cell(previews.get('view'), alt + ' fixed view')} |")
        lines.append("")
    return "\n".join(lines)


def write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(markdown(results))


# --------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench_out" / "recipes")
    parser.add_argument("--wall-s", type=float, default=300.0, help="training seconds per run")
    parser.add_argument("--curve-every-s", type=float, default=0.0,
                        help="training seconds between validation PSNR points (0: only at the end)")
    parser.add_argument("--table", type=Path, nargs="+", default=[TABLE],
                        help="scene tables (YAML); later files add scenes or replace them by name")
    parser.add_argument("--scenes", nargs="+", help="scenes of the table to run (default: all)")
    add_option(parser)
    options = parser.parse_args(argv)
    table = load_table(options.table)
    unknown = sorted(set(options.scenes or []) - set(table))
    if unknown:
        parser.error(f"--scenes: not in the table: {unknown} (known: {sorted(table)})")
    started = time.perf_counter()
    results_path = options.out / "results.json"
    results: dict[str, Any] = {"scenes": {}}
    if results_path.exists():  # re-running a subset updates those runs and keeps the others
        results = json.loads(results_path.read_text())
    results["machine"] = machine()
    results["settings"] = {"wall_s": options.wall_s, "curve_every_s": options.curve_every_s}
    for scene in options.scenes or list(table):
        spec = table[scene]
        root = repo_path(spec["root"])
        if not root.exists():
            print(f"skipping {scene}: {root} not found", flush=True)
            continue
        preview_view = int(spec.get("preview_view", 0))
        configs = scene_configs(spec)
        entry = results["scenes"].setdefault(scene, {"runs": []})
        entry["reference"] = configs[0][0] if configs else None
        for name, config_file, overrides in configs:
            if not config_file.exists():
                print(f"skipping {scene} / {name}: {config_file} not found", flush=True)
                continue
            print(f"{scene} / {name} ({relative(config_file)}) ...", flush=True)
            run_dir = options.out / scene / name
            run_started = time.perf_counter()
            log_dir, test_dir = run_config(config_file, overrides, run_dir, root, options.wall_s,
                                           options.curve_every_s, preview_view)
            run = summarize(name, config_file, log_dir, test_dir, run_dir, options.out, preview_view)
            run["process_s"] = round(time.perf_counter() - run_started, 1)  # fit + test
            order = [n for n, _, _ in configs]
            runs = [*(r for r in entry["runs"] if r["config"] != name), run]
            entry["runs"] = sorted(runs, key=lambda r: order.index(r["config"]) if r["config"] in order
                                   else len(order))
            write(results, options.out)
            print(f"  test PSNR {run['psnr']:.2f}  SSIM {run['ssim']:.3f}  "
                  f"samples/ray {run['samples_per_ray']}  steps {run['steps']}  "
                  f"({run['process_s']} s with start-up and test)", flush=True)
    results["bench_s"] = round(time.perf_counter() - started, 1)
    write(results, options.out)
    if results["scenes"]:  # nothing to record when every scene's folder is missing
        record_to(options.results, "recipes", markdown(results, with_previews=False))
    print(f"recipes bench took {results['bench_s']} s: {options.out / 'results.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
