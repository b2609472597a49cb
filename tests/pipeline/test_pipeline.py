"""``nerf-lightning pipeline``: real subprocesses on the tiny scene; skipping, resuming, retrying.

Each stage is a ``python -m nerf_lightning`` subprocess of the pipeline's; the pipeline itself runs in
this process (``run_cli``), which saves a Lightning import per run, except where it is killed: there it
runs in a process forked from this one, in a session of its own (``tests/helpers/pipeline_session.py``)."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from PIL import Image

from nerf_lightning.cli import main, run_lightning_cli
from nerf_lightning.pipeline import Pipeline, PipelineConfigError, load_pipeline_config, source_fingerprint
from tests.helpers.datasets import colmap_capture, llff_capture, write_png
from tests.helpers.pipeline_session import main_in_new_session
from tests.helpers.runs import DEMO_CONFIG, ONE_THREAD, REPO_ON_PATH, kill_at_step, run_cli, short_run_args

CHAIN = ["convert", "validate", "cache", "fit", "test", "render", "export", "verify"]
AFTER_FIT = ["test"]
"""The stage after fit that the rerun tests run: it stands for the others (render and export follow the
checkpoint the same way)."""
CHAIN_STEPS = 3
"""The chain's fit: one epoch of ``short_run_args`` (``--data.steps_per_epoch 3``), so one validation."""
FIT_RUN = "run"
"""The fit stage's run folder, ``WORK/fit/KEY/run``: a killed fit of the same inputs goes on in it."""


def _fit_args(cache: Path, *extra: str, steps: int = CHAIN_STEPS) -> list[str]:
    """The tiny training settings of ``short_run_args`` without what the pipeline sets itself."""
    args = short_run_args(Path("-"), Path("-"), "--data.cache_dir", str(cache), *extra, steps=steps)
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--config", "--data.root", "--trainer.default_root_dir", "--run_name"):
            skip = True
        else:
            kept.append(arg)
    return kept


def _write(path: Path, work: Path, scene: Path, fit_args: list[str], **sections: object) -> Path:
    doc: dict[str, object] = {
        "work_dir": str(work),
        "data": {"root": str(scene)},
        "fit": {"config": str(DEMO_CONFIG), "args": fit_args},
        "render": {"camera_path": "orbit", "frames": 3, "fps": 10, "out": "orbit.gif"},
        "export": {"format": "torchscript", "verify": True},
        "retries": 0,
        "stages": CHAIN,
        **sections,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _run(config: Path) -> subprocess.CompletedProcess[str]:
    return run_cli("pipeline", "--config", str(config))


def _state(work: Path) -> dict:
    return json.loads((work / "pipeline.json").read_text())


def _statuses(work: Path) -> dict[str, str]:
    """What the latest pipeline did with each stage."""
    return {stage: entry["status"] for stage, entry in _state(work)["last_run"]["stages"].items()}


def _row(stdout: str, stage: str) -> list[str]:
    """The table row of ``stage``: [stage, status, time, details...]."""
    rows = [line for line in stdout.splitlines() if line.split()[:1] == [stage] and "  " in line]
    assert rows, stdout
    cells = [cell.strip() for cell in rows[-1].split("  ") if cell.strip()]
    return cells


def _attempt_headers(work: Path) -> int:
    return sum(log.read_text().count("\n===== ") for log in (work / "logs").glob("*.log"))


def _explain(result: subprocess.CompletedProcess[str]) -> str:
    return f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}"


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    """Where two stage ``inputs`` differ (a key path and both values): why a stage did not find its
    earlier run."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [line for key in sorted(set(old) | set(new), key=str)
                for line in _differences(old.get(key), new.get(key), f"{where}.{key}")]
    return [] if old == new else [f"{where}: {old!r} -> {new!r}"]


@dataclass
class Chain:
    scene: Path
    cache: Path
    work: Path
    result: subprocess.CompletedProcess[str]

    def copy(self, tmp_path: Path) -> Path:
        """A copy of the chain's work dir (the recorded paths inside it are relative to it)."""
        work = tmp_path / "work"
        shutil.copytree(self.work, work)
        return work


