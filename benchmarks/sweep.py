"""A sweep as a team runs it: ``configs/sweeps/samplers-demo.yaml`` with several workers on one study in a
throwaway PostgreSQL server, each worker one thread, timed from the first worker's start to the last one's
end.

Reports the wall time, each trial's training seconds (from its event files, as ``nerf-lightning runs``
reads them) against the time the trial took in the study (Optuna's start and end of the trial): the
difference is a trial's overhead (the fit's start-up, data loading, validation, the test process,
bookkeeping). Every trial's state, values and test PSNR, and the best trial. With ``--storage sqlite``
the same sweep runs on one worker with the SQLite default instead.

Run::

    python -m benchmarks.sweep --out bench_out/sweep                 # 2 workers, PostgreSQL
    python -m benchmarks.sweep --out bench_out/sweep --storage sqlite --workers 1

and the table goes to ``benchmarks/RESULTS.md`` (``--results ''``: not). The PostgreSQL server programs
come from ``PG_BIN`` (default Debian's PostgreSQL 15), as in the tests (``tests/helpers/postgres.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from benchmarks.results import add_option, record_to

REPO = Path(__file__).resolve().parents[1]
SWEEP_FILE = REPO / "configs" / "sweeps" / "samplers-demo.yaml"


@contextlib.contextmanager
def _storage(kind: str) -> Iterator[str | None]:
    if kind == "sqlite":
        yield None  # the sweep's default: OUT/study.db
        return
    from tests.helpers.postgres import postgres_missing, throwaway_postgres

    missing = postgres_missing()
    if missing is not None:
        raise SystemExit(f"benchmarks.sweep: {missing}")
    with throwaway_postgres() as url:
        yield url


def _trial_rows(storage: str, study: str) -> list[dict[str, Any]]:
    import optuna

    from nerf_lightning.runs.curves import read_curve

    rows = []
    for trial in optuna.load_study(study_name=study, storage=storage).get_trials():
        run = trial.user_attrs.get("run")
        curve = read_curve(Path(run)) if run and Path(run).is_dir() else None
        took = ((trial.datetime_complete - trial.datetime_start).total_seconds()
                if trial.datetime_complete and trial.datetime_start else None)
        train = curve.train_seconds if curve else None
        rows.append({"trial": trial.number, "state": trial.state.name.lower(), "params": trial.params,
                     "value": trial.value, "train_s": train, "trial_s": took,
                     "overhead_s": None if took is None or train is None else took - train})
    return rows


def _fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(result: dict[str, Any]) -> str:
    keys = sorted({key for row in result["trials"] for key in row["params"]})
    lines = [f"`nerf-lightning sweep --config configs/sweeps/samplers-demo.yaml`, {result['workers']} "
             f"worker(s) of one thread each, storage {result['storage']}: {result['complete']} trials "
             f"complete in {result['wall_s']:.0f} s wall time (max_time {result['max_time']} per trial).", "",
             "| trial | state | " + " | ".join(keys) + " | test PSNR | train s | trial s | overhead s |",
             "|---|---|" + "---|" * len(keys) + "---|---|---|---|"]
    for row in result["trials"]:
        lines.append(f"| {row['trial']} | {row['state']} | "
                     + " | ".join(str(row["params"].get(k, "-")) for k in keys)
                     + f" | {_fmt(row['value'], 2)} | {_fmt(row['train_s'])} | {_fmt(row['trial_s'])} | "
                       f"{_fmt(row['overhead_s'])} |")
    overheads = [row["overhead_s"] for row in result["trials"] if row["overhead_s"] is not None]
    if overheads:
        mean = sum(overheads) / len(overheads)
        lines += ["", f"Overhead per trial (trial time less training time): mean {mean:.1f} s, "
                  f"min {min(overheads):.1f}, max {max(overheads):.1f}."]
    best = result.get("best")
    if best:
        values = ", ".join(f"{key} {value}" for key, value in best["params"].items())
        lines += ["", f"Best: trial {best['trial']} ({values}), test PSNR {best['value']:.2f} dB."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("bench_out/sweep"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--storage", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument("--trials", type=int, default=None, help="override the sweep file's trials")
    add_option(parser)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    sweep = yaml.safe_load(SWEEP_FILE.read_text())
    sweep["out"] = str((args.out / "sweep").resolve())
    if args.trials is not None:
        sweep["trials"] = args.trials
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    from nerf_lightning.datasets.demo_scene import is_demo_scene_complete, make_demo_scene

    scene = args.out / "data" / "demo"  # the base config's data.root: made once, before the workers start
    if not is_demo_scene_complete(scene):
        make_demo_scene(scene)
    with _storage(args.storage) as url:
        if url is not None:
            sweep["storage"] = url
        sweep_file = args.out / "samplers-demo.yaml"
        sweep_file.write_text(yaml.safe_dump(sweep, sort_keys=False))
        start = time.monotonic()
        logs = [open(args.out / f"worker{i}.log", "wb") for i in range(args.workers)]  # noqa: SIM115
        try:
            command = [sys.executable, "-m", "nerf_lightning", "sweep", "--config", str(sweep_file.resolve())]
            workers = [subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=args.out)
                       for log in logs]
            codes = [worker.wait() for worker in workers]
        finally:
            for log in logs:
                log.close()
        wall = time.monotonic() - start
        storage = url or f"sqlite:///{Path(sweep['out']) / 'study.db'}"
        rows = _trial_rows(storage, "samplers-demo")
    complete = [row for row in rows if row["state"] == "complete"]
    best = max(complete, key=lambda row: row["value"]) if complete else None
    result = {"workers": args.workers, "storage": args.storage, "exit_codes": codes, "wall_s": wall,
              "max_time": sweep["max_time"], "complete": len(complete), "trials": rows, "best": best}
    (args.out / "results.json").write_text(json.dumps(result, indent=1, default=str))
    text = markdown(result)
    (args.out / "results.md").write_text(text)
    print(text)
    record_to(args.results, "sweep", text)
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
