"""The study: trials as ``fit`` and ``test`` subprocesses, Optuna choosing their values, the table.

Optuna is imported here only (the ``sweep`` extra). The study is created or loaded by name in the
storage, with the sweep's settings kept as a study attribute: a storage that holds a study of that
name made from another space, objective or search is refused rather than mixed. Workers send Optuna's
heartbeat while a trial runs: a worker killed mid-trial leaves its trial RUNNING only until its
heartbeat is missed, then the next worker to start a trial fails it and tries its values again.
A trial's ``fit`` and ``test`` start through the :class:`~nerf_lightning.core.warm_start.WarmStarter`
the command layer hands in, so they do not import torch and Lightning again.
"""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from nerf_lightning.core.exit_codes import INTERRUPTED_EXIT_CODE
from nerf_lightning.core.warm_start import WarmStarter
from nerf_lightning.files import atomic_write_json, atomic_write_text
from nerf_lightning.runs.folders import TRIAL_RECORD
from nerf_lightning.runs.record import RUN_RECORD, newest_evaluation, read_record
from nerf_lightning.sweeps import pruning
from nerf_lightning.sweeps.space import trial_seed, with_values
from nerf_lightning.sweeps.spec import SweepSpec, SweepSpecError

COMMAND_MODULE = "nerf_lightning"  # a trial's fit and test are ``python -m nerf_lightning ...``
TRIALS_DIR = "trials"
SCHEMA_RACE_RETRIES = 5  # a worker that lost the race to create the study's tables tries again
HPARAMS_DIR = "hparams"
"""In the sweep folder: one TensorBoard run per finished trial, its parameters and objective, for the
HParams tab (``tensorboard --logdir SWEEP/hparams``)."""
RESULTS_FILE = "results.json"
"""In the sweep folder: every trial of the study, best first, rewritten after each trial."""
STALE_HEARTBEATS = 4
"""A trial whose worker missed this many heartbeats in a row is failed (and tried again)."""
MAX_RETRIES = 2
"""How many times a trial failed by a missed heartbeat (a killed worker) is tried again."""
WATCH_S = 1.0
"""With a pruner, how often a worker reads its running fit's new validations."""


class SweepError(ValueError):
    """The sweep cannot go on; the message is one line."""


class TrialFailedError(RuntimeError):
    """A trial's ``fit`` or ``test`` failed; the message names its log."""


class DuplicatePointError(TrialFailedError):
    """Another worker's earlier trial holds this grid point: this trial is withdrawn before it trains."""


def trial_name(number: int) -> str:
    return f"trial-{number:04d}"


def _settings(spec: SweepSpec) -> dict[str, Any]:
    """What makes two invocations one sweep: the base config, the space, objective, search and budget."""
    space = [vars(param) | {"choices": list(param.choices)} for param in spec.params]
    return {"base": str(spec.base_config), "space": space, "objective": spec.objective, "search": spec.search,
            "max_time": spec.max_time, "seed": spec.seed, "data_root": spec.data_root,
            "heartbeat_s": spec.heartbeat_s, "pruner": spec.pruner, "prune_every_s": spec.prune_every_s,
            "prune_startup_trials": spec.prune_startup_trials,
            "fit_args": spec.fit_args, "test_args": spec.test_args}


