"""``nerf-lightning runs ROOT...``: the ledger of recorded runs, in comparability groups.

A run is a folder holding ``run.json`` (:mod:`nerf_lightning.runs.record`); the ledger finds every one
under the folders it is given and does not look inside them: the folders ``RUN/test``, ``RUN/test-2``...
that ``validate``, ``test`` and ``predict`` write into a run are that run's evaluations, not runs. A run's
test scores are those of its newest completed test (:func:`~nerf_lightning.runs.record.newest_evaluation`,
as ``compare`` reads them), and that test's own record says how they were obtained.

Test scores of two runs are compared only when the runs share what decides them (:data:`COMPARABILITY`):

* the data: the fingerprint (a content hash of poses and images) of the data the run trained on, and of
  the data its test scored;
* the evaluation: the tested split, the image resolution (``data.downscale``, or the pixel budget
  ``data.target_pixels`` and the downscale it chose), the background transparent pixels are composited
  over and the number of test views (``trainer.limit_test_batches``), as the test's record says; the
  run's own record for a run not yet tested, since ``test`` takes the run's config.

Runs sharing all of them form a group, and are ranked by test PSNR within it only. The code version
(the git commit, ``*`` when the tree was dirty) and the environment are shown, not grouped on: telling
two commits apart is what the ledger is for. Everything else (sampler, field, budget, learning rate) is
what the runs compare.

Training time is read from the run's TensorBoard event files
(:func:`~nerf_lightning.runs.curves.read_curve`), which every fit writes; the run record does not hold it.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nerf_lightning.files import atomic_write_text
from nerf_lightning.runs.compare import compare_runs, show_value
from nerf_lightning.runs.curves import Curve, CurveLine, plot_curves, read_curve
from nerf_lightning.runs.folders import RUN_RECORD, TRIAL_RECORD
from nerf_lightning.runs.record import newest_evaluation, read_record

MISSING = "-"
"""What the table shows for a value a run did not record (an empty cell in the CSV file)."""

NOT_SETTINGS = ("config.run_name",)
"""Config keys that differ between any two runs and say nothing of what they compare (``--why``)."""

@dataclass(frozen=True, eq=False)  # a run is itself: two copies of one record are two runs
class LedgerRun:
    """One run as the ledger sees it.

    Attributes:
        name: the run as the table names it (its folder, relative to the folder above all listed runs).
        folder: the run's folder.
        record: its ``run.json``.
        test: the ``run.json`` of its newest completed test (``RUN/test``, ``RUN/test-2``...), if any.
        curve: from its event files; ``None`` without any.
        trial: its ``trial.json`` when the run is a sweep's trial (study, number, parameters), else ``None``.
    """

    name: str
    folder: Path
    record: dict[str, Any]
    test: dict[str, Any] | None
    curve: Curve | None
    trial: dict[str, Any] | None = None

    @property
    def scoring(self) -> dict[str, Any]:
        """The record whose settings decide the test scores: the test's, else the run's own."""
        return self.test if self.test is not None else self.record

    def value(self, key: str) -> Any:
        """The run record's value at a dotted ``key`` (``config.model.learning_rate``); ``None`` if absent."""
        return _lookup(self.record, key)

    def scored(self, key: str) -> Any:
        """The scoring record's value at the dotted ``key``; ``None`` if absent."""
        return _lookup(self.scoring, key)

    @property
    def test_metrics(self) -> dict[str, Any]:
        return (self.scoring.get("metrics") or {}).get("test") or {}


def _lookup(record: dict[str, Any], key: str) -> Any:
    value: Any = record
    for part in key.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _short_class(value: Any) -> Any:
    """``nerf_lightning.samplers.OccupancyGrid`` -> ``OccupancyGrid``; a dict by its ``class_path``."""
    if isinstance(value, dict):
        value = value.get("class_path")
    return value.rsplit(".", 1)[-1] if isinstance(value, str) else value


