"""The benchmark's summary figures, computed from the files a run leaves behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.samplers import markdown, summarize, time_to_reach


def _write(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_summary_counts_budget_hold_after_the_first_steps_and_overhead_from_telemetry(tmp_path: Path) -> None:
    target = 1000
    samples = [5000] * 100 + [1000] * 90 + [1200] * 10  # 10 of the 100 late steps miss by 20%
    _write(tmp_path / "bench_curve.jsonl",
           [{"train_s": 0.1 * (i + 1), "step": i + 1, "rays": 10, "samples": s}
            for i, s in enumerate(samples)]
           + [{"train_s": 10.0, "step": 100, "val_psnr": 20.0},
              {"train_s": 20.0, "step": 200, "val_psnr": 25.0}])
    _write(tmp_path / "telemetry.jsonl",
           [{"global_step": i + 1, "data": 0.01, "sampling": 0.02, "field": 0.06, "render": 0.0,
             "optimizer": 0.01, "other": 0.0, "step": 0.1, "rays": 10, "samples": s}
            for i, s in enumerate(samples)])
    run = summarize("OccupancyGrid", True, tmp_path, {"test/psnr": 24.5, "test/ssim": 0.9}, target)
    assert run["budget_hold"] == pytest.approx(0.9)
    assert run["overhead_fraction"] == pytest.approx(0.4)
    assert run["samples_per_ray"] == pytest.approx(105.0)  # last fifth: 30 steps at 100 per ray, 10 at 120
    assert run["rays_per_s"] == pytest.approx(2000 / 20.0)
    assert run["curve"] == [[10.0, 20.0], [20.0, 25.0]]
    assert time_to_reach(run["curve"], 24.0) == 20.0 and time_to_reach(run["curve"], 26.0) is None
    unbudgeted = summarize("Uniform", False, tmp_path, {"test/psnr": 20.0}, None)
    assert unbudgeted["budget_hold"] is None
    results = {"machine": {"platform": "x", "torch": "y", "threads": 2}, "settings": {},
               "scenes": {"demo": {"runs": [unbudgeted | {"budget": True}, run],
                                   "peer": {"name": "peer", "wall_s": 20.0, "psnr": 14.0,
                                            "rays_per_s": 5.0}}}}
    table = markdown(results)
    assert "| OccupancyGrid | on |" in table and "leads the peer by 10.50 dB" in table


def test_reduced_precision_runs_are_compared_with_their_32_bit_twin() -> None:
    def run(precision: str, steps: int, psnr: float) -> dict:
        return {"sampler": "OccupancyGrid", "budget": True, "pixels": "uniform", "precision": precision,
                "wall_s": 40.0, "steps": steps, "psnr": psnr, "ssim": 0.9, "rays_per_s": 1.0,
                "samples_per_s": float(steps), "samples_per_ray": 10.0, "overhead_fraction": 0.2,
                "budget_hold": 1.0, "curve": [], "peak_memory_mb": 1000.0 + steps}

    results = {"machine": {"platform": "x", "torch": "y", "threads": 2}, "settings": {},
               "scenes": {"demo": {"runs": [run("32-true", 400, 31.0), run("bf16-mixed", 300, 30.5)]}}}
    table = markdown(results)
    assert "| OccupancyGrid, bf16-mixed | on |" in table
    assert ("bf16-mixed vs 32-true (OccupancyGrid): 0.75x the steps/s (300 vs 400 steps), "
            "0.75x the samples/s, test PSNR 30.50 vs 31.00 dB at equal time, peak memory 1300 vs 1400 MB."
            ) in table
    assert "| 1300 |" in table
