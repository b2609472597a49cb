"""`make bench`: every recipe on every scene of its kind at equal training time, and its train-test gap.

    python -m benchmarks.generalise --out bench_out/generalise [--wall-s 300] [--scenes demo thin fox]
        [--kinds object 360 forward] [--resolution 100] [--table benchmarks/generalise.yaml [MORE.yaml ...]]
        [--max-steps N]

A recipe tuned on a few scenes can score well on them and badly on the next capture. This benchmark
trains each config on every scene of the kind it is meant for (``object``, ``360``, ``forward``) and
measures, besides the test PSNR, how much better it reproduces the views it trained on: the
*train-test gap*, the PSNR of the training views minus that of the test views.

Which configs serve which kind, and the scenes, are data: ``benchmarks/generalise.yaml`` (later
``--table`` files replace a kind's configs, add or replace captures, and replace the suite's
settings key by key). The scenes are those of ``nerf_lightning.datasets.scene_suite`` (generated once
into ``OUT/scenes/<name>-<resolution>`` and reused: a file beside each folder records the seed it was
made with) and the captures on disk (``../shared/datasets/fox``, ``fern``), each skipped, saying so,
when its folder is missing.

Every run is ``benchmarks.common.run_config``, as in ``benchmarks.recipes``: a real
``nerf-lightning fit`` of ``--wall-s`` training seconds (evaluation excluded,
``benchmarks.clock.TrainClock``) or, with ``--max-steps N``, of N training steps if those come first,
so that a setting that changes at a step (a schedule's) is compared at the same step on any machine;
then ``test`` on the whole test split with the panel of its worst view, in a process of its own
(``benchmarks.fit_test``), one run at a time. The same process then tests the final weights on the
training views (``--data.test_split train``; the table's ``train_views``: all of them, or the first N),
so both PSNRs come from the same rendering and the same metric code: whole images, each training photo
as it was fitted (its own appearance code and camera correction, where the recipe learns them), each test
view with the mean code. The gap is therefore what a recipe fails to carry over to new viewpoints, not
an artefact of comparing the training loss on random rays with a whole-image metric.
Figures are read back from the files the runs leave (``run.json``, ``eval.json``,
``bench_curve.jsonl``).

Writes ``OUT/results.json``::

    {"machine": {...}, "settings": {"wall_s", "max_steps", "resolution", "seed", "train_views"},
     "scenes": {"thin": {"kind": "object", "source": "suite", "root": PATH,
                         "runs": [{"config", "config_file", "wall_s", "steps", "psnr", "ssim",
                                   "train_psnr", "train_ssim", "train_views", "gap",
                                   "samples_per_ray", ..., "worst_view": {"index", "name", "psnr"},
                                   "previews": {"worst": PATH, "view": PATH}}, ...]}}}

(``previews`` relative to ``OUT``: target | render PNGs), ``OUT/results.md`` (one row per scene and
config with the worst test view's preview, then one row per config over its scenes) and
``OUT/<scene>/<config>/``, each run's own folder. The tables, without the previews, are also added,
dated, to ``benchmarks/RESULTS.md`` (``--results PATH``; ``--results ''``: not). Rerunning a subset
replaces those runs in ``results.json`` and keeps the others.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from benchmarks.common import (
    REPO,
    fmt,
    image_cell,
    load_config,
    machine,
    merge,
    read_test_metrics,
    relative,
    repo_path,
    run_config,
    summarize,
    train_test_dir,
    view_label,
)
from benchmarks.results import add_option, record_to

TABLE = REPO / "benchmarks" / "generalise.yaml"
KINDS = ("object", "360", "forward")
"""The kinds of scene (``scene_suite.SceneKind``): what a recipe is meant for."""
PREVIEW_VIEW = 0
"""The test view whose panel is kept beside the worst one's (in ``results.json`` only)."""

TrainViews = int | Literal["all"]


class TableError(ValueError):
    """A table file that cannot be used: the message names the file, the field and what was expected."""


# ------------------------------------------------------------------ the table
@dataclass(frozen=True)
class Recipe:
    """A config meant for a kind of scene: its name in the results, its file, overrides of its own."""

    name: str
    config_file: Path
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Capture:
    """A scene on disk (``root``), of ``kind``, with overrides for every config trained on it."""

    name: str
    root: Path
    kind: str
    overrides: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Table:
    """``benchmarks/generalise.yaml``, checked (see the file's own comments for each field)."""

    kinds: dict[str, list[Recipe]]
    resolution: int
    seed: int
    suite_scenes: list[str] | None  # None: every scene of the suite
    suite_overrides: dict[str, Any]
    scene_overrides: dict[str, dict[str, Any]]
    captures: dict[str, Capture]
    train_views: TrainViews