def callback_argument(record: dict[str, Any], class_name: str, argument: str) -> Any:
    """``init_args.ARGUMENT`` of the callback of class ``class_name`` among the config's
    ``trainer.callbacks`` (a list, or one callback); ``None`` when it is not there."""
    callbacks = _lookup(record, "config.trainer.callbacks")
    for callback in callbacks if isinstance(callbacks, list) else [callbacks]:
        if isinstance(callback, dict) and _short_class(callback) == class_name:
            return (callback.get("init_args") or {}).get(argument)
    return None


def _effective_downscale(run: LedgerRun) -> Any:
    """The downscale the test's images had: the one ``data.target_pixels`` chose, else ``data.downscale``."""
    chosen = run.scored("data.frame.downscale")
    return chosen if chosen is not None else run.scored("config.data.downscale")


@dataclass(frozen=True)
class Criterion:
    """One thing runs must share for their test scores to be compared: ``value`` of a run."""

    label: str
    value: Callable[[LedgerRun], Any]
    fingerprint: bool = False  # shown abbreviated
    unset: str = MISSING  # shown for a value not recorded (``None``)

    def shown(self, run: LedgerRun) -> str:
        value = self.value(run)
        return self.unset if value is None else _shown(value, self.fingerprint)


COMPARABILITY: tuple[Criterion, ...] = (
    Criterion("data", lambda run: run.value("data.fingerprint"), fingerprint=True),
    Criterion("tested on", lambda run: run.scored("data.fingerprint"), fingerprint=True),
    Criterion("test split", lambda run: run.scored("config.data.test_split")),
    Criterion("downscale", _effective_downscale),
    Criterion("target pixels", lambda run: run.scored("config.data.target_pixels"), unset="none"),
    Criterion("background", lambda run: run.scored("config.data.background")),
    Criterion("test views", lambda run: run.scored("config.trainer.limit_test_batches"), unset="all"),
)
"""What decides a test score besides the model: runs differing in any of these are never ranked
together (see the module docstring)."""


def _shown(value: Any, fingerprint: bool = False) -> str:
    if value is None:
        return MISSING
    if fingerprint and isinstance(value, str):
        return value[:8]
    return show_value(value)


@dataclass(frozen=True)
class Column:
    """A column of the table and of the CSV file.

    Attributes:
        key: its CSV header.
        header: its table header.
        value: the run's value, whole (``None``: not recorded), as the CSV file holds it.
        shown: the value as the table shows it (a value that is not ``None``).
        optional: the table leaves it out when no listed run has a value (the CSV file always has it).
    """

    key: str
    header: str
    value: Callable[[LedgerRun], Any]
    shown: Callable[[Any], str] = show_value
    optional: bool = False


def _fixed(digits: int) -> Callable[[Any], str]:
    return lambda value: f"{value:.{digits}f}" if isinstance(value, int | float) else show_value(value)


def _general(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) else show_value(value)


def _date(value: Any) -> str:
    return str(value)[:16].replace("T", " ")


def _code(run: LedgerRun) -> str | None:
    commit = run.value("git.commit")
    if commit is None:
        return None
    return f"{commit}+dirty" if run.value("git.dirty") else str(commit)


def _environment(run: LedgerRun) -> str | None:
    torch_version = run.value("versions.torch")
    if torch_version is None:
        return None
    gpus = run.value("machine.gpus")
    return f"torch {torch_version}, {gpus[0] if gpus else 'cpu'}"


KEY_SETTINGS: tuple[Column, ...] = (
    Column("field", "field", lambda run: _short_class(run.value("config.model.field"))),
    Column("max_time", "max_time", lambda run: run.value("config.trainer.max_time")),
    Column("max_steps", "max_steps", lambda run: run.value("config.trainer.max_steps")),
    Column("target_samples", "target_samples",
           lambda run: callback_argument(run.record, "SampleBudget", "target_samples")),
    Column("learning_rate", "lr", lambda run: run.value("config.model.learning_rate"), _general),
)
"""The settings the table shows beside the sampler: few, so that the table stays readable;
``nerf-lightning compare A B`` lists every one that differs."""

