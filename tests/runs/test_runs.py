"""Reproducibility and run records: determinism, exact resume after SIGKILL, atomic saves, run.json."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from nerf_lightning.cli import main, run_lightning_cli
from nerf_lightning.runs.compare import compare_runs
from nerf_lightning.runs.record import load_run_record
from tests.helpers.numerics import owned_numerics
from tests.helpers.runs import REPO_ON_PATH, RUN, kill_at_step, short_run_args

SUBPROCESS_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
CPU = ("--trainer.accelerator", "cpu")  # bitwise reproducibility is promised on the CPU only

# Every test trains, or kills a process that imports the package while it writes checkpoints.
pytestmark = pytest.mark.slow


def _state(checkpoint: Path) -> dict[str, torch.Tensor]:
    return torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]


def _assert_bitwise_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs"


def _fit(scene: Path, out: Path, *extra: str, steps: int = 6) -> Path:
    run_lightning_cli(
        [
            "fit",
            *short_run_args(
                scene,
                out,
                "--checkpoint.every_n_train_steps",
                "1",
                "--trainer.limit_val_batches",
                "0",
                *CPU,
                *extra,
                steps=steps,
            ),
        ]
    )
    return out / RUN


def test_same_seed_gives_bitwise_identical_parameters(tiny_scene: Path, tmp_path: Path) -> None:
    a = _fit(tiny_scene, tmp_path / "a")
    b = _fit(tiny_scene, tmp_path / "b")
    _assert_bitwise_equal(_state(a / "checkpoints" / "last.ckpt"), _state(b / "checkpoints" / "last.ckpt"))
    c = _fit(tiny_scene, tmp_path / "c", "--seed_everything", "1")
    assert not torch.equal(
        _state(a / "checkpoints" / "last.ckpt")["field.encoding.table"],
        _state(c / "checkpoints" / "last.ckpt")["field.encoding.table"],
    )


def _cli_command(scene: Path, out: Path, steps: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nerf_lightning",
        "fit",
        *short_run_args(
            scene,
            out,
            "--checkpoint.every_n_train_steps",
            "1",
            "--trainer.limit_val_batches",
            "0",
            *CPU,
            *extra,
            steps=steps,
        ),
    ]


def test_run_killed_with_sigkill_resumes_to_identical_parameters(tiny_scene: Path, tmp_path: Path) -> None:
    steps, killed_at = 10, 4
    out = tmp_path / "killed"
    # The run SIGKILLs itself at the start of step 4, after writing the step-4 checkpoint: a crash
    # at the same moment every time. Meanwhile the uninterrupted reference trains in this process, with
    # what a fresh process has (one thread, as SUBPROCESS_ENV gives, and torch's default kernels),
    # whatever earlier tests left in this one.
    with open(tmp_path / "killed.err", "w") as killed_err:
        killed = subprocess.Popen(_cli_command(tiny_scene, out, steps, *kill_at_step(killed_at)),
                                  env={**SUBPROCESS_ENV, **REPO_ON_PATH}, stdout=subprocess.DEVNULL,
                                  stderr=killed_err)
    try:
        with owned_numerics(threads=1):
            reference = _fit(tiny_scene, tmp_path / "ref", steps=steps)
        assert killed.wait(timeout=300) == -signal.SIGKILL, (tmp_path / "killed.err").read_text()[-2000:]
    finally:
        if killed.poll() is None:  # a failed run above: leave no process behind
            killed.kill()
            killed.wait()
    last = out / RUN / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == killed_at

    with owned_numerics(threads=1):
        run_lightning_cli(["fit", *short_run_args(tiny_scene, out, "--checkpoint.every_n_train_steps", "1",
                                                  "--trainer.limit_val_batches", "0", *CPU, "--ckpt_path",
                                                  str(last), steps=steps)])
    # The resumed fit goes on in the killed run's folder: its last.ckpt is now the final step's.
    assert [p.name for p in out.iterdir()] == [RUN]
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == steps
    assert len(list((out / RUN).glob("events.out.tfevents.*"))) == 2  # the killed fit's and the resumed one's
    _assert_bitwise_equal(_state(reference / "checkpoints" / "last.ckpt"), _state(last))


_SAVER = """
import sys, torch
from nerf_lightning.files import atomic_torch_save
path = sys.argv[1]
i = 0
while True:
    i += 1
    atomic_torch_save({"value": torch.full((4_000_000,), float(i))}, path)
    print(i, flush=True)
