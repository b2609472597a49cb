"""A checkpoint and a config that disagree: ``test --config demo --ckpt_path ...`` of a run trained with a
plugin sampler (the installed ``Disparity``, not the config's OccupancyGrid) rebuilds the run's own
components; a component overridden on the command line that cannot hold the weights is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.runs import DEMO_CONFIG, RUN, run_cli, short_run_args

PLUGIN = ("--model.sampler", "Disparity", "--model.sampler.num_samples", "24")


def _test_psnr(run: Path, folder: str) -> float:
    return json.loads((run / folder / "run.json").read_text())["metrics"]["test"]["test/psnr"]


@pytest.mark.slow
def test_a_training_config_does_not_replace_the_components_a_run_was_trained_with(tiny_scene: Path,
                                                                                  tmp_path: Path) -> None:
    out = tmp_path / "runs"
    fit = run_cli("fit", *short_run_args(tiny_scene, out, *PLUGIN, steps=3, sampler_args=()))
    assert fit.returncode == 0, fit.stderr
    run = out / RUN
    checkpoint = str(run / "checkpoints" / "last.ckpt")

    # As configs/demo.yaml documents it: the config's data, the checkpoint's model.
    documented = run_cli("test", "--config", str(DEMO_CONFIG), "--data.root", str(tiny_scene),
                         "--data.make_demo", "false", "--ckpt_path", checkpoint)
    assert documented.returncode == 0, documented.stderr
    assert ("nerf-lightning: test: using the checkpoint's model.sampler Disparity, not the config's "
            "OccupancyGrid (--model.NAME overrides)") in documented.stderr
    same = run_cli("test", "--ckpt_path", str(run))  # with the run's own config
    assert same.returncode == 0, same.stderr
    assert _test_psnr(run, "test") == _test_psnr(run, "test-2")

    overridden = run_cli("test", "--config", str(DEMO_CONFIG), "--data.root", str(tiny_scene),
                         "--data.make_demo", "false", "--ckpt_path", checkpoint,
                         "--model.sampler", "OccupancyGrid", "--model.sampler.resolution", "16")
    assert overridden.returncode == 2
    [line] = [line for line in overridden.stderr.splitlines() if line.startswith("nerf-lightning:")]
    assert line.startswith(f"nerf-lightning: {checkpoint}: its weights do not fit the model built: "
                           "model.sampler: missing sampler.")
    assert "leave out the --model option that changes them" in line
    assert sorted(p.name for p in run.glob("test*")) == ["test", "test-2"]  # the failed test left nothing