def _trial_record(folder: Path, warnings: list[str]) -> dict[str, Any] | None:
    path = folder / TRIAL_RECORD
    if not path.is_file():
        return None
    try:
        return read_record(path)
    except ValueError as error:
        warnings.append(f"{error}; its sweep trial left out")
        return None


def _trial(run: LedgerRun) -> str | None:
    """``STUDY#N`` for a sweep's trial."""
    if run.trial is None:
        return None
    return f"{run.trial.get('study')}#{run.trial.get('trial')}"


COLUMNS: tuple[Column, ...] = (
    Column("run", "run", lambda run: run.name),
    Column("trial", "trial", _trial, optional=True),
    Column("date", "date", lambda run: run.value("start_time"), _date),
    Column("status", "status", lambda run: run.value("status")),
    Column("sampler", "sampler", lambda run: _short_class(run.value("config.model.sampler"))),
    *KEY_SETTINGS,
    Column("data_fingerprint", "data", lambda run: run.value("data.fingerprint"), lambda v: str(v)[:8]),
    Column("steps", "steps", lambda run: run.value("global_step")),
    Column("train_seconds", "train s", lambda run: run.curve and run.curve.train_seconds, _fixed(1)),
    Column("test_psnr", "test PSNR", lambda run: run.test_metrics.get("test/psnr"), _fixed(2)),
    Column("test_ssim", "test SSIM", lambda run: run.test_metrics.get("test/ssim"), _fixed(4)),
    Column("samples_per_ray", "samples/ray", lambda run: run.value("metrics.fit.train/samples_per_ray"),
           _fixed(1)),
    Column("code", "code", _code, lambda v: v[:8] + ("*" if v.endswith("+dirty") else "")),
    Column("environment", "environment", _environment),
)
"""The table's columns after the group and the rank, in order."""


@dataclass(frozen=True)
class Group:
    """Runs sharing every :data:`COMPARABILITY` value, ranked by test PSNR (untested runs last)."""

    number: int
    key: tuple[Any, ...]
    runs: tuple[LedgerRun, ...]

    def rank(self, run: LedgerRun) -> int | None:
        """``run``'s place by test PSNR (1: the highest), ``None`` for a run without one."""
        ranked = [each for each in self.runs if _psnr(each) is not None]
        return ranked.index(run) + 1 if run in ranked else None

    def describe(self) -> str:
        first = self.runs[0]  # all share these values
        settings = ", ".join(f"{criterion.label} {criterion.shown(first)}" for criterion in COMPARABILITY)
        count = len(self.runs)
        return f"group {self.number} ({count} run{'s' if count != 1 else ''}): {settings}"


def _psnr(run: LedgerRun) -> float | None:
    """The run's test PSNR; ``None`` without one, or for a value that is not a finite number (unranked)."""
    value = run.test_metrics.get("test/psnr")
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


@dataclass(frozen=True)
class Ledger:
    """The runs found and the files skipped (one warning line each)."""

    runs: tuple[LedgerRun, ...]
    warnings: tuple[str, ...]

    def groups(self) -> list[Group]:
        """The comparability groups, numbered in the order of their key; within each the runs by test PSNR,
        highest first, then the untested by date."""
        by_key: dict[str, list[LedgerRun]] = {}
        keys: dict[str, tuple[Any, ...]] = {}
        for run in self.runs:
            key = comparability_key(run)
            text = repr(key)
            by_key.setdefault(text, []).append(run)
            keys[text] = key
        groups = []
        for number, text in enumerate(sorted(by_key), start=1):
            members = sorted(by_key[text], key=lambda run: (_psnr(run) is None, -(_psnr(run) or 0.0),
                                                            str(run.value("start_time")), run.name))
            groups.append(Group(number, keys[text], tuple(members)))
        return groups

    def find(self, name: str) -> LedgerRun:
        """The run the table names ``name``, or whose folder is the path ``name``.

        Raises:
            ValueError: neither; the message lists where names come from.
        """
        for run in self.runs:
            if run.name == name:
                return run
        path = Path(name)
        for run in self.runs:
            if path.exists() and path.resolve() == run.folder.resolve():
                return run
        raise ValueError(f"--why {name}: no such run among those listed; expected a name of the table's "
                         f"run column or the path of a listed run folder")


