"""``--ckpt_path last`` finds the newest loadable last.ckpt of the runs under the root, skipping a broken
one in one line, so a requeued job can run the command line that started it; a run folder given as
``--ckpt_path`` names its last.ckpt and brings its config."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from nerf_lightning.commands.ckpt_path import newest_last_checkpoint, replace_ckpt_path, with_run_config


def _last(root: Path, run: str, written_at: int) -> Path:
    path = root / run / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": {}, "global_step": written_at}, path)
    os.utime(path, ns=(written_at * 10**9, written_at * 10**9))
    return path


def test_the_newest_loadable_last_checkpoint_is_chosen(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert newest_last_checkpoint(tmp_path, weights_only=True) is None  # no run yet
    _last(tmp_path, "scene-a-20261201-100000", 2)
    newer = _last(tmp_path, "scene-a-20261201-090000", 10)  # written last, whatever its name says
    broken = _last(tmp_path, "scene-b", 11)
    broken.write_bytes(b"PK\x03\x04 cut short")
    os.utime(broken, ns=(11 * 10**9, 11 * 10**9))
    (tmp_path / "scene-c").mkdir()  # a run stopped before its first checkpoint
    path, checkpoint = newest_last_checkpoint(tmp_path, weights_only=True) or (None, {})
    assert path == newer
    assert checkpoint["global_step"] == 10
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"nerf-lightning: --ckpt_path last: skipping {broken}: not a readable checkpoint")


def test_an_older_fits_versioned_folders_are_still_found(tmp_path: Path) -> None:
    old = _last(tmp_path / "lightning_logs", "version_3", 5)
    path, _ = newest_last_checkpoint(tmp_path, weights_only=True) or (None, {})
    assert path == old


def test_the_resolved_path_replaces_the_value_on_the_command_line() -> None:
    assert replace_ckpt_path(["fit", "--ckpt_path", "last", "--x", "1"], "last", "/r/last.ckpt") == \
        ["fit", "--ckpt_path", "/r/last.ckpt", "--x", "1"]
    assert replace_ckpt_path(["fit", "--ckpt_path=last"], "last", "/r/last.ckpt") == \
        ["fit", "--ckpt_path=/r/last.ckpt"]
    assert replace_ckpt_path(["fit", "--ckpt_path", "last"], "last", None) == ["fit"]
    last = "runs/a/checkpoints/last.ckpt"
    assert replace_ckpt_path(["test", "--ckpt_path", "runs/a"], "runs/a", last) == \
        ["test", "--ckpt_path", last]


def test_a_run_folder_brings_its_config_unless_one_is_given(tmp_path: Path) -> None:
    last = _last(tmp_path, "run", 1)
    (tmp_path / "run" / "config.yaml").write_text("seed_everything: 0\n")
    config = str(tmp_path / "run" / "config.yaml")
    run = str(tmp_path / "run")
    assert with_run_config(["test", "--ckpt_path", run]) == ["test", "--config", config, "--ckpt_path", run]
    assert with_run_config(["fit", f"--ckpt_path={last}"]) == \
        ["fit", "--config", config, f"--ckpt_path={last}"]
    assert with_run_config(["test", "--config", "x.yaml", "--ckpt_path", run]) == \
        ["test", "--config", "x.yaml", "--ckpt_path", run]  # the one given wins
    assert with_run_config(["fit", "--ckpt_path", "last"]) == ["fit", "--ckpt_path", "last"]
    outside = tmp_path / "elsewhere.ckpt"
    outside.write_bytes(last.read_bytes())
    assert with_run_config(["test", "--ckpt_path", str(outside)]) == ["test", "--ckpt_path", str(outside)]
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'gone'}: no such checkpoint or run folder"):
        with_run_config(["test", "--ckpt_path", str(tmp_path / "gone")])