class _NoInterruptTraceback(logging.Filter):
    """Optuna logs a trial that Ctrl-C stopped with the interrupt's traceback; the worker says it in one
    line instead (:meth:`Sweep._interrupted`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and record.exc_info[0] is KeyboardInterrupt)


def _import_optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise SweepError("sweep needs Optuna: pip install 'nerf-lightning[sweep]' (make install does)") \
            from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for handler in logging.getLogger("optuna").handlers:  # Optuna's own handler, on its library logger
        if not any(isinstance(each, _NoInterruptTraceback) for each in handler.filters):
            handler.addFilter(_NoInterruptTraceback())
    # The heartbeat and its retry are marked experimental in Optuna 4 and 5; they are what a killed worker
    # needs, and the pinned version is tested.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    return optuna


def _sampler(optuna: Any, spec: SweepSpec) -> Any:
    if spec.search == "grid":
        return optuna.samplers.GridSampler({p.key: p.grid_values() for p in spec.params}, seed=spec.seed)
    if spec.search == "random":
        return optuna.samplers.RandomSampler(seed=spec.seed)
    return optuna.samplers.TPESampler(seed=spec.seed)


def _storage(optuna: Any, spec: SweepSpec) -> Any:
    retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRIES)
    return optuna.storages.RDBStorage(spec.storage, heartbeat_interval=spec.heartbeat_s,
                                      grace_period=STALE_HEARTBEATS * spec.heartbeat_s,
                                      heartbeat_stale_trial_callback=retry)


class Sweep:
    """One worker of the study of ``spec``: runs trials until ``spec.trials`` have finished."""

    def __init__(self, spec: SweepSpec, say: Callable[[str], None] = print,
                 starter: WarmStarter | None = None) -> None:
        self.spec = spec
        self.say = say
        self.starter = starter if starter is not None else WarmStarter(COMMAND_MODULE)
        self._trial_number: int | None = None
        self._stopped_trial: int | None = None  # the trial Ctrl-C stopped
        self.optuna = _import_optuna()
        spec.out.mkdir(parents=True, exist_ok=True)
        (spec.out / "logs").mkdir(exist_ok=True)
        (spec.out / "configs").mkdir(exist_ok=True)
        try:
            self.study = self._open_study()
        except Exception as error:  # SQLAlchemy's errors for a bad URL, a missing driver, no server
            reason = " ".join(str(error).split()).replace(spec.storage, _shown_url(spec.storage))[:300]
            raise SweepError(f"--storage {_shown_url(spec.storage)}: {reason}") from None
        settings = _settings(spec)
        saved = self.study.user_attrs.get("sweep")
        if saved is None:
            self.study.set_user_attr("sweep", settings)
        elif saved != settings:
            changed = sorted(key for key in settings if settings[key] != saved.get(key))
            raise SweepError(f"study {spec.study!r} in {_shown_url(spec.storage)} was made by another sweep "
                             f"(it differs in {', '.join(changed)}); give this one another study name or "
                             "storage")

    def _open_study(self) -> Any:
        """Create or load the study. Workers started together on an empty database race to create
        Optuna's tables; the loser's ``CREATE`` fails on a unique key and it tries again, finding them."""
        for attempt in range(SCHEMA_RACE_RETRIES + 1):
            try:
                return self.optuna.create_study(
                    study_name=self.spec.study, storage=_storage(self.optuna, self.spec),
                    sampler=_sampler(self.optuna, self.spec), pruner=pruning.PRUNERS[self.spec.pruner](
                        self.optuna, self.spec), direction="maximize", load_if_exists=True)
            except Exception as error:
                racing = "already exists" in str(error) or "UniqueViolation" in str(error)
                if not racing or attempt == SCHEMA_RACE_RETRIES:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def finished(self) -> list[Any]:
        states = (self.optuna.trial.TrialState.COMPLETE, self.optuna.trial.TrialState.PRUNED)
        return self.study.get_trials(deepcopy=False, states=states)

    def target(self) -> int:
        if self.spec.search == "grid":
            return min(self.spec.trials, math.prod(len(p.grid_values()) for p in self.spec.params))
        return self.spec.trials

    def run(self) -> int:
        """Trials until the target has finished; 0 when at least one trial completed, else 1.

        A worker starts a trial only while the finished and running trials fall short of the target, or
        when a trial waits to be tried again; otherwise it waits for the other workers' trials to finish
        or to miss their heartbeats (then they are failed and wait to be tried again). So the target is
        not overshot. Two workers that start trials at the same moment may be given the same grid point;
        the later-numbered trial withdraws (:meth:`objective`), so no point is trained twice.

        Ctrl-C ends the worker with 130 after :meth:`_interrupted` has queued the running trial again.
        """
        try:
            return self._run()
        except KeyboardInterrupt:
            return self._interrupted()

    def _run(self) -> int:
        states = self.optuna.trial.TrialState
        failures = 0
        while True:
            self.optuna.storages.fail_stale_trials(self.study)
            trials = self.study.get_trials(deepcopy=False)
            finished = sum(t.state in (states.COMPLETE, states.PRUNED) for t in trials)
            running = sum(t.state == states.RUNNING for t in trials)
            waiting = sum(t.state == states.WAITING for t in trials)
            if finished >= self.target():
                break
            if not waiting and finished + running >= self.target():
                time.sleep(self.spec.heartbeat_s)
                continue
            self.study.optimize(self.objective, n_trials=1, catch=(TrialFailedError,))
            ours = self.study.trials[self._trial_number] if self._trial_number is not None else None
            failed = ours is not None and ours.state == states.FAIL and "duplicate_of" not in ours.user_attrs
            failures = failures + 1 if failed else 0
            if failures >= self.target():
                self.say(f"sweep: {failures} trials in a row failed in this worker; stopping")
                break
            self.write_results()
        self.write_results()
        self.say(self.table())
        complete = [t for t in self.study.get_trials(deepcopy=False)
                    if t.state == self.optuna.trial.TrialState.COMPLETE]
        return 0 if complete else 1

    # ------------------------------------------------------------------ one trial
    def objective(self, trial: Any) -> float:
        """Fit and test one trial; a retry of a trial whose worker died goes on in that trial's run folder,
        with its seed, from its ``last.ckpt`` (the run's own resume)."""
        self._trial_number = trial.number
        try:
            return self._objective(trial)
        except KeyboardInterrupt:
            self._stopped_trial = trial.number
            raise

    def _objective(self, trial: Any) -> float:
        spec = self.spec
        values = {param.key: param.suggest(trial) for param in spec.params}
        if spec.search == "grid" and "run" not in trial.user_attrs:
            self._withdraw_if_taken(trial, values)
        runs = spec.out / TRIALS_DIR
        retry_of = None
        if "run" in trial.user_attrs:  # a retry carries the failed trial's attributes
            run, seed = Path(trial.user_attrs["run"]), int(trial.user_attrs["seed"])
            retry_of = int(run.name.rsplit("-", 1)[1])
        else:
            run, seed = runs / trial_name(trial.number), trial_seed(spec.seed, spec.study, trial.number)
            trial.set_user_attr("run", str(run.resolve()))
            trial.set_user_attr("seed", seed)
        name = run.name
        last = run / "checkpoints" / "last.ckpt"
        config_file = spec.out / "configs" / f"{name}.yaml"
        config = with_values(spec.base, {**pruning.schedule_values(spec), **values})
        atomic_write_text(yaml.safe_dump(config, sort_keys=False), config_file)
        self.say(f"sweep: {name} {json.dumps(values)} (seed {seed})")
        fit = ["fit", "--config", str(config_file), "--trainer.default_root_dir", str(runs),
               "--run_name", name, "--seed_everything", str(seed), "--trainer.max_time", spec.max_time,
               *(["--data.root", spec.data_root] if spec.data_root else []), *spec.fit_args,
               *(["--ckpt_path", str(last)] if last.is_file() else []), *pruning.fit_args(spec, run)]
        reporter = None
        if spec.pruner != "none":
            reporter = pruning.TrialReporter(trial, pruning.CurveReader(run / pruning.CURVE_FILE),
                                             spec.prune_every_s)
        if not self._call(fit, name, "fit", stop_when=reporter.report_new if reporter else None):
            at = max(reporter.reported) * spec.prune_every_s if reporter and reporter.reported else 0.0
            self.say(f"sweep: {name} pruned after {at:g} s of training")
            raise self.optuna.TrialPruned(f"{name}: pruned after {at:g} s of training")
        if reporter is not None:
            reporter.report_new(judge=False)  # the slots after the last look: later trials compare with them
        record = read_record(run / RUN_RECORD)
        if record.get("status") != "completed":
            raise TrialFailedError(f"{name}: fit ended {record.get('status')!r} ({run / RUN_RECORD})")
        atomic_write_json({"study": spec.study, "storage": _shown_url(spec.storage), "trial": trial.number,
                           "params": values, "seed": seed, "sweep_file": str(spec.path),
                           "retry_of": retry_of}, run / TRIAL_RECORD)
        if spec.objective == "val_psnr":
            value = ((record.get("metrics") or {}).get("fit") or {}).get("val/psnr")
        else:
            self._call(["test", "--ckpt_path", str(run), *spec.test_args], name, "test")
            found = newest_evaluation(run, "test")
            value = None if found is None else found[1]["metrics"]["test"].get("test/psnr")
        if value is None or not math.isfinite(value):
            raise TrialFailedError(f"{name}: no {spec.objective} recorded in {run}")
        self.say(f"sweep: {name} {spec.objective} {value:.3f}")
        log_hparams(spec.out / HPARAMS_DIR, trial_name(trial.number), values, {spec.objective: float(value)})
        return float(value)

    def _interrupted(self) -> int:
        """After Ctrl-C: 130. The running trial's fit has stopped at its step and kept it in its run folder
        (the fit's own Ctrl-C, which a terminal sends to the trial's process as well, or the SIGTERM of
        :meth:`_call`), and Optuna has failed the trial; it is queued again with its values, run folder and
        seed, so the sweep started again resumes it from its ``last.ckpt``, as after a killed worker but
        with no retry limit (the user stopped it; nothing went wrong)."""
        queued = None
        if self._stopped_trial is not None:
            trial = self.study.trials[self._stopped_trial]
            if trial.state == self.optuna.trial.TrialState.FAIL and "duplicate_of" not in trial.user_attrs:
                self.optuna.storages.RetryHeartbeatStaleTrialCallback()(self.study, trial)
                queued = trial_name(trial.number)
        self.write_results()
        self.say(self.table())
        what = (f"{queued} stopped at its last step and queued to resume when the sweep is started again"
                if queued else "no trial was running")
        print(f"nerf-lightning sweep: interrupted; {what} ({self.spec.out / RESULTS_FILE})", file=sys.stderr,
              flush=True)
        return INTERRUPTED_EXIT_CODE

    def _withdraw_if_taken(self, trial: Any, values: dict[str, Any]) -> None:
        """Raise :class:`DuplicatePointError` when an earlier trial that has not failed holds ``values``.
        Trial numbers are handed out by the database one at a time, so of two trials given one point the
        earlier keeps it whichever worker looks first."""
        failed = self.optuna.trial.TrialState.FAIL
        for other in self.study.get_trials(deepcopy=False):
            if other.number < trial.number and other.state != failed and other.params == values:
                trial.set_user_attr("duplicate_of", other.number)
                raise DuplicatePointError(f"{trial_name(trial.number)}: trial-{other.number:04d} holds "
                                          f"{json.dumps(values)}; withdrawn before training")

    def _call(self, argv: list[str], name: str, what: str,
              stop_when: Callable[[], bool] | None = None) -> bool:
        """Run a trial's command to its end: ``True``; or, when ``stop_when`` (asked every
        :data:`WATCH_S` seconds while it runs) says so, stop it with SIGTERM (a fit keeps its last step,
        as when preempted): ``False``. :class:`TrialFailedError` when it failed."""
        log = self.spec.out / "logs" / f"{name}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        stopped = False
        with open(log, "ab") as handle:
            process = self.starter.start(argv, handle, env)
            try:
                while True:
                    try:
                        code = process.wait(timeout=None if stop_when is None else WATCH_S)
                        break
                    except subprocess.TimeoutExpired:
                        if not stopped and stop_when is not None and stop_when():
                            stopped = True
                            process.terminate()
            except BaseException:
                process.terminate()
                process.wait()
                raise
        if stopped:
            return False
        if code != 0:
            raise TrialFailedError(f"{name}: {what} exited with {code}; log: {log}")
        return True

    # ------------------------------------------------------------------ results
    def rows(self) -> list[dict[str, Any]]:
        rows = [{"trial": t.number, "value": t.value, "params": t.params,
                 "state": "withdrawn" if "duplicate_of" in t.user_attrs else t.state.name.lower(),
                 "run": t.user_attrs.get("run"), "seed": t.user_attrs.get("seed")}
                for t in self.study.get_trials(deepcopy=False)]
        return sorted(rows, key=lambda r: (r["value"] is None, -(r["value"] or 0.0), r["trial"]))

    def write_results(self) -> None:
        atomic_write_json({"study": self.spec.study, "objective": self.spec.objective, "trials": self.rows()},
                          self.spec.out / RESULTS_FILE)

    def table(self) -> str:
        keys = [p.key for p in self.spec.params]
        header = ["trial", "state", self.spec.objective, *keys]
        lines = [" | ".join(header)]
        for row in self.rows():
            value = "-" if row["value"] is None else f"{row['value']:.3f}"
            lines.append(" | ".join([trial_name(row["trial"]), row["state"], value,
                                     *(str(row["params"].get(k, "-")) for k in keys)]))
        return "\n".join(lines)


def log_hparams(folder: Path, name: str, values: dict[str, Any], metrics: dict[str, float]) -> None:
    """Write a trial's parameters and metrics as TensorBoard's HParams data, as the run ``folder/name``.
    Values that are not numbers, strings or booleans (``null``) are written as their text."""
    from torch.utils.tensorboard import SummaryWriter  # torch: the trial processes need it anyway
    from torch.utils.tensorboard.summary import hparams

    shown = {key: value if isinstance(value, (bool, int, float, str)) else str(value)
             for key, value in values.items()}
    with SummaryWriter(log_dir=str(folder / name)) as writer:
        for summary in hparams(shown, metrics):  # the experiment, the session's start and its end
            writer.file_writer.add_summary(summary)
        for key, value in metrics.items():
            writer.add_scalar(key, value)


def _shown_url(url: str) -> str:
    """``url`` without a password (``postgresql://user:***@host/db``)."""
    scheme, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{host}"


ConfigCheck = Callable[[dict[str, Any], list[str]], str | None]
"""Whether ``fit`` would take a config (as a mapping) with further arguments: ``None``, or its one-line
refusal. The command layer gives it (LightningCLI's parser); trials only run subprocesses."""


def check_space(spec: SweepSpec, check_config: ConfigCheck) -> None:
    """Refuse, before any trial, a value of the space that ``fit`` would refuse (an unknown sampler, a
    key no class takes): every value of each parameter once, the others at their first value, so a
    refusal names the key and the value. :class:`~nerf_lightning.sweeps.spec.SweepSpecError`, one line."""
    first = {param.key: param.probe_values()[0] for param in spec.params}
    for param in spec.params:
        for value in param.probe_values():
            refusal = check_config(with_values(spec.base, {**first, param.key: value}), spec.fit_args)
            if refusal is not None:
                raise SweepSpecError(f"{spec.path}: space.{param.key}: {value!r}: {refusal}")


def run_sweep(spec: SweepSpec, say: Callable[[str], None] = print,
              check_config: ConfigCheck | None = None, starter: WarmStarter | None = None) -> int:
    """Run one worker of the sweep ``spec`` (:class:`Sweep`): 0 when a trial completed, 1 otherwise, 130
    after Ctrl-C (the running trial queued again). With ``check_config``, the space is checked first
    (:func:`check_space`), before the study is opened; ``starter`` starts the trials' processes
    (default: a warm starter without preloaded modules)."""
    if check_config is not None:
        check_space(spec, check_config)
    sweep = Sweep(spec, say, starter)
    try:
        return sweep.run()
    finally:
        sweep.starter.close()


def results_path(out: Path) -> Path:
    return out / RESULTS_FILE