def comparability_key(run: LedgerRun) -> tuple[Any, ...]:
    """``run``'s values of :data:`COMPARABILITY`, lists made tuples (hashable, comparable)."""
    return tuple(_frozen(criterion.value(run)) for criterion in COMPARABILITY)


def _frozen(value: Any) -> Any:
    return tuple(_frozen(each) for each in value) if isinstance(value, list) else value


def find_run_folders(roots: Iterable[str | Path]) -> list[Path]:
    """The run folders (holding ``run.json``) at or under each root, each once, without looking inside
    a run folder (its evaluations are the run's).

    Raises:
        FileNotFoundError: a root is not a folder.
    """
    found: dict[Path, Path] = {}
    for root in map(Path, roots):
        if not root.is_dir():
            raise FileNotFoundError(f"{root}: no such folder; expected a folder holding runs (folders "
                                    f"with {RUN_RECORD})")
        for current, folders, files in os.walk(root):
            folders.sort()
            if RUN_RECORD in files:
                found.setdefault(Path(current).resolve(), Path(current))
                folders.clear()
    return list(found.values())


def _names(folders: Sequence[Path]) -> list[str]:
    """Each folder relative to the deepest folder above them all: ``run`` for one run, ``out1/run`` and
    ``out2/run`` for runs of the same name in two roots."""
    if not folders:
        return []
    resolved = [folder.resolve() for folder in folders]
    base = Path(os.path.commonpath([folder.parent for folder in resolved]))
    return [str(folder.relative_to(base)) for folder in resolved]


def read_ledger(roots: Iterable[str | Path]) -> Ledger:
    """Every run under ``roots`` (:func:`find_run_folders`), by date; a run whose record (or newest test's
    record) cannot be read is left out with a warning line naming the file."""
    folders = find_run_folders(roots)
    runs, warnings = [], []
    for folder, name in zip(folders, _names(folders), strict=True):
        try:
            record = read_record(folder / RUN_RECORD)
            test = newest_evaluation(folder, "test")
        except (OSError, ValueError) as error:
            warnings.append(f"{error}; skipped")
            continue
        try:
            curve = read_curve(folder)
        except ValueError as error:
            warnings.append(f"{error}; training time and curve left out")
            curve = None
        trial = _trial_record(folder, warnings)
        runs.append(LedgerRun(name, folder, record, None if test is None else test[1], curve, trial))
    runs.sort(key=lambda run: (str(run.value("start_time")), run.name))
    return Ledger(tuple(runs), tuple(warnings))


