"""``--ckpt_path last`` finds the newest loadable last.ckpt of the run folder, skipping a broken one in
one line, so a requeued job can run the command line that started it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nerf_lightning.commands.lightning import _replace_last, newest_last_checkpoint


def _last(root: Path, version: int) -> Path:
    path = root / "lightning_logs" / f"version_{version}" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    return path


def test_the_newest_loadable_last_checkpoint_is_chosen(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert newest_last_checkpoint(tmp_path, weights_only=True) is None  # no run yet
    torch.save({"state_dict": {}, "global_step": 3}, _last(tmp_path, 2))
    torch.save({"state_dict": {}, "global_step": 1}, _last(tmp_path, 10))
    broken = _last(tmp_path, 11)
    broken.write_bytes(b"PK\x03\x04 cut short")
    (tmp_path / "lightning_logs" / "version_12").mkdir()  # a resume stopped before its first checkpoint
    path, checkpoint = newest_last_checkpoint(tmp_path, weights_only=True) or (None, {})
    assert path == tmp_path / "lightning_logs" / "version_10" / "checkpoints" / "last.ckpt"
    assert checkpoint["global_step"] == 1  # version 10 is newer than version 2, whatever their steps
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"nerf-lightning: --ckpt_path last: skipping {broken}: not a readable checkpoint")


def test_the_resolved_path_replaces_last_on_the_command_line() -> None:
    assert _replace_last(["fit", "--ckpt_path", "last", "--x", "1"], "/r/last.ckpt") == \
        ["fit", "--ckpt_path", "/r/last.ckpt", "--x", "1"]
    assert _replace_last(["fit", "--ckpt_path=last"], "/r/last.ckpt") == ["fit", "--ckpt_path=/r/last.ckpt"]
    assert _replace_last(["fit", "--ckpt_path", "last"], None) == ["fit"]