"""


def test_kill_during_checkpoint_writing_leaves_a_loadable_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    for trial in range(4):
        process = subprocess.Popen(
            [sys.executable, "-c", _SAVER, str(path)], env=SUBPROCESS_ENV, stdout=subprocess.PIPE, text=True
        )
        assert process.stdout is not None
        process.stdout.readline()  # one complete save
        time.sleep(0.013 * (trial + 1))  # then kill at varying moments, most likely mid-write
        process.send_signal(signal.SIGKILL)
        process.wait()
        value = torch.load(path, weights_only=True)["value"]
        assert value.shape == (4_000_000,) and torch.all(value == value[0])


def test_nonfinite_loss_stops_with_one_line_and_keeps_the_checkpoint(
    tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "fit",
            *short_run_args(
                tiny_scene,
                tmp_path,
                "--model.learning_rate",
                "1e30",
                "--checkpoint.every_n_train_steps",
                "1",
                "--trainer.limit_val_batches",
                "0",
                steps=6,
            ),
        ]
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("nerf-lightning:")]
    assert code == 3 and len(err) == 1 and "training loss is" in err[0] and "nan" in err[0].lower()
    last = tmp_path / RUN / "checkpoints" / "last.ckpt"
    state = _state(last)
    assert all(torch.isfinite(t).all() for t in state.values() if t.is_floating_point())
    record = load_run_record(last.parents[1])
    assert record["status"] == "failed" and "NonFiniteLossError" in record["error"]


def test_nonfinite_loss_can_be_skipped_and_counted(tiny_scene: Path, tmp_path: Path) -> None:
    cli = run_lightning_cli(
        [
            "fit",
            *short_run_args(
                tiny_scene,
                tmp_path,
                "--model.learning_rate",
                "1e30",
                "--model.on_nonfinite_loss",
                "skip",
                "--trainer.limit_val_batches",
                "0",
                steps=6,
            ),
        ]
    )
    assert cli.model.skipped_steps >= 1


def test_run_record_holds_config_versions_plugins_data_and_metrics(tiny_scene: Path, tmp_path: Path) -> None:
    run = _fit(tiny_scene, tmp_path / "a", steps=3)
    record = json.loads((run / "run.json").read_text())
    assert record["status"] == "completed" and record["seed"] == 0 and record["global_step"] == 3
    assert record["config"]["model"]["sampler"]["class_path"].endswith("OccupancyGrid")
    assert record["versions"]["torch"] == torch.__version__.split("+")[0] or record["versions"]["torch"]
    assert {"lightning", "kornia", "jsonargparse", "python"} <= set(record["versions"])
    plugins = {p["name"]: p for p in record["sampler_plugins"]}
    assert plugins["Uniform"]["distribution"] == "nerf-lightning"
    assert record["data"]["root"] == str(tiny_scene)
    assert "train/loss" in record["metrics"]["fit"]
    assert record["git"]["commit"] is None or len(record["git"]["commit"]) == 40
    assert record["start_time"] <= record["end_time"]


def test_compare_prints_config_and_metric_differences(
    tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _fit(tiny_scene, tmp_path / "a", steps=2)
    b = _fit(tiny_scene, tmp_path / "b", "--model.learning_rate", "0.02", steps=2)
    rows = compare_runs(load_run_record(a), load_run_record(b))
    keys = {key for _, key, _, _ in rows}
    assert "config.model.learning_rate" in keys and "metrics.fit.train/loss" in keys
    assert not any(key.startswith("versions.") for key in keys)
    assert main(["compare", str(a), str(b)]) == 0
    printed = capsys.readouterr().out
    assert "config.model.learning_rate" in printed and "0.01" in printed and "0.02" in printed
    assert "[environment] identical" in printed
    assert main(["compare", str(a), str(tmp_path / "missing")]) == 2


def test_last_checkpoint_holds_the_final_step_when_training_stops_between_saves(
    tiny_scene: Path, tmp_path: Path
) -> None:
    run_lightning_cli(["fit", *short_run_args(tiny_scene, tmp_path, "--checkpoint.every_n_train_steps", "5",
                                              "--trainer.limit_val_batches", "0", steps=7)])
    last = tmp_path / RUN / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 7