def load_table(paths: list[Path]) -> Table:
    """The table of the files, later ones replacing a kind's configs, a capture by name, a suite setting
    by key, and ``train_views``. Raises :class:`TableError` naming the file and field at fault."""
    kinds: dict[str, Any] = {}
    suite: dict[str, Any] = {}
    captures: dict[str, Any] = {}
    train_views: Any = "all"
    where: dict[str, Path] = {}  # field -> the file it last came from, for the error messages
    for path in paths:
        data = load_config(path) or {}
        if not isinstance(data, dict):
            raise TableError(f"{path}: expected a mapping with kinds, suite, captures, train_views")
        unknown = sorted(set(data) - {"kinds", "suite", "captures", "train_views"})
        if unknown:
            raise TableError(f"{path}: unknown field(s) {unknown}; expected kinds, suite, captures, "
                             "train_views")
        for name, value in (data.get("kinds") or {}).items():
            kinds[str(name)] = value  # YAML reads an unquoted 360 as a number
            where[f"kinds.{name}"] = path
        suite.update(data.get("suite") or {})
        where.update({f"suite.{key}": path for key in data.get("suite") or {}})
        for name, value in (data.get("captures") or {}).items():
            captures[str(name)] = value
            where[f"captures.{name}"] = path
        if "train_views" in data:
            train_views, where["train_views"] = data["train_views"], path
    for kind in kinds:
        _known_kind(kind, where[f"kinds.{kind}"], "kinds")
    return Table(
        kinds={kind: _recipes(entries, where[f"kinds.{kind}"], kind) for kind, entries in kinds.items()},
        resolution=_positive(suite.get("resolution", 100), where.get("suite.resolution"), "suite.resolution"),
        seed=int(suite.get("seed", 0)),
        suite_scenes=_suite_scenes(suite.get("scenes", "all"), where.get("suite.scenes")),
        suite_overrides=dict(suite.get("overrides") or {}),
        scene_overrides={str(k): dict(v or {}) for k, v in (suite.get("scene_overrides") or {}).items()},
        captures={name: _capture(name, spec, where[f"captures.{name}"]) for name, spec in captures.items()},
        train_views=_train_views(train_views, where.get("train_views")),
    )


def _known_kind(kind: str, path: Path, key: str) -> None:
    if kind not in KINDS:
        raise TableError(f"{path}: {key}: unknown kind {kind!r}; expected one of {', '.join(KINDS)}")


def _recipes(entries: Any, path: Path, kind: str) -> list[Recipe]:
    if not isinstance(entries, list):
        raise TableError(f"{path}: kinds.{kind}: expected a list of config files, got {entries!r}")
    return [_recipe(entry, path, kind) for entry in entries]


def _recipe(entry: Any, path: Path, kind: str) -> Recipe:
    entry = {"config": entry} if isinstance(entry, str) else entry
    if not isinstance(entry, dict) or not isinstance(entry.get("config"), str):
        raise TableError(f"{path}: kinds.{kind}: expected a config file or {{config: FILE, name: NAME, "
                         f"overrides: {{...}}}}, got {entry!r}")
    config_file = repo_path(entry["config"])
    return Recipe(str(entry.get("name") or config_file.stem), config_file, dict(entry.get("overrides") or {}))


def _capture(name: str, spec: Any, path: Path) -> Capture:
    if not isinstance(spec, dict) or not isinstance(spec.get("root"), str):
        raise TableError(f"{path}: captures.{name}: expected {{root: DIR, kind: KIND, overrides: {{...}}}}, "
                         f"got {spec!r}")
    kind = str(spec.get("kind"))
    _known_kind(kind, path, f"captures.{name}.kind")
    return Capture(name, repo_path(spec["root"]), kind, dict(spec.get("overrides") or {}))


