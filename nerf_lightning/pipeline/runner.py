"""The chain: each stage skipped when up to date, else run as a subprocess with retries; the end table.

Stages start through a :class:`~nerf_lightning.core.warm_start.WarmStarter` that the command layer
hands in (children forked from one process that imported the command's modules once), so a stage pays
for its own work, not for importing torch and Lightning again."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from subprocess import TimeoutExpired
from typing import Any

import yaml

from nerf_lightning.core.exit_codes import INTERRUPTED_EXIT_CODE
from nerf_lightning.core.warm_start import ChildProcess, WarmStarter
from nerf_lightning.pipeline.config import STAGES, PipelineConfig, PipelineConfigError, PipelineError
from nerf_lightning.pipeline.stages import Plan, Stages
from nerf_lightning.pipeline.state import (
    OutputError,
    StageError,
    State,
    exit_reason,
    failure_line,
    now,
    shown,
    value_key,
)

COMMAND_MODULE = "nerf_lightning"  # a stage is ``python -m nerf_lightning STAGE ...``


class _Interrupted(BaseException):
    """SIGTERM, raised in the main thread so the running stage is stopped and recorded."""


@dataclass
class Outcome:
    """What this invocation did with a stage, for the table."""

    status: str  # done, skipped, failed, not run
    duration: float | None = None
    note: str = ""


class Pipeline:
    """Runs the stages of a :class:`PipelineConfig` in its work dir (see :mod:`nerf_lightning.pipeline`)."""

    def __init__(self, config: PipelineConfig, lightning_cli: Callable[[list[str]], object], *,
                 out: Any = None, starter: WarmStarter | None = None) -> None:
        self.config = config
        self.lightning_cli = lightning_cli
        self.starter = starter if starter is not None else WarmStarter(COMMAND_MODULE)
        self.work = config.work_dir
        self.state = State(self.work, config.path)
        self.logs = self.work / "logs"
        self.out = out if out is not None else sys.stdout
        self.outcomes: dict[str, Outcome] = {}
        self.resolved: dict[str, Any] = {}

    @property
    def state_path(self) -> Path:
        return self.state.path

    def _stages(self) -> Stages:
        return Stages(self.config, self.state, self.resolved)

    def resolve(self) -> None:
        """The fit config as LightningCLI resolves it (``fit --print_config``), in this process."""
        printed, errors = io.StringIO(), io.StringIO()
        code: Any = 0
        argv = [*self._stages().fit_base(), "--trainer.default_root_dir", str(self.work / "fit"),
                "--print_config"]
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
            try:
                self.lightning_cli(argv)
            except SystemExit as exit_:
                code = exit_.code
            except Exception as error:  # a config that parses but cannot be dumped
                code, errors = 1, io.StringIO(f"{type(error).__name__}: {error}")
        resolved = None
        with contextlib.suppress(yaml.YAMLError):
            resolved = yaml.safe_load(printed.getvalue())
        if code not in (0, None) or not isinstance(resolved, dict) or "data" not in resolved:
            why = failure_line(errors.getvalue()) or f"exit code {code}"
            raise PipelineConfigError(
                f"{self.config.path}: fit: {self.config.fit_config} with fit.args does not resolve: {why}"
            )
        self.resolved = resolved

    # ------------------------------------------------------------------ the chain

    def _print(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def _outcome(self, stage: str, outcome: Outcome) -> None:
        self.outcomes[stage] = outcome
        self.state.data.setdefault("last_run", {}).setdefault("stages", {})[stage] = {
            "status": outcome.status, "duration_s": outcome.duration, "note": outcome.note}

    def run(self) -> int:
        """Run the chain; prints progress, the table and, on failure, one line on stderr. Returns the
        exit code: 0, 1 (a stage failed) or 130 (interrupted)."""
        self.work.mkdir(parents=True, exist_ok=True)
        with self.state.lock():
            for note in self.state.load():
                self._print(note)
            self.logs.mkdir(exist_ok=True)
            self.state.data["last_run"] = {"started": now(), "ended": None, "status": "running", "stages": {}}
            self.state.save()
            stages = self._stages()
            failure: str | None = None
            failed_stage = ""
            code = 0
            for stage in STAGES:
                if failure is not None:
                    self._outcome(stage, Outcome("not run", note=f"{failed_stage} failed"))
                elif stage not in self.config.stages:
                    self._outcome(stage, Outcome("not run", note=self.config.not_available.get(
                        stage, "not in stages")))
                else:
                    try:
                        self._stage(stages, stage)
                    except StageError as error:
                        failure, failed_stage, code = str(error), stage, 1
                    except OSError as error:  # the work dir or a recorded file cannot be read or written
                        failure, failed_stage, code = f"stage {stage}: {error}", stage, 1
                        self._outcome(stage, Outcome("failed", note=str(error)))
                    except (KeyboardInterrupt, _Interrupted):
                        failure, failed_stage = f"stage {stage} interrupted", stage
                        code = INTERRUPTED_EXIT_CODE
                        record = self.state.stages.get(stage)
                        if record is not None and record.get("status") == "running":
                            record.update(status="failed", error="interrupted", ended=now())
                        self._outcome(stage, Outcome("failed", note="interrupted"))
            self.state.data["last_run"].update(ended=now(), status="failed" if failure else "completed")
            self.state.save()
            self._print("")
            self._print(self.table())
            self._print(f"state: {shown(self.state_path)}")
            if failure is not None:
                print(f"nerf-lightning pipeline: {failure}", file=sys.stderr, flush=True)
            return code

    def _stage(self, stages: Stages, stage: str) -> None:
        started = time.monotonic()
        try:
            plan = stages.plan(stage)
        except StageError as error:
            self._outcome(stage, Outcome("failed", time.monotonic() - started, str(error)))
            raise
        if isinstance(plan, str):
            self._print(f"[{stage}] skipped: {plan}")
            self._outcome(stage, Outcome("skipped", note=plan))
            return
        key = value_key(plan.inputs)
        result = None if plan.always else self.state.up_to_date(stage, key)
        if result is not None:  # the table reads the stage's result file
            self._print(f"[{stage}] skipped: up to date ({result.get('summary', '')})")
            self._outcome(stage, Outcome("skipped", note=result.get("summary", "")))
            return
        self._execute(stage, plan, key, started)

    def _execute(self, stage: str, plan: Plan, key: str, started: float) -> None:
        log = self.logs / f"{stage}.log"
        attempts = self.config.retries + 1
        record: dict[str, Any] = {"status": "running", "inputs": plan.inputs, "inputs_key": key,
                                  "log": self.state.store(log), "attempts": 0, "started": now()}
        self.state.stages[stage] = record
        why = ""
        for attempt in range(1, attempts + 1):
            argv, extra = plan.command()
            command = shlex.join(["nerf-lightning", *argv])
            for name in ("error", "outputs", "numbers", "summary", "ended", "duration_s", "result"):
                record.pop(name, None)
            record.update(status="running", attempts=attempt, command=command, **extra)
            self.state.save()
            suffix = f" (attempt {attempt} of {attempts})" if attempt > 1 else ""
            self._print(f"[{stage}] {command}{suffix}  log: {shown(log)}")
            code, output = self._call(argv, log, f"{stage} attempt {attempt} of {attempts}: {command}")
            if code == 0:
                try:
                    outputs, numbers, summary = plan.collect()
                except OutputError as error:
                    why = str(error)
                else:
                    duration = time.monotonic() - started
                    result = self.state.write_result(stage, {"inputs_key": key, "outputs": outputs,
                                                             "numbers": numbers, "summary": summary})
                    record.update(status="done", outputs=outputs, numbers=numbers, summary=summary,
                                  result=self.state.store(result), ended=now(), duration_s=round(duration, 3))
                    self.state.save()
                    self._print(f"[{stage}] done in {duration:.1f} s: {summary}")
                    self._outcome(stage, Outcome("done", duration, summary))
                    return
            else:
                last = failure_line(output)
                why = exit_reason(code) + (f": {last}" if last else "")
            record.update(status="failed", error=why, ended=now(),
                          duration_s=round(time.monotonic() - started, 3))
            self.state.save()
            if attempt < attempts:
                self._print(f"[{stage}] attempt {attempt} failed ({why}); retrying")
        self._outcome(stage, Outcome("failed", time.monotonic() - started, why))
        tries = f"{attempts} attempts" if attempts > 1 else "1 attempt"
        raise StageError(f"stage {stage} failed after {tries} ({why}); log: {shown(log)}")

    def _call(self, argv: list[str], log: Path, title: str) -> tuple[int, str]:
        """Run ``nerf-lightning ARGV`` with its output appended to ``log``; (exit code, the output's
        tail, for the failure line only)."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with open(log, "ab") as handle:
            handle.write(f"\n===== {now()} {title}\n".encode())
            handle.flush()
            start = handle.tell()
            process = self.starter.start(argv, handle, env)
            try:
                code = process.wait()
            except BaseException:
                _stop(process)
                raise
            end = handle.tell()
            handle.write(f"===== {exit_reason(code)}\n".encode())
        with open(log, "rb") as handle:
            handle.seek(max(start, end - (1 << 16)))
            output = handle.read(end - max(start, end - (1 << 16))).decode("utf-8", errors="replace")
        return code, output

    # ------------------------------------------------------------------ the table

    def table(self) -> str:
        """One row per stage: status (done, skipped, failed, not run), duration and key numbers."""
        rows = [("stage", "status", "time", "details")]
        for stage in STAGES:
            outcome = self.outcomes.get(stage, Outcome("not run"))
            duration = "-" if outcome.duration is None else f"{outcome.duration:.1f}s"
            rows.append((stage, outcome.status, duration, outcome.note))
        widths = [max(len(row[i]) for row in rows) for i in range(3)]
        return "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)) + "  " + row[3]
            for row in rows
        ).rstrip()


def _stop(process: ChildProcess) -> None:
    """Stop a stage's process: SIGTERM, then SIGKILL after 10 seconds."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except TimeoutExpired:
        process.kill()
        process.wait()


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise _Interrupted()


def run_pipeline(config: PipelineConfig, lightning_cli: Callable[[list[str]], object],
                 starter: WarmStarter | None = None) -> int:
    """Resolve the fit config and run the chain: 0 when every stage is done or skipped, 1 when a stage
    failed, 2 when the configuration cannot be used or the work dir is busy, 130 when interrupted.

    ``lightning_cli`` runs LightningCLI in this process with the given arguments (the command layer
    passes its own): the pipeline resolves the fit config with ``fit --print_config`` through it, and
    never imports the command layer itself; ``starter`` starts the stages (default: a warm starter
    without preloaded modules)."""
    pipeline = Pipeline(config, lightning_cli, starter=starter)
    try:
        pipeline.resolve()
    except PipelineError as error:
        print(f"nerf-lightning pipeline: {error}", file=sys.stderr)
        return 2
    previous = None
    with contextlib.suppress(ValueError):  # not the main thread
        previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        return pipeline.run()
    except PipelineError as error:
        print(f"nerf-lightning pipeline: {error}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        pipeline.starter.close()
