"""The sweep file's fields (the ``sweep`` command's options), checked into a :class:`SweepSpec`."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from nerf_lightning.config.lookup import ConfigNotFoundError, resolve_config
from nerf_lightning.sweeps.space import Param, SpaceError, parse_space

Search = Literal["grid", "random", "tpe"]
Objective = Literal["test_psnr", "val_psnr"]
Pruner = Literal["none", "median", "hyperband"]
OBJECTIVES: dict[str, str] = {
    "test_psnr": "test PSNR of the trial's final weights on the test split (``test``, eval.json)",
    "val_psnr": "the last validation PSNR of the fit (``run.json``)",
}
_MAX_TIME = re.compile(r"^\d+:\d{2}:\d{2}:\d{2}$")
_STUDY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class SweepSpecError(ValueError):
    """The sweep file cannot be used; the message is one line naming the file and the field."""


@dataclass(frozen=True)
class SweepSpec:
    """A checked sweep (see :func:`check`).

    Attributes:
        path: the sweep file (names messages; its stem names the study by default).
        base_config: the base config file, resolved (a shipped name becomes its file).
        base: the base config's contents.
        params: the search space.
        study: the Optuna study's name.
        out: the sweep folder (trials, logs, the default SQLite file).
        storage: the SQLAlchemy URL of the study's database.
        search: ``grid``, ``random`` or ``tpe``.
        trials: how many trials should finish (complete or pruned); a grid stops at its size.
        max_time: each trial's training-time budget (``trainer.max_time``, ``DD:HH:MM:SS``).
        objective: what the study maximises (:data:`OBJECTIVES`).
        seed: seeds the search and, with each trial's number, the trial (``space.trial_seed``).
        data_root: ``--data.root`` of every trial, or ``None`` (the base config's).
        heartbeat_s: seconds between a worker's heartbeats to the storage while its trial runs.
        pruner: ``none``, or Optuna's ``median`` or ``hyperband`` pruner judging each trial's validation
            PSNR at slots of training time while it trains (:mod:`nerf_lightning.sweeps.pruning`).
        prune_every_s: the slot: seconds of training time between the pruner's judgements.
        prune_startup_trials: trials that finish before the median pruner judges any.
        fit_args, test_args: further arguments of every trial's ``fit`` and ``test``.
    """

    path: Path
    base_config: Path
    base: dict[str, Any]
    params: list[Param]
    study: str
    out: Path
    storage: str
    search: Search
    trials: int
    max_time: str
    objective: Objective
    seed: int
    data_root: str | None = None
    heartbeat_s: int = 30
    pruner: Pruner = "none"
    prune_every_s: float = 10.0
    prune_startup_trials: int = 2
    fit_args: list[str] = field(default_factory=list)
    test_args: list[str] = field(default_factory=list)


def check(options: dict[str, Any], path: Path) -> SweepSpec:
    """The :class:`SweepSpec` of the ``sweep`` command's parsed ``options`` (the file at ``path`` and
    the command line), or :class:`SweepSpecError` naming ``path`` and the field."""

    def fail(name: str, message: str) -> SweepSpecError:
        return SweepSpecError(f"{path}: {name}: {message}")

    base = options.get("base")
    if not base:
        raise fail("base", "expected a config name (demo, blender, ...) or a config file")
    try:
        base_config = resolve_config(base)
    except ConfigNotFoundError as error:
        raise fail("base", str(error)) from None
    if not base_config.is_file():
        raise fail("base", f"no config file {base_config}")
    try:
        base_values = yaml.safe_load(base_config.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise fail("base", f"cannot read {base_config}: {' '.join(str(error).split())}") from None
    if not isinstance(base_values, dict):
        raise fail("base", f"{base_config} is not a mapping of config keys")
    try:
        params = parse_space(options.get("space"))
    except SpaceError as error:
        raise SweepSpecError(f"{path}: {error}") from None
    study = options.get("study") or path.stem
    if not _STUDY.fullmatch(study):
        raise fail("study", f"expected letters, digits, '.', '_' or '-', got {study!r}")
    trials = options.get("trials")
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise fail("trials", f"expected a positive whole number, got {trials!r}")
    max_time = options.get("max_time")
    if not isinstance(max_time, str) or not _MAX_TIME.fullmatch(max_time):
        raise fail("max_time", f"expected DD:HH:MM:SS (00:00:00:30 for 30 s), got {max_time!r}")
    search = options.get("search")
    if search == "grid":
        for param in params:
            try:
                param.grid_values()
            except SpaceError as error:
                raise SweepSpecError(f"{path}: {error}") from None
    heartbeat_s = options.get("heartbeat_s", 30)
    if not isinstance(heartbeat_s, int) or isinstance(heartbeat_s, bool) or heartbeat_s < 1:
        raise fail("heartbeat_s", f"expected a positive whole number of seconds, got {heartbeat_s!r}")
    pruner = options.get("pruner", "none")
    if pruner not in ("none", "median", "hyperband"):
        raise fail("pruner", f"expected none, median or hyperband, got {pruner!r}")
    prune_every_s = options.get("prune_every_s", 10.0)
    if isinstance(prune_every_s, bool) or not isinstance(prune_every_s, int | float) or not prune_every_s > 0:
        raise fail("prune_every_s", f"expected a positive number of seconds, got {prune_every_s!r}")
    startup = options.get("prune_startup_trials", 2)
    if not isinstance(startup, int) or isinstance(startup, bool) or startup < 0:
        raise fail("prune_startup_trials", f"expected a whole number >= 0, got {startup!r}")
    out = Path(options.get("out") or Path("sweeps") / study)
    storage = options.get("storage") or f"sqlite:///{(out / 'study.db').resolve()}"
    return SweepSpec(path=path, base_config=base_config, base=base_values, params=params, study=study,
                     out=out, storage=storage, search=search, trials=trials, max_time=max_time,
                     objective=options.get("objective", "test_psnr"), seed=int(options.get("seed", 0)),
                     data_root=options.get("data_root"), heartbeat_s=heartbeat_s, pruner=pruner,
                     prune_every_s=float(prune_every_s), prune_startup_trials=startup,
                     fit_args=list(options.get("fit_args") or []),
                     test_args=list(options.get("test_args") or []))
