"""The stages: for each, its inputs, its command line and how its result is read back.

Every stage's command writes files and the stage reads them: ``data ...``, ``render`` and ``export``
get ``--result_file WORK/<stage>/command.json``; ``fit`` and ``test`` are read from the run directory
they make (``run.json``, ``eval.json``, ``checkpoints/last.ckpt``). The stage's own result (outputs
with sha256, numbers, a summary) goes to ``WORK/<stage>/result.json``
(:meth:`~nerf_lightning.pipeline.state.State.write_result`), which the stages after it read through
:meth:`~nerf_lightning.pipeline.state.State.result`. Nothing is read from a command's printed output.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nerf_lightning.datasets.convert import TRANSFORMS_FILE
from nerf_lightning.datasets.demo_scene import is_demo_scene_complete
from nerf_lightning.pipeline.config import PipelineConfig
from nerf_lightning.pipeline.plan import Collected, Plan
from nerf_lightning.pipeline.process_stage import data_root, plan_process
from nerf_lightning.pipeline.state import (
    COMMAND_RESULT,
    OutputError,
    StageError,
    State,
    read_json,
    size_text,
    source_fingerprint,
    value_key,
)
from nerf_lightning.runs.record import RUN_RECORD, evaluations
from nerf_lightning.scenes.cache import default_cache_dir
from nerf_lightning.scenes.cache_entry import MANIFEST_FILE, PIXELS_FILE
from nerf_lightning.scenes.errors import DatasetError
from nerf_lightning.scenes.fingerprint import dataset_fingerprint

FIT_RUN = "run"
"""The fit stage's run folder, ``WORK/fit/KEY/run`` (``--run_name``): a fit of the same inputs that was
killed goes on in it."""


class Stages:
    """The plans of one pipeline run: ``plan(stage)`` is a :class:`Plan`, or why the stage is skipped."""

    def __init__(self, config: PipelineConfig, state: State, resolved: dict[str, Any]) -> None:
        self.config = config
        self.state = state
        self.work = config.work_dir
        self.resolved = resolved
        self._dataset_fp: str | None = None

    # ------------------------------------------------------------------ shared

    def data_root(self, needed_by: str | None = None) -> Path:
        """The dataset the stages read (:func:`~nerf_lightning.pipeline.process_stage.data_root`)."""
        return data_root(self.config, self.state, needed_by)

    def plan(self, stage: str) -> Plan | str:
        if stage == "process":
            return plan_process(self.config, self.state, self.result_file)
        return getattr(self, f"_plan_{stage}")()

    def fit_base(self, needed_by: str | None = None) -> list[str]:
        """``fit`` with the file's config and arguments and the dataset: what is resolved and run."""
        data = self.config.data
        args = ["fit", "--config", str(self.config.fit_config), *self.config.fit_args,
                "--data.root", str(self.data_root(needed_by))]
        if data.format is not None:
            args += ["--data.dataset_format", data.format]
        return args

    def _dataset(self, needed_by: str) -> str:
        """The dataset fingerprint (after ``process`` and ``convert``), or ``unreadable: ...``."""
        if self._dataset_fp is None:
            root = self.data_root(needed_by)
            try:  # file digests remembered in the cache folder, as fit does: an unchanged rerun reads nothing
                self._dataset_fp = dataset_fingerprint(root,
                                                       dataset_format=self.resolved["data"]["dataset_format"],
                                                       memo_dir=self._cache_dir())
            except (DatasetError, OSError, ValueError) as error:
                self._dataset_fp = f"unreadable: {error}"
        return self._dataset_fp

    def result_file(self, stage: str) -> Path:
        """The ``--result_file`` of ``stage``'s command, removed so that only this attempt's counts."""
        path = self.state.stage_dir(stage) / COMMAND_RESULT
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        return path

    def _cache_dir(self) -> Path:
        data = self.resolved["data"]
        return Path(os.path.abspath(data["cache_dir"])) if data.get("cache_dir") else default_cache_dir()

    def _data_options(self) -> tuple[str, int, list[float]]:
        data = self.resolved["data"]
        return str(data.get("dataset_format") or "auto"), int(data.get("downscale") or 1), [
            float(c) for c in data.get("background") or (1.0, 1.0, 1.0)]

    def _checkpoint(self, needed_by: str) -> tuple[Path, Path, dict[str, str]]:
        files = self.state.result("fit", needed_by)["outputs"]["files"]
        digests = {"ckpt": files["ckpt"]["sha256"], "run_config": files["run_config"]["sha256"]}
        resolve = self.state.resolve
        return resolve(files["ckpt"]["path"]), resolve(files["run_config"]["path"]), digests

    # ------------------------------------------------------------------ data

    def _plan_convert(self) -> Plan | str:
        data = self.config.data
        root = str(data.root)
        if data.make_demo:
            if is_demo_scene_complete(data.root):
                return "demo scene present"
            result = self.state.stage_dir("convert") / COMMAND_RESULT

            def demo() -> tuple[list[str], dict[str, Any]]:
                return ["data", "make-demo", root, "--result_file", str(self.result_file("convert"))], {}

            def made() -> Collected:
                return {"files": {}}, {}, f"demo scene written to {read_json(result)['directory']}"

            return Plan({"make_demo": root}, demo, made, always=True)
        if data.convert_from is None:
            return "nothing to convert"
        target = data.root / TRANSFORMS_FILE
        inputs = {"source": str(data.convert_from),
                  "images": None if data.images is None else str(data.images),
                  "source_fingerprint": source_fingerprint(data.convert_from, data.images), "root": root}
        previous = ((self.state.stages.get("convert") or {}).get("outputs") or {}).get("files", {})
        ours = previous.get("transforms")
        replace = target.is_file()
        if replace and (ours is None or self.state.digest(target) != ours["sha256"]):
            raise StageError(f"stage convert would replace {target}, which this pipeline did not write "
                             "(or which changed since); move it away or leave out data.convert_from")

        def command() -> tuple[list[str], dict[str, Any]]:
            argv = ["data", "convert", str(data.convert_from), root,
                    "--result_file", str(self.result_file("convert"))]
            if data.images is not None:
                argv += ["--images", str(data.images)]
            return argv + (["--force", "true"] if replace else []), {}

        def collect() -> Collected:
            written = read_json(self.state.stage_dir("convert") / COMMAND_RESULT)
            frames = written.get("frames")
            path = Path(written.get("transforms") or target)
            summary = f"{frames} frames -> {path}"
            return {"files": {"transforms": self.state.file(path)}}, {"frames": frames}, summary

        return Plan(inputs, command, collect)

    def _plan_validate(self) -> Plan | str:
        dataset_format, downscale, _ = self._data_options()
        root = str(self.data_root("validate"))
        inputs = {"dataset": self._dataset("validate"), "format": dataset_format, "downscale": downscale}

        def command() -> tuple[list[str], dict[str, Any]]:
            return ["data", "validate", root, "--format", dataset_format, "--downscale", str(downscale),
                    "--result_file", str(self.result_file("validate"))], {}

        def collect() -> Collected:
            report = read_json(self.state.stage_dir("validate") / COMMAND_RESULT)
            summary = str(report.get("summary", ""))
            summary = (summary[len(root):].lstrip(": ") if summary.startswith(root) else summary) or "OK"
            warnings = len(report.get("warnings") or [])
            if warnings:
                summary += f" ({warnings} warning{'s' if warnings != 1 else ''}, see the log)"
            return {"files": {}}, {"warnings": warnings, "frames": report.get("frames")}, summary

        return Plan(inputs, command, collect)

    def _plan_cache(self) -> Plan | str:
        data = self.resolved["data"]
        if not data.get("cache", True):
            return "data.cache is false"
        dataset_format, downscale, background = self._data_options()
        cache_dir = self._cache_dir()
        root = str(self.data_root("cache"))
        inputs = {"dataset": self._dataset("cache"), "format": dataset_format, "downscale": downscale,
                  "background": background, "cache_dir": str(cache_dir)}

        def command() -> tuple[list[str], dict[str, Any]]:
            return ["data", "cache", root, "--format", dataset_format,
                    "--downscale", str(downscale), "--background", json.dumps(background),
                    "--cache_dir", str(cache_dir), "--result_file", str(self.result_file("cache"))], {}

        def collect() -> Collected:
            splits = read_json(self.state.stage_dir("cache") / COMMAND_RESULT).get("splits") or {}
            files, pixels = {}, 0
            for split, entry in splits.items():
                folder = Path(entry["entry"])
                if not (folder / MANIFEST_FILE).is_file():
                    raise OutputError(f"{folder}: no cache entry after 'data cache'")
                files[split] = self.state.file(folder / MANIFEST_FILE)
                pixels += (folder / PIXELS_FILE).stat().st_size
            summary = f"{len(files)} splits, {size_text(pixels)} in {cache_dir}"
            return {"files": files}, {"splits": len(files), "bytes": pixels}, summary

        return Plan(inputs, command, collect)

    # ------------------------------------------------------------------ training and testing

    def fit_inputs_config(self) -> dict[str, Any]:
        """The resolved fit config without what only says where outputs go or where to resume from."""
        config = json.loads(json.dumps(self.resolved, default=str))
        config.pop("ckpt_path", None)
        config.pop("config", None)
        config.get("trainer", {}).pop("default_root_dir", None)
        config.pop("run_name", None)
        return config

    def _plan_fit(self) -> Plan | str:
        inputs = {"dataset": self._dataset("fit"), "config": self.fit_inputs_config()}
        root = self.work / "fit" / value_key(inputs)[:12]
        run = root / FIT_RUN

        def command() -> tuple[list[str], dict[str, Any]]:
            last = run / "checkpoints" / "last.ckpt"
            resume = last if last.is_file() else None  # a killed fit of these inputs: go on in its folder
            argv = [*self.fit_base("fit"), "--trainer.default_root_dir", str(root), "--run_name", FIT_RUN]
            if resume is not None:
                argv += ["--ckpt_path", str(resume)]
            return argv, {"root_dir": self.state.store(root),
                          "resumed_from": None if resume is None else self.state.store(resume)}

        def collect() -> Collected:
            if not (run / RUN_RECORD).is_file():
                raise OutputError(f"fit made no run folder {run} (with {RUN_RECORD})")
            record = read_json(run / RUN_RECORD)
            if record.get("status") != "completed":
                raise OutputError(f"{run / RUN_RECORD}: the run's status is {record.get('status')!r}")
            checkpoint = run / "checkpoints" / "last.ckpt"
            if not checkpoint.is_file():
                raise OutputError(f"{checkpoint}: missing; the pipeline needs last.ckpt "
                                  "(keep checkpoint.save_last true)")
            metrics = (record.get("metrics") or {}).get("fit") or {}
            numbers = {"val_psnr": metrics.get("val/psnr"), "train_psnr": metrics.get("train/psnr"),
                       "global_step": record.get("global_step")}
            resumed = self.state.stages["fit"].get("resumed_from")
            summary = f"val PSNR {numbers['val_psnr']:.2f} dB, " if numbers["val_psnr"] is not None else ""
            summary += f"step {numbers['global_step']}" + (f", resumed from {resumed}" if resumed else "")
            files = {"ckpt": self.state.file(checkpoint), "run_config": self.state.file(run / "config.yaml")}
            return {"run_dir": self.state.store(run), "files": files}, numbers, summary

        return Plan(inputs, command, collect)

    def _plan_test(self) -> Plan | str:
        checkpoint, run_config, digests = self._checkpoint("test")
        fit_run = run_config.parent  # the test writes into the run it scores: RUN/test, RUN/test-2...
        before: set[Path] = set()
        inputs = {**digests, "args": list(self.config.test_args)}

        def command() -> tuple[list[str], dict[str, Any]]:
            before.clear()
            before.update(evaluations(fit_run, "test"))
            return ["test", "--config", str(run_config), "--ckpt_path", str(checkpoint),
                    *self.config.test_args], {}

        def collect() -> Collected:
            new = [folder for folder in evaluations(fit_run, "test") if folder not in before]
            if not new:
                raise OutputError(f"test made no test folder in {fit_run}")
            run = new[0]
            report = run / "eval.json"
            if report.is_file():
                record = read_json(report)
                psnr, views = (record.get("mean") or {}).get("psnr"), record.get("num_views")
            else:  # --eval_report.enabled false
                report = run / RUN_RECORD
                record = read_json(report)
                psnr, views = ((record.get("metrics") or {}).get("test") or {}).get("test/psnr"), None
            summary = f"test PSNR {psnr:.2f} dB" if psnr is not None else "no test PSNR"
            summary += f" over {views} views" if views is not None else ""
            return ({"run_dir": self.state.store(run), "files": {"report": self.state.file(report)}},
                    {"test_psnr": psnr, "views": views}, summary)

        return Plan(inputs, command, collect)

    # ------------------------------------------------------------------ render, export, verify

    def _plan_render(self) -> Plan | str:
        checkpoint, _, digests = self._checkpoint("render")
        render = self.config.render
        out = self.work / render["out"]
        inputs = {**digests, **render}

        def command() -> tuple[list[str], dict[str, Any]]:
            out.parent.mkdir(parents=True, exist_ok=True)
            argv = ["render", "--ckpt_path", str(checkpoint), "--camera_path", render["camera_path"]]
            if render["frames"] is not None:
                argv += ["--frames", str(render["frames"])]
            argv += ["--fps", f"{render['fps']:g}", "--depth", str(bool(render["depth"])).lower(),
                     "--out", str(out), "--result_file", str(self.result_file("render")), *render["args"]]
            return argv, {}

        def collect() -> Collected:
            if not out.is_file():
                raise OutputError(f"{out}: not written")
            frames = read_json(self.state.stage_dir("render") / COMMAND_RESULT).get("frames")
            record = self.state.file(out)
            summary = f"{frames} frames, " if frames is not None else ""
            summary += f"{size_text(record['bytes'])} -> {record['path']}"
            return {"files": {"video": record}}, {"frames": frames, "bytes": record["bytes"]}, summary

        return Plan(inputs, command, collect)

    def _export_argv(self, checkpoint: Path, out: Path, stage: str) -> list[str]:
        export = self.config.export
        return ["export", "--ckpt_path", str(checkpoint), "--format", export["format"], "--out", str(out),
                "--force", "true", "--result_file", str(self.result_file(stage)), *export["args"]]

    def _plan_export(self) -> Plan | str:
        checkpoint, _, digests = self._checkpoint("export")
        export = self.config.export
        out = self.work / export["out"]
        inputs = {**digests, "format": export["format"], "out": export["out"], "args": export["args"]}

        def command() -> tuple[list[str], dict[str, Any]]:
            out.parent.mkdir(parents=True, exist_ok=True)
            return self._export_argv(checkpoint, out, "export"), {}

        def collect() -> Collected:
            written = Path(read_json(self.state.stage_dir("export") / COMMAND_RESULT).get("out") or out)
            if not written.exists():
                raise OutputError(f"{written}: not written")
            record = self.state.file(written)
            return ({"files": {"export": record}}, {"bytes": record["bytes"]},
                    f"{export['format']}, {size_text(record['bytes'])} -> {record['path']}")

        return Plan(inputs, command, collect)

    def _plan_verify(self) -> Plan | str:
        export = self.config.export
        if not export["verify"]:
            return "export.verify is false"
        exported = self.state.result("export", "verify")["outputs"]["files"]["export"]
        checkpoint, _, digests = self._checkpoint("verify")
        module = self.state.resolve(exported["path"])  # the file the export stage wrote, as it is
        inputs = {**digests, "export": exported["sha256"], "format": export["format"], "args": export["args"]}

        def command() -> tuple[list[str], dict[str, Any]]:
            return ["export", "--ckpt_path", str(checkpoint), "--format", export["format"],
                    "--out", str(module), "--verify_only", "true",
                    "--result_file", str(self.result_file("verify")), *export["args"]], {}

        def collect() -> Collected:
            checked = read_json(self.state.stage_dir("verify") / COMMAND_RESULT).get("verify") or {}
            difference = checked.get("difference_db")
            summary = f"PSNR difference {difference:.3f} dB" if difference is not None else "verified"
            numbers = {"psnr_difference_db": difference, "checkpoint_psnr": checked.get("checkpoint_psnr"),
                       "module_psnr": checked.get("module_psnr")}
            return {"files": {"verified": self.state.file(module)}}, numbers, summary

        return Plan(inputs, command, collect)
