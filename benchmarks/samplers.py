"""`make bench`: every sampler with and without SampleBudget, and a peer, at equal training time.

    python -m benchmarks.samplers --out bench_out [--wall-s 40] [--scenes demo fern]
        [--samplers Uniform OccupancyGrid] [--budget on off] [--pixels uniform error]
        [--precision 32-true bf16-mixed] [--no-peer]

Each run is a real ``nerf-lightning fit`` and then ``nerf-lightning test`` on the whole test
split, in a process of its own (``benchmarks.fit_test``; one at a time: on two cores two runs
would slow each other down), with ``--wall-s`` seconds of training, evaluation excluded
(``benchmarks.clock.TrainClock`` renders validation views every ``--curve-every-s`` training
seconds for the PSNR-over-time curve).
The ``Telemetry`` callback's per-step records give throughput, the share of step time outside
the field (``overhead_fraction``) and how well the budget held. The peer is kornia 0.8.2's
``kornia.nerf`` in its own virtual environment (``benchmarks.peer_kornia``), trained for the
same wall time and scored by the same PSNR definition.

Writes ``OUT/results.json``::

    {"machine": {...}, "settings": {...},
     "scenes": {"demo": {"runs": [{"sampler", "budget", "wall_s", "psnr", "ssim", "rays_per_s",
                                   "samples_per_s", "samples_per_ray", "overhead_fraction",
                                   "budget_hold", "steps", "curve"}, ...],
                         "peer": {"name", "wall_s", "psnr", "rays_per_s"}}, ...}}

``budget_hold`` is the share of steps after the first 100 whose samples lie within 10% of
the budget's target (``null`` without the budget); ``samples_per_ray`` is averaged over the
last fifth of training. Also ``OUT/results.md`` (tables) and ``OUT/psnr_over_time.png``; the tables
are also added, dated, to ``benchmarks/RESULTS.md`` (``--results PATH``; ``--results ''``: not).
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
    bench_trainer,
    fit_and_test,
    fmt,
    load_config,
    machine,
    read_jsonl,
    read_test_metrics,
    train_clock,
    train_stats,
)
from benchmarks.results import add_option, record_to

SCENES: dict[str, dict[str, Any]] = {
    "demo": {"config": REPO / "configs" / "demo.yaml", "root": None, "curve_views": 2},
    # Half the config's resolution (252x189): the full test split of every run, peer included, is
    # rendered on two CPU cores, and the whole bench has to fit in half an hour.
    "fern": {"config": REPO / "configs" / "llff.yaml", "root": REPO.parent / "shared" / "datasets" / "fern",
             "curve_views": 1, "data": {"downscale": 16}},
}
SAMPLERS = ("Uniform", "OccupancyGrid", "Hierarchical", "Proposal")
HOLD_TOLERANCE = 0.10
HOLD_SKIP_STEPS = 100


def _callbacks(config: Path, budget: bool) -> list[dict[str, Any]]:
    """The config's callbacks, without ``SampleBudget`` when ``budget`` is off."""
    callbacks = (load_config(config).get("trainer") or {}).get("callbacks") or []
    return [c for c in callbacks if budget or not c["class_path"].endswith("SampleBudget")]


def budget_target(config: Path) -> int | None:
    for callback in _callbacks(config, budget=True):
        if callback["class_path"].endswith("SampleBudget"):
            return int((callback.get("init_args") or {}).get("target_samples", 1 << 16))
    return None