@pytest.fixture(scope="module")
def chain(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> Chain:
    """One pipeline over the tiny scene: validate, cache, a 3-step fit, test, a 3-frame gif, a TorchScript
    export and its verification in a fresh process."""
    base = tmp_path_factory.mktemp("pipeline")
    cache, work = base / "cache", base / "work"
    config = _write(base / "pipeline.yaml", work, tiny_scene, _fit_args(cache))
    return Chain(tiny_scene, cache, work, _run(config))


@pytest.mark.slow
def test_chain_runs_every_stage_and_records_it(chain: Chain) -> None:
    result = chain.result
    assert result.returncode == 0, _explain(result)
    assert _statuses(chain.work) == {
        "process": "not run", "convert": "skipped", "validate": "done", "cache": "done", "fit": "done",
        "test": "done",
        "render": "done", "export": "done", "verify": "done",
    }
    stages = _state(chain.work)["stages"]
    for stage in ("validate", "cache", "fit", "test", "render", "export", "verify"):
        record = stages[stage]
        assert record["status"] == "done" and record["attempts"] == 1 and record["inputs_key"]
        assert (chain.work / record["log"]).is_file()
    assert stages["fit"]["numbers"]["global_step"] == CHAIN_STEPS and stages["fit"]["resumed_from"] is None
    checkpoint = chain.work / stages["fit"]["outputs"]["files"]["ckpt"]["path"]
    assert checkpoint.name == "last.ckpt" and checkpoint.is_file()
    # The fit's run folder is WORK/fit/KEY/run, the only one there; the test wrote into it: RUN/test.
    run_dir = stages["fit"]["outputs"]["run_dir"]
    assert run_dir == f"{stages['fit']['root_dir']}/{FIT_RUN}"
    assert checkpoint == chain.work / run_dir / "checkpoints" / "last.ckpt"
    assert [path.name for path in (chain.work / stages["fit"]["root_dir"]).iterdir()] == [FIT_RUN]
    assert stages["test"]["outputs"]["run_dir"] == f"{run_dir}/test"
    assert stages["test"]["outputs"]["files"]["report"]["path"] == f"{run_dir}/test/eval.json"
    assert stages["test"]["numbers"]["views"] == 2 and stages["test"]["numbers"]["test_psnr"] > 5
    assert len(stages["cache"]["outputs"]["files"]) == 3
    with Image.open(chain.work / "orbit.gif") as gif:
        assert gif.n_frames == 3
    assert stages["render"]["numbers"]["frames"] == 3
    assert stages["export"]["numbers"]["bytes"] > 0
    assert (chain.work / stages["export"]["outputs"]["files"]["export"]["path"]).is_file()

    assert result.stdout.splitlines()[-11].split() == ["stage", "status", "time", "details"]
    assert _row(result.stdout, "process")[1] == "not run"  # a dataset, not photos: nothing to process
    assert _row(result.stdout, "fit")[:2] == ["fit", "done"]
    assert "val PSNR" in _row(result.stdout, "fit")[3]
    assert "test PSNR" in _row(result.stdout, "test")[3]
    assert _row(result.stdout, "render")[3].startswith("3 frames")
    assert _row(result.stdout, "export")[1] == "done" and _row(result.stdout, "verify")[1] == "done"


@pytest.mark.slow
def test_rerun_skips_every_stage(chain: Chain, tmp_path: Path) -> None:
    work = chain.copy(tmp_path)
    headers = _attempt_headers(work)
    result = _run(_write(tmp_path / "pipeline.yaml", work, chain.scene, _fit_args(chain.cache)))
    assert result.returncode == 0, _explain(result)
    statuses = _statuses(work)
    assert all(statuses[stage] == "skipped" for stage in CHAIN), statuses
    assert _attempt_headers(work) == headers  # no stage command ran
    assert _row(result.stdout, "fit")[1] == "skipped"


@pytest.mark.slow
def test_changed_fit_arg_reruns_fit_and_after_and_a_killed_fit_resumes(
        chain: Chain, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = chain.copy(tmp_path)
    old = _state(work)["stages"]
    steps, killed_at = 2, 1
    # The fit SIGKILLs its process group, the pipeline and itself, at the start of step 1: a crash
    # after the step-1 checkpoint, at the same moment every run (an epoch's end: one step per epoch).
    # The resumed fit is not killed again.
    fit_args = _fit_args(chain.cache, "--checkpoint.every_n_train_steps", "1", "--data.steps_per_epoch", "1",
                         "--trainer.limit_val_batches", "0", *kill_at_step(killed_at, process_group=True),
                         steps=steps)
    config = _write(tmp_path / "pipeline.yaml", work, chain.scene, fit_args,
                    stages=[*CHAIN[:CHAIN.index("fit") + 1], *AFTER_FIT])
    monkeypatch.setenv("PYTHONPATH", REPO_ON_PATH["PYTHONPATH"])  # the stages import tests.helpers.kill

    killed = main_in_new_session(["pipeline", "--config", str(config)], tmp_path / "killed",
                                 env={**ONE_THREAD, **REPO_ON_PATH})
    assert killed.returncode == -signal.SIGKILL, _explain(killed)
    fit = _state(work)["stages"]["fit"]
    assert fit["status"] == "running" and fit["inputs_key"] != old["fit"]["inputs_key"]
    last = work / fit["root_dir"] / FIT_RUN / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == killed_at

    result = _run(config)
    changed = _differences(fit["inputs"], _state(work)["stages"]["fit"]["inputs"])
    assert result.returncode == 0, _explain(result) + "\nfit inputs changed since the killed run:\n" + \
        "\n".join(changed)
    assert _statuses(work) == {
        "process": "not run", "convert": "skipped", "validate": "skipped", "cache": "skipped",
        "fit": "done", "test": "done",
        "render": "not run", "export": "not run", "verify": "not run",
    }
    fit = _state(work)["stages"]["fit"]
    assert fit["resumed_from"] == str(last.relative_to(work))
    assert f"--ckpt_path {last}" in fit["command"]
    assert f"--ckpt_path {last}" in (work / fit["log"]).read_text()
    assert fit["numbers"]["global_step"] == steps
    # The killed fit went on in its own run folder, the only one there: its last.ckpt is the resumed one's.
    assert fit["outputs"]["run_dir"].endswith(FIT_RUN)
    assert work / fit["outputs"]["run_dir"] == last.parent.parent
    assert [path.name for path in (work / fit["root_dir"]).iterdir()] == [FIT_RUN]
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == steps
    stages = _state(work)["stages"]
    assert stages["test"]["outputs"]["run_dir"] == f"{fit['outputs']['run_dir']}/test"  # into the fit's run
    assert stages["test"]["inputs"]["ckpt"] == fit["outputs"]["files"]["ckpt"]["sha256"]
    assert stages["test"]["inputs_key"] != old["test"]["inputs_key"]
    assert "resumed from" in _row(result.stdout, "fit")[3]


@pytest.mark.slow
def test_failing_stage_is_retried_then_stops_the_chain_with_one_line(chain: Chain, tmp_path: Path) -> None:
    work = chain.copy(tmp_path)
    scene = Path(shutil.copytree(chain.scene, tmp_path / "scene"))
    (scene / "val" / "r_1.png").write_bytes(b"not a png")  # validate fails: a stage quick to run twice
    config = _write(tmp_path / "pipeline.yaml", work, scene, _fit_args(chain.cache), retries=1)
    result = _run(config)
    assert result.returncode == 1, _explain(result)
    errors = [line for line in result.stderr.splitlines() if line.startswith("nerf-lightning pipeline:")]
    assert len(errors) == 1, result.stderr
    log = work / "logs" / "validate.log"
    assert "stage validate failed after 2 attempts (exit code 1: " in errors[0]
    assert f"{scene}: 1 problem; train/val/test frames: 8/1/2" in errors[0]  # validate's last line
    assert "val/r_1.png' cannot be decoded" in log.read_text()
    assert errors[0].endswith(f"log: {log}")
    validate = _state(work)["stages"]["validate"]
    assert validate["status"] == "failed" and validate["attempts"] == 2
    assert "attempt 1 of 2" in log.read_text() and "attempt 2 of 2" in log.read_text()
    assert "[validate] attempt 1 failed" in result.stdout
    statuses = _statuses(work)
    assert statuses["convert"] == "skipped" and statuses["validate"] == "failed"
    assert all(statuses[stage] == "not run" for stage in CHAIN[CHAIN.index("cache"):]), statuses
    assert _row(result.stdout, "validate")[1] == "failed"
    assert _row(result.stdout, "fit")[1:] == ["not run", "-", "validate failed"]


# ------------------------------------------------------------------------------------- the file, up front


def _config(tmp_path: Path, scene: Path, **changes: object) -> Path:
    doc: dict[str, object] = {"work_dir": str(tmp_path / "work"), "data": {"root": str(scene)},
                              "fit": {"config": str(DEMO_CONFIG)}}
    doc.update(changes)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"stages": ["fit", "deploy"]}, "stages: unknown stage 'deploy'"),
        ({"fit": {"config": "configs/nope.yaml"}}, "fit.config: configs/nope.yaml: no such file"),
        ({"fit": {"config": "nope"}},
         "fit.config: nope: no such file, and no config of that name ships with nerf-lightning "
         "(shipped: blender, ddp, demo, llff, nerfstudio, pipeline-demo, real, real-forward)"),
        ({"fit": {"config": str(DEMO_CONFIG), "args": ["--ckpt_path", "x.ckpt"]}},
         "fit.args: --ckpt_path is set by the pipeline"),
        ({"fit": {"config": str(DEMO_CONFIG), "args": ["--run_name", "mine"]}},
         "fit.args: --run_name is set by the pipeline"),
        ({"fit": None}, "fit.config: required"),
        ({"colour": "red"}, "colour: unknown field"),
        ({"data": {"root": "/no/such/scene"}}, "data.root: /no/such/scene: no such folder"),
        ({"data": {}}, "data.root: required"),
        ({"render": {"out": "orbit.avi"}}, "render.out: orbit.avi: expected a .mp4 or .gif file"),
        ({"render": {"frame": 3}}, "render.frame: unknown field"),
        ({"export": {"format": "obj"}}, "export.format: 'obj'"),
        ({"retries": -1}, "retries: expected an integer >= 0"),
        ({"stages": ["export"]}, "stages: export: no 'nerf-lightning export' command"),
    ],
)
def test_the_file_is_checked_up_front_with_one_line_naming_the_field(
    tiny_scene: Path, tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    path = _config(tmp_path, tiny_scene, **changes)
    with pytest.raises(PipelineConfigError) as error:
        load_pipeline_config(path, export_available=False)
    assert str(error.value).startswith(f"{path}: ") and message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_pipeline_file_that_is_not_yaml_is_one_line_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text("data:\n  root: [unclosed\n")
    with pytest.raises(PipelineConfigError) as error:
        load_pipeline_config(path, export_available=False)
    line = str(error.value)
    assert line.startswith(f"{path}: not valid YAML (") and "at line 3, column 1)" in line
    assert "\n" not in line


def test_defaults_and_stages_this_installation_lacks(tiny_scene: Path, tmp_path: Path) -> None:
    config = load_pipeline_config(_config(tmp_path, tiny_scene, work_dir=None), export_available=False)
    assert config.work_dir == Path.cwd() / "runs" / "pipeline"
    assert config.stages == ("process", "convert", "validate", "cache", "fit", "test", "render")
    assert set(config.not_available) == {"export", "verify"}
    assert config.render["out"] == "render.mp4" and config.render["camera_path"] == "auto"
    assert config.export["format"] == "pt2" and config.export["out"] == "model.pt2" and config.retries == 0
    with_export = load_pipeline_config(_config(tmp_path, tiny_scene), export_available=True)
    assert with_export.stages[-2:] == ("export", "verify")


@pytest.mark.slow
def test_fit_args_that_do_not_resolve_are_refused_before_anything_runs(
    tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fit = {"config": str(DEMO_CONFIG), "args": ["--trainer.max_stepz", "3"]}
    path = _config(tmp_path, tiny_scene, fit=fit)
    with pytest.raises(PipelineConfigError, match=r"fit: .* does not resolve: .*--trainer.max_stepz"):
        Pipeline(load_pipeline_config(path), run_lightning_cli).resolve()
    assert main(["pipeline", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nerf-lightning pipeline: ")
    assert not (tmp_path / "work").exists()


def test_source_fingerprint_follows_the_capture_not_the_converted_file(tmp_path: Path) -> None:
    colmap = colmap_capture(tmp_path / "colmap", ["PINHOLE"], binary=True)
    llff = llff_capture(tmp_path / "llff")
    for capture, image in ((colmap, colmap / "images" / "frame_03.png"), (llff, next(llff.glob("images/*")))):
        before = source_fingerprint(capture)
        assert before == source_fingerprint(capture) and not before.startswith("unreadable")
        (capture / "transforms.json").write_text("{}")  # what 'data convert CAPTURE CAPTURE' writes
        assert source_fingerprint(capture) == before
        write_png(image, seed=9)
        assert source_fingerprint(capture) != before
    (tmp_path / "empty").mkdir()
    assert source_fingerprint(tmp_path / "empty").startswith("unreadable: no LLFF poses or COLMAP model")