def format_ledger(ledger: Ledger) -> str:
    """The table: per group its description line, then its runs with their rank, columns aligned across
    groups."""
    groups = ledger.groups()
    if not groups:
        return "no recorded runs"
    listed = [run for group in groups for run in group.runs]
    columns = [column for column in COLUMNS
               if not column.optional or any(column.value(run) is not None for run in listed)]
    header = ["rank", *(column.header for column in columns)]
    blocks: list[tuple[str, list[list[str]]]] = []
    for group in groups:
        rows = []
        for run in group.runs:
            rank = group.rank(run)
            cells = [MISSING if rank is None else str(rank)]
            for column in columns:
                value = column.value(run)
                cells.append(MISSING if value is None else column.shown(value))
            rows.append(cells)
        blocks.append((group.describe(), rows))
    widths = [max(len(row[index]) for row in [header, *(r for _, rows in blocks for r in rows)])
              for index in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  " + "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()

    lines: list[str] = []
    for title, rows in blocks:
        lines += ["" if lines else None, title, line(header), *(line(row) for row in rows)]
    return "\n".join(each for each in lines if each is not None)


def _cell(value: Any) -> Any:
    """A value as a CSV cell: empty when not recorded, lists as JSON, numbers and text as they are."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        value = list(value)
    return show_value(value) if isinstance(value, list | dict) else value


def write_csv(ledger: Ledger, path: str | Path) -> Path:
    """The table as CSV, written atomically: ``group``, ``rank``, the columns' whole values (the full
    fingerprint and commit; an empty cell for a value not recorded), the group's settings
    (:data:`COMPARABILITY`, as ``group_data``, ``group_test_split``...) and the run's folder (absolute)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    settings = ["group_" + re.sub(r"\W+", "_", criterion.label) for criterion in COMPARABILITY]
    writer.writerow(["group", "rank", *(column.key for column in COLUMNS), *settings, "folder"])
    for group in ledger.groups():
        for run in group.runs:
            values = [column.value(run) for column in COLUMNS]
            writer.writerow([_cell(value) for value in
                             (group.number, group.rank(run), *values, *group.key, str(run.folder.resolve()))])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(buffer.getvalue(), path)


def why(a: LedgerRun, b: LedgerRun) -> list[str]:
    """Why the test scores of ``a`` and ``b`` may or may not be compared, one line per reason: each
    :data:`COMPARABILITY` value that differs; when none does, what they share. Then, from ``compare``'s
    sections, which settings differ (what the two runs compare) and which code and environment values
    (shown, not grouped on), and a run without test scores."""
    lines = []
    for criterion in COMPARABILITY:
        left, right = criterion.value(a), criterion.value(b)
        if _frozen(left) != _frozen(right):
            lines.append(f"not comparable: {criterion.label} differs: {criterion.shown(a)} ({a.name}) vs "
                         f"{criterion.shown(b)} ({b.name})")
    if not lines:
        shared = ", ".join(f"{criterion.label} {criterion.shown(a)}" for criterion in COMPARABILITY)
        lines.append(f"comparable: same {shared}")
    differences = compare_runs(a.record, b.record)
    for section, meaning in (("config", "settings differ (what the runs compare)"),
                             ("environment", "code or environment differ (shown, not grouped on)")):
        keys = _collapsed([key for each, key, _, _ in differences
                           if each == section and key not in NOT_SETTINGS])
        if keys:
            listed = ", ".join(keys[:6]) + (f" and {len(keys) - 6} more" if len(keys) > 6 else "")
            lines.append(f"{meaning}: {listed} (nerf-lightning compare {a.folder} {b.folder})")
    for run in (a, b):
        if _psnr(run) is None:
            lines.append(f"no test scores for {run.name}: nerf-lightning test --ckpt_path {run.folder}")
    return lines


def _collapsed(keys: list[str]) -> list[str]:
    """``keys`` less the ``X.init_args.*`` of a component whose ``X.class_path`` is among them: another
    class is one difference, whatever its arguments."""
    replaced = {key[: -len("class_path")] for key in keys if key.endswith(".class_path")}
    return [key for key in keys if not any(key.startswith(f"{prefix}init_args.") for prefix in replaced)]


def plot_ledger(ledger: Ledger, path: str | Path) -> list[str]:
    """Each listed run's validation PSNR against training seconds in the PNG file ``path``, the line style
    its group's (:func:`~nerf_lightning.runs.curves.plot_curves`); the warning lines it returns."""
    return plot_curves([CurveLine(f"{run.name} (group {group.number})", group.number - 1, run.curve)
                        for group in ledger.groups() for run in group.runs], path)