def run_one(scene: str, sampler: str, budget: bool, out: Path, wall_s: float, curve_every_s: float,
            fixed_rays: int, pixels: str = "uniform", precision: str = "32-true") -> dict[str, Any]:
    """Fit ``sampler`` on ``scene`` for ``wall_s`` training seconds, test it, summarise the run."""
    spec = SCENES[scene]
    clock = train_clock(wall_s, curve_every_s, spec["curve_views"])
    # The scene's config, rewritten: a fresh sampler section (each sampler with its own defaults;
    # on the command line jsonargparse would carry the config's init_args over to the new class).
    config = load_config(spec["config"])
    bench_trainer(config, [*_callbacks(spec["config"], budget), clock], precision)  # a final last.ckpt
    config["model"]["sampler"] = {"class_path": sampler}
    config["data"].update(spec.get("data", {}))
    if not budget:
        config["data"]["rays_per_batch"] = fixed_rays
    config["data"]["pixel_selection"] = pixels
    # fit, then test of its final weights (benchmarks.fit_test)
    run, test_dir = fit_and_test(config, out, spec["root"])
    test_metrics = read_test_metrics(test_dir)
    target = budget_target(spec["config"]) if budget else None
    memory = json.loads((out / "fit_memory.json").read_text()) if (out / "fit_memory.json").exists() else {}
    return {**summarize(sampler, budget, run, test_metrics, target), "pixels": pixels,
            "precision": precision, "peak_memory_mb": memory.get("peak_memory_mb")}


def _key(run: dict[str, Any]) -> tuple[str, bool, str, str]:
    """What tells runs of one scene apart (results of older benches lack the last two)."""
    return run["sampler"], run["budget"], run.get("pixels", "uniform"), run.get("precision", "32-true")


def _variant(run: dict[str, Any]) -> str:
    """``, error pixels, bf16-mixed``-style suffix of a run's label (empty for the defaults)."""
    _, _, pixels, precision = _key(run)
    return ("" if pixels == "uniform" else f", {pixels} pixels") + (
        "" if precision == "32-true" else f", {precision}")


def precision_comparisons(runs: list[dict[str, Any]]) -> list[str]:
    """One line per reduced-precision run against its 32-bit twin (same sampler, budget, pixels)."""
    lines = []
    by_key = {_key(r): r for r in runs}
    for run in runs:
        sampler, budget, pixels, precision = _key(run)
        twin = by_key.get((sampler, budget, pixels, "32-true"))
        if precision == "32-true" or twin is None or not run["wall_s"] or not twin["wall_s"]:
            continue
        speed = (run["steps"] / run["wall_s"]) / (twin["steps"] / twin["wall_s"])
        samples = run["samples_per_s"] / twin["samples_per_s"]
        lines.append(f"{precision} vs 32-true ({sampler}{_variant(twin)}): {speed:.2f}x the steps/s "
                     f"({run['steps']} vs {twin['steps']} steps), {samples:.2f}x the samples/s, "
                     f"test PSNR {run['psnr']:.2f} vs {twin['psnr']:.2f} dB at equal time"
                     + (f", peak memory {run['peak_memory_mb']:.0f} vs {twin['peak_memory_mb']:.0f} MB."
                        if run.get("peak_memory_mb") and twin.get("peak_memory_mb") else "."))
    return lines


def summarize(sampler: str, budget: bool, log_dir: Path, test_metrics: dict[str, float],
              target: int | None) -> dict[str, Any]:
    stats = train_stats(log_dir)
    steps = [r for r in read_jsonl(log_dir / "bench_curve.jsonl") if "samples" in r]
    hold = None
    if target is not None and len(steps) > HOLD_SKIP_STEPS:
        late = steps[HOLD_SKIP_STEPS:]
        hold = sum(abs(r["samples"] - target) <= HOLD_TOLERANCE * target for r in late) / len(late)
    return {
        "sampler": sampler, "budget": budget, "wall_s": stats["wall_s"], "steps": stats["steps"],
        "psnr": round(test_metrics.get("test/psnr", float("nan")), 3),
        "ssim": round(test_metrics.get("test/ssim", float("nan")), 4),
        **{key: stats[key]
           for key in ("rays_per_s", "samples_per_s", "samples_per_ray", "overhead_fraction")},
        "budget_hold": None if hold is None else round(hold, 3),
        "budget_target": target,
        "stage_ms": stats["stage_ms"],
        "curve": stats["curve"],
    }


