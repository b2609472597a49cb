"""``nerf-lightning sweep --config SWEEP.yaml``: the command of :mod:`nerf_lightning.sweeps`.

The sweep file is this command's ``--config``: its fields are the options, so any of them can be
overridden on the command line (``--trials 20``, ``--storage postgresql://...``) and ``--print_config``
prints them all.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from pathlib import Path
from typing import Any, Literal

import yaml
from jsonargparse import ArgumentParser

from nerf_lightning.commands.base import WARM_PRELOAD, Command
from nerf_lightning.core.warm_start import WarmStarter


def _options(base: str | None = None, space: dict[str, Any] | None = None, data_root: str | None = None,
             search: Literal["grid", "random", "tpe"] = "tpe", trials: int = 10,
             max_time: str = "00:00:01:00", objective: Literal["test_psnr", "val_psnr"] = "test_psnr",
             seed: int = 0, study: str | None = None, out: str | None = None, storage: str | None = None,
             heartbeat_s: int = 30, pruner: Literal["none", "median", "hyperband"] = "none",
             prune_every_s: float = 10.0, prune_startup_trials: int = 2, fit_args: list[str] | None = None,
             test_args: list[str] | None = None) -> None:
    """The sweep file's fields.

    Args:
        base: the config every trial starts from: a shipped name (demo, blender, real, ...) or a file.
        space: config key -> parameter: {type: categorical, choices: [...]}, {type: int|float, low: L,
            high: H, step: S (optional for float)} or {type: log-float, low: L, high: H}. Keys are
            dotted (model.learning_rate); below a component they go into its init_args
            (model.field.max_resolution), and in a list of components the next part names one by its
            class (trainer.callbacks.SampleBudget.target_samples). A class name as a component's value
            replaces it (model.sampler: Proposal).
        data_root: --data.root of every trial (default: the base config's).
        search: how trials are chosen: every combination (grid), at random, or by Optuna's TPE.
        trials: how many trials should finish; a grid stops at its size. A sweep started again counts
            the ones already finished in its study.
        max_time: each trial's training-time budget, DD:HH:MM:SS.
        objective: what is maximised: test_psnr (the final weights on the test split) or val_psnr (the
            fit's last validation).
        seed: seeds the search and, with each trial's number, the trial itself.
        study: the study's name (default: the sweep file's name without .yaml).
        out: the sweep folder: trials/, configs/, logs/, results.json and the default database (default:
            sweeps/STUDY).
        storage: the study's database as an SQLAlchemy URL (default: sqlite:///OUT/study.db). Several
            workers started with one PostgreSQL URL (postgresql://USER@HOST/DB) share the study.
        heartbeat_s: seconds between a worker's heartbeats to the database while its trial runs; a
            trial whose worker missed 4 in a row (it was killed) is failed and tried again, up to twice,
            going on from its last checkpoint.
        pruner: none, or Optuna's median or hyperband pruner: it judges each trial's validation PSNR at
            every prune_every_s seconds of training time while the trial trains, and a trial it prunes is
            stopped (its last step kept) and recorded as pruned. The base config's TimedValidation then
            validates once per slot.
        prune_every_s: seconds of training time between the pruner's judgements.
        prune_startup_trials: how many trials finish before the median pruner judges any.
        fit_args: further arguments of every trial's fit (e.g. [--trainer.max_steps, '500']).
        test_args: further arguments of every trial's test.
    """


def _declare(parser: ArgumentParser) -> None:
    parser.add_function_arguments(_options, as_group=False)


def sweep(config_files: list[Path], **options: Any) -> int:
    """Train and test many runs of one recipe over a search space, chosen by Optuna, in one study.

    Every trial is an ordinary recorded run in OUT/trials/trial-NNNN (run.json, events, checkpoints, a
    test folder, and trial.json with its parameters); OUT/results.json lists the study's trials, best
    first, and the end of the command prints them as a table. Exit code 0 when a trial completed, 1 when
    none did, 2 when the sweep file cannot be used, 130 after Ctrl-C, which queues the running trial to
    resume from its last step when the sweep is started again. See configs/sweeps/ and docs/sweeps.md.
    """
    from nerf_lightning.sweeps.runner import COMMAND_MODULE, run_sweep
    from nerf_lightning.sweeps.spec import check

    path = config_files[-1] if config_files else Path("sweep.yaml")  # names messages and the study
    with WarmStarter(COMMAND_MODULE, preload=WARM_PRELOAD) as starter:
        return run_sweep(check(options, path), check_config=fit_refusal, starter=starter)


def fit_refusal(config: dict[str, Any], args: list[str]) -> str | None:
    """``None`` when ``fit --config CONFIG ARGS`` parses (LightningCLI's parser, in this process: nothing
    is built or trained), else the one line it refuses it with."""
    from nerf_lightning.commands.lightning import run_lightning_cli  # LightningCLI: a heavy import

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trial.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        said = io.StringIO()
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
                run_lightning_cli(["fit", "--config", str(path), *args, "--print_config"])
        except SystemExit as stop:
            if not stop.code:
                return None
            lines = [line for line in said.getvalue().splitlines() if line.strip()]
            return lines[-1].removeprefix("nerf-lightning fit: ") if lines else f"fit exited with {stop.code}"
    return None


COMMAND = Command("sweep", sweep, declare=_declare, takes_config_files=True)