def _positive(value: Any, path: Path | None, key: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TableError(f"{path}: {key}: expected a positive integer, got {value!r}")
    return value


def _suite_scenes(value: Any, path: Path | None) -> list[str] | None:
    if value == "all":
        return None
    if not isinstance(value, list):
        raise TableError(f"{path}: suite.scenes: expected 'all' or a list of scene names, got {value!r}")
    return [str(name) for name in value]


def _train_views(value: Any, path: Path | None) -> TrainViews:
    if value == "all":
        return "all"
    return _positive(value, path, "train_views")


# ------------------------------------------------------------------ the plan
@dataclass(frozen=True)
class Scene:
    """A scene to train on: from the suite (``root`` made on first use) or a capture (``root`` given)."""

    name: str
    kind: str
    source: Literal["suite", "capture"]
    overrides: dict[str, Any]
    root: Path | None = None


def suite_scenes() -> Mapping[str, Any] | None:
    """``scene_suite.SUITE``, or ``None`` (one line says why) when the module cannot be imported."""
    try:
        from nerf_lightning.datasets.scene_suite import SUITE
    except ImportError as error:
        print(f"skipping the suite's scenes: nerf_lightning.datasets.scene_suite cannot be imported "
              f"({type(error).__name__}: {error})", flush=True)
        return None
    return SUITE


def plan(table: Table, suite: Mapping[str, Any] | None, names: list[str] | None = None,
         kinds: list[str] | None = None) -> list[Scene]:
    """The scenes to run, suite scenes first (in the table's or the suite's order), then the captures,
    keeping those named in ``names`` and of ``kinds`` (``None``: all) whose kind has a config.
    Raises :class:`TableError` for a name that is neither a suite scene nor a capture."""
    available = dict(suite or {})
    chosen = list(available) if table.suite_scenes is None else table.suite_scenes
    missing = [name for name in chosen if name not in available] if suite is not None else []
    if missing:
        raise TableError(f"suite.scenes: not in the scene suite: {missing} (known: {list(available)})")
    clash = sorted(set(available) & set(table.captures))
    if clash:
        raise TableError(f"captures: {clash} also name scenes of the suite; rename the captures")
    known = [*available, *table.captures]
    unknown = [name for name in names or [] if name not in known]
    if unknown:
        raise TableError(f"--scenes: not a suite scene nor a capture: {unknown} (known: {known})")
    scenes = [Scene(name, str(available[name].kind), "suite",
                    merge(table.suite_overrides, table.scene_overrides.get(name, {})))
              for name in (chosen if suite is not None else [])]
    scenes += [Scene(c.name, c.kind, "capture", c.overrides, c.root) for c in table.captures.values()]
    return [scene for scene in scenes
            if (names is None or scene.name in names) and (kinds is None or scene.kind in kinds)
            and table.kinds.get(scene.kind)]


def suite_scene_root(spec: Any, scenes_dir: Path, resolution: int, seed: int) -> Path:
    """The dataset of suite scene ``spec`` (a ``SuiteScene``) at ``resolution`` pixels, made into
    ``scenes_dir/<name>-<resolution>`` unless already there with this seed.

    ``SuiteScene.make`` renames its folder into place only when complete, so a folder that exists is
    whole; the ``<name>-<resolution>.json`` beside it says which seed made it (another seed's folder is
    made again: ``make`` replaces a folder that holds only scene files)."""
    root = scenes_dir / f"{spec.name}-{resolution}"
    made_with = scenes_dir / f"{spec.name}-{resolution}.json"
    record = {"scene": spec.name, "kind": str(spec.kind), "resolution": resolution, "seed": seed}
    if root.is_dir() and made_with.exists() and json.loads(made_with.read_text()) == record:
        return root
    print(f"making suite scene {spec.name} at {resolution} px into {root} ...", flush=True)
    scenes_dir.mkdir(parents=True, exist_ok=True)
    made = Path(spec.make(root, resolution=resolution, seed=seed))
    made_with.write_text(json.dumps(record))
    return made


# ------------------------------------------------------------------- one run
def train_scores(train_dir: Path, test_psnr: float) -> dict[str, Any]:
    """The training views' scores from their test run's files, and the gap to ``test_psnr``."""
    metrics = read_test_metrics(train_dir)
    views = json.loads((train_dir / "eval.json").read_text())["views"]
    psnr = metrics.get("test/psnr", float("nan"))  # the test stage's metric names, on training views
    return {"train_psnr": round(psnr, 3), "train_ssim": round(metrics.get("test/ssim", float("nan")), 4),
            "train_views": len(views), "gap": round(psnr - test_psnr, 3)}


def run_one(scene: Scene, root: Path, recipe: Recipe, out: Path, wall_s: float,
            train_views: TrainViews, max_steps: int = -1) -> dict[str, Any]:
    """Fit ``recipe`` on ``root`` for ``wall_s`` training seconds or ``max_steps`` steps (``-1``: no step
    limit), whichever comes first, test it on the test split and on the training views; its record
    (``benchmarks.common.summarize`` and :func:`train_scores`)."""
    run_dir = out / scene.name / recipe.name
    overrides = merge(recipe.overrides, scene.overrides)  # the scene knows its images: it comes last
    log_dir, test_dir = run_config(recipe.config_file, overrides, run_dir, root, wall_s, 0.0, PREVIEW_VIEW,
                                   train_views, max_steps)
    run = summarize(recipe.name, recipe.config_file, log_dir, test_dir, run_dir, out, PREVIEW_VIEW)
    return {**run, **train_scores(train_test_dir(run_dir), run["psnr"])}


# ------------------------------------------------------------------ summary
def _mean(values: list[float]) -> float | None:
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def per_config(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per config over the scenes it ran on: their count, mean test PSNR, mean train PSNR, mean gap,
    and the scene of the largest gap."""
    grouped: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for scene, entry in results["scenes"].items():
        for run in entry["runs"]:
            grouped.setdefault(run["config"], []).append((scene, entry["kind"], run))
    rows = []
    for config, runs in grouped.items():
        largest = max(runs, key=lambda r: r[2]["gap"] if math.isfinite(r[2]["gap"]) else -math.inf)
        rows.append({"config": config, "kinds": sorted({kind for _, kind, _ in runs}), "scenes": len(runs),
                     "psnr": _mean([r["psnr"] for _, _, r in runs]),
                     "train_psnr": _mean([r["train_psnr"] for _, _, r in runs]),
                     "gap": _mean([r["gap"] for _, _, r in runs]),
                     "largest_gap": {"scene": largest[0], "gap": largest[2]["gap"]}})
    return rows


def _gap(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:+.2f}"


SCENE_COLUMNS = ("scene", "kind", "config", "test PSNR", "SSIM", "train PSNR", "gap", "steps", "train s",
                 "CPU lost", "worst test view")
CONFIG_COLUMNS = ("config", "kinds", "scenes", "mean test PSNR", "mean train PSNR", "mean gap", "largest gap")


def _step_limit(max_steps: int) -> str:
    return "" if max_steps < 0 else f" or {max_steps} steps, whichever came first,"


def _percent(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f} %"


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def _header(columns: tuple[str, ...]) -> list[str]:
    return [_row(list(columns)), "|" + "---|" * len(columns)]


def markdown(results: dict[str, Any], with_previews: bool = True) -> str:
    """``results.md``: a row per scene and config (with the worst test view's preview when
    ``with_previews``), then a row per config over its scenes."""
    info, settings = results["machine"], results["settings"]
    views = ("every training view" if settings["train_views"] == "all"
             else f"the first {settings['train_views']} training views")
    lines = [f"Machine: {info['platform']}, torch {info['torch']}, {info['threads']} threads. "
             f"Settings: {json.dumps(settings)}", "",
             f"Each config trained for {fmt(float(settings['wall_s']), 0)} training seconds"
             f"{_step_limit(settings.get('max_steps', -1))} on every scene "
             f"of its kind (suite scenes at {settings['resolution']} px), then was tested on the whole test "
             f"split and on {views}, rendered and scored the same way (whole images; training views "
             "as fitted, with their own appearance and camera corrections, test views with the mean "
             "ones). Gap: train PSNR minus test PSNR, in dB; the larger, the less of what the recipe "
             "fitted carries over to new views. CPU lost: the share of the machine's CPU time that other "
             "processes or the host (steal) took while the run went on; such a run makes fewer steps in "
             "its time."
             + (" Previews: target | render." if with_previews else ""),
             "", *_header(SCENE_COLUMNS)]
    for scene, entry in results["scenes"].items():
        for r in entry["runs"]:
            worst = view_label(r.get("worst_view"))
            if with_previews:
                alt = f"{scene} {r['config']} worst test view"
                worst += "<br>" + image_cell((r.get("previews") or {}).get("worst"), alt)
            lines.append(_row([scene, entry["kind"], r["config"], fmt(r["psnr"]), fmt(r["ssim"], 3),
                               fmt(r["train_psnr"]), _gap(r["gap"]), r["steps"], fmt(r["wall_s"], 0),
                               _percent(r.get("cpu_lost")), worst]))
    lines += ["", *_header(CONFIG_COLUMNS)]
    for row in per_config(results):
        largest = row["largest_gap"]
        lines.append(_row([row["config"], ", ".join(row["kinds"]), row["scenes"], fmt(row["psnr"]),
                           fmt(row["train_psnr"]), _gap(row["gap"]),
                           f"{_gap(largest['gap'])} ({largest['scene']})"]))
    return "\n".join(lines) + "\n"


def write(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(markdown(results))


# --------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "bench_out" / "generalise")
    parser.add_argument("--wall-s", type=float, default=300.0,
                        help="training seconds per run (default 300: the recipes' own time budget)")
    parser.add_argument("--max-steps", type=int, default=-1,
                        help="stop each fit after this many training steps if --wall-s has not stopped it "
                             "(default -1: no step limit)")
    parser.add_argument("--table", type=Path, nargs="+", default=[TABLE],
                        help="tables (YAML); later files replace a kind's configs, captures by name and "
                             "suite settings by key")
    parser.add_argument("--scenes", nargs="+", help="suite scenes and captures to run (default: all)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, help="kinds of scene to run (default: all)")
    parser.add_argument("--resolution", type=int, help="the suite scenes' longer image side (default: the "
                                                       "table's)")
    add_option(parser)
    options = parser.parse_args(argv)
    if options.max_steps == 0 or options.max_steps < -1:
        parser.error(f"--max-steps: expected a positive number of steps or -1 (no limit), "
                     f"got {options.max_steps}")
    if options.resolution is not None and options.resolution < 1:
        parser.error(f"--resolution: expected a positive number of pixels, got {options.resolution}")
    try:
        table = load_table(options.table)
        resolution = options.resolution or table.resolution
        suite = suite_scenes()
        scenes = plan(table, suite, options.scenes, options.kinds)
    except TableError as error:
        parser.error(str(error))
    started = time.perf_counter()
    results_path = options.out / "results.json"
    results: dict[str, Any] = {"scenes": {}}
    if results_path.exists():  # re-running a subset updates those runs and keeps the others
        results = json.loads(results_path.read_text())
    results["machine"] = machine()
    results["settings"] = {"wall_s": options.wall_s, "max_steps": options.max_steps, "resolution": resolution,
                           "seed": table.seed, "train_views": table.train_views}
    for scene in scenes:
        if scene.root is not None and not scene.root.exists():
            print(f"skipping {scene.name}: {relative(scene.root)} not found", flush=True)
            continue
        recipes = []
        for recipe in table.kinds[scene.kind]:
            if recipe.config_file.exists():
                recipes.append(recipe)
            else:
                print(f"skipping {scene.name} / {recipe.name}: {relative(recipe.config_file)} not found",
                      flush=True)
        if not recipes:
            continue
        root = scene.root or suite_scene_root((suite or {})[scene.name], options.out / "scenes", resolution,
                                              table.seed)
        entry = results["scenes"].setdefault(scene.name, {"runs": []})
        entry.update({"kind": scene.kind, "source": scene.source, "root": relative(root)})
        for recipe in recipes:
            print(f"{scene.name} ({scene.kind}) / {recipe.name} ({relative(recipe.config_file)}) ...",
                  flush=True)
            run_started = time.perf_counter()
            run = run_one(scene, root, recipe, options.out, options.wall_s, table.train_views,
                          options.max_steps)
            run["process_s"] = round(time.perf_counter() - run_started, 1)  # fit + both tests
            order = [r.name for r in table.kinds[scene.kind]]
            runs = [*(r for r in entry["runs"] if r["config"] != recipe.name), run]
            entry["runs"] = sorted(runs, key=lambda r: order.index(r["config"]) if r["config"] in order
                                   else len(order))
            write(results, options.out)
            print(f"  test PSNR {run['psnr']:.2f}  train PSNR {run['train_psnr']:.2f} "
                  f"({run['train_views']} views)  gap {run['gap']:+.2f}  steps {run['steps']}  "
                  f"({run['process_s']} s with start-up and tests)", flush=True)
    results["bench_s"] = round(time.perf_counter() - started, 1)
    write(results, options.out)
    if results["scenes"]:  # nothing to record when every scene was skipped
        print(markdown(results, with_previews=False), flush=True)
        record_to(options.results, "generalise", markdown(results, with_previews=False))
    print(f"generalise bench took {results['bench_s']} s: {options.out / 'results.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