def time_to_reach(curve: list[list[float]], psnr: float) -> float | None:
    """Training seconds at the first curve point reaching ``psnr`` (``None`` if never)."""
    return next((t for t, p in curve if p >= psnr), None)


def markdown(results: dict[str, Any]) -> str:
    lines = [f"Machine: {results['machine']['platform']}, torch {results['machine']['torch']}, "
             f"{results['machine']['threads']} threads. Settings: {json.dumps(results['settings'])}", ""]
    for scene, entry in results["scenes"].items():
        runs = entry["runs"]
        reference = next((r for r in runs if r["budget"] and r["curve"]
                          and _key(r)[::2] == ("Uniform", "uniform", "32-true")), None)
        ref_psnr = reference["curve"][-1][1] if reference else None
        lines += [f"## {scene}", "",
                  "| sampler | budget | train s | steps | test PSNR | SSIM | rays/s | samples/s "
                  "| samples/ray | overhead | budget hold | peak MB | final curve PSNR "
                  "| s to Uniform's final curve PSNR |",
                  "|" + "---|" * 14]
        for r in runs:
            final = r["curve"][-1][1] if r["curve"] else None
            reach = time_to_reach(r["curve"], ref_psnr) if ref_psnr is not None else None
            lines.append(f"| {r['sampler']}{_variant(r)} | {'on' if r['budget'] else 'off'} | "
                         f"{r['wall_s']} | {r['steps']} | "
                         f"{fmt(r['psnr'])} | {fmt(r['ssim'], 3)} | {fmt(r['rays_per_s'], 0)} | "
                         f"{fmt(r['samples_per_s'], 0)} | {fmt(r['samples_per_ray'])} | "
                         f"{fmt(r['overhead_fraction'], 3)} | {fmt(r['budget_hold'], 3)} | "
                         f"{fmt(r.get('peak_memory_mb'), 0)} | {fmt(final)} | "
                         f"{'never' if reach is None else reach} |")
        comparisons = precision_comparisons(runs)
        if comparisons:
            lines += ["", *comparisons]
        peer = entry.get("peer")
        if peer:
            lines += ["", f"Peer: {peer['name']}: {fmt(peer.get('psnr'))} dB test PSNR after "
                          f"{peer['wall_s']} s "
                          f"({fmt(peer.get('rays_per_s'), 0)} rays/s)."]
            best = max(runs, key=lambda r: r["psnr"], default=None)
            if best and peer.get("psnr") is not None:
                lines.append(f"Best run ({best['sampler']}, budget {'on' if best['budget'] else 'off'}) "
                             f"leads the peer by {best['psnr'] - peer['psnr']:.2f} dB.")
        lines.append("")
    return "\n".join(lines)


def plot(results: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenes = list(results["scenes"])
    figure, axes = plt.subplots(1, len(scenes), figsize=(6.5 * len(scenes), 4.5), squeeze=False)
    for axis, scene in zip(axes[0], scenes, strict=True):
        samplers = sorted({run["sampler"] for run in results["scenes"][scene]["runs"]})
        for run in results["scenes"][scene]["runs"]:
            if run["curve"]:
                times, psnrs = zip(*run["curve"], strict=True)
                axis.plot(times, psnrs, "-" if run["budget"] else "--", marker=".",
                          color=f"C{samplers.index(run['sampler'])}",
                          label=f"{run['sampler']} ({'budget' if run['budget'] else 'fixed rays'}"
                                f"{_variant(run)})")
        peer = results["scenes"][scene].get("peer")
        if peer and peer.get("psnr") is not None:
            axis.axhline(peer["psnr"], color="gray", linestyle=":", label=f"peer: {peer['name']} (final)")
        axis.set(title=scene, xlabel="training seconds", ylabel="validation PSNR (dB)")
        axis.grid(alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(markdown(results))
    plot(results, out / "psnr_over_time.png")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench_out")
    # 18 runs (16 of ours, 2 of the peer), each with its start-up, curve and test renders, plus
    # the install and the peer's environment on first use: about 21 minutes on two cores from a
    # clean clone (the bench must stay under 30).
    parser.add_argument("--wall-s", type=float, default=40.0, help="training seconds per run")
    parser.add_argument("--curve-every-s", type=float, default=20.0)
    parser.add_argument("--fixed-rays", type=int, default=4096, help="rays per batch without the budget")
    parser.add_argument("--scenes", nargs="+", default=list(SCENES), choices=list(SCENES))
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS))
    parser.add_argument("--budget", nargs="+", default=["on", "off"], choices=["on", "off"])
    parser.add_argument("--pixels", nargs="+", default=["uniform"], choices=["uniform", "error"],
                        help="training pixel selection (data.pixel_selection) of the runs")
    parser.add_argument("--precision", nargs="+", default=["32-true"],
                        help="trainer.precision of the runs (e.g. 32-true bf16-mixed)")
    parser.add_argument("--no-peer", action="store_true", help="skip the kornia peer")
    add_option(parser)
    options = parser.parse_args()
    started = time.perf_counter()
    results_path = options.out / "results.json"
    results: dict[str, Any] = {"scenes": {}}
    if results_path.exists():  # re-running a subset updates those runs and keeps the others
        results = json.loads(results_path.read_text())
    results["machine"] = machine()
    results["settings"] = {"wall_s": options.wall_s, "curve_every_s": options.curve_every_s,
                           "fixed_rays": options.fixed_rays}
    for scene in options.scenes:
        root = SCENES[scene]["root"]
        if root is not None and not root.exists():
            print(f"skipping {scene}: {root} not found", flush=True)
            continue
        entry = results["scenes"].setdefault(scene, {"runs": []})
        for sampler in options.samplers:
            variants = [(mode == "on", p, q) for mode in options.budget for p in options.pixels
                        for q in options.precision]
            for budget, pixels, precision in variants:
                label = (f"{scene} / {sampler} / budget {'on' if budget else 'off'} / {pixels} pixels"
                         f" / {precision}")
                print(f"{label} ...", flush=True)
                suffix = ("" if pixels == "uniform" else f"-{pixels}") + (
                    "" if precision == "32-true" else f"-{precision}")
                run_dir = options.out / scene / f"{sampler}-{'budget' if budget else 'fixed'}{suffix}"
                run_started = time.perf_counter()
                run = run_one(scene, sampler, budget, run_dir, options.wall_s, options.curve_every_s,
                              options.fixed_rays, pixels, precision)
                run["process_s"] = round(time.perf_counter() - run_started, 1)  # fit + curve + test
                entry["runs"] = [*(r for r in entry["runs"] if _key(r) != _key(run)), run]
                write(results, options.out)
                print(f"  test PSNR {run['psnr']:.2f}  samples/ray {run['samples_per_ray']}  "
                      f"overhead {run['overhead_fraction']}  hold {run['budget_hold']}  "
                      f"({run['process_s']} s with start-up, curve and test)", flush=True)
        if not options.no_peer:
            from benchmarks.peer_kornia import run_peer

            print(f"{scene} / peer ...", flush=True)
            peer_started = time.perf_counter()
            peer = run_peer(scene, options.out / scene / "peer", options.wall_s)
            if peer is not None:  # with the environment's build on first use, scene export and test
                peer["process_s"] = round(time.perf_counter() - peer_started, 1)
            entry["peer"] = peer
            write(results, options.out)
            peer_s = round(time.perf_counter() - peer_started, 1)
            print(f"  peer PSNR {(peer or {}).get('psnr')}  ({peer_s} s)", flush=True)
    results["bench_s"] = round(time.perf_counter() - started, 1)
    write(results, options.out)
    print(markdown(results))
    record_to(options.results, "samplers", markdown(results))
    print(f"bench took {results['bench_s']} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
