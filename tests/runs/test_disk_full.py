"""A full disk during training (nerf_lightning.runs.checkpoint_io.AtomicCheckpointIO): a checkpoint that
cannot fit is refused before anything is written, the fit stops there with one line naming the
checkpoint, the bytes it needs and the bytes free, exit code 4, and the last good checkpoint loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from nerf_lightning.cli import main
from nerf_lightning.files import DiskFullError, is_temporary
from nerf_lightning.runs.checkpoint_io import AtomicCheckpointIO, load_checkpoint_file
from nerf_lightning.runs.record import load_run_record
from tests.helpers.runs import RUN, short_run_args
from tests.helpers.small_disk import fill, small_filesystem


def test_a_checkpoint_save_into_a_full_disk_is_refused_and_keeps_the_previous_one(tmp_path: Path) -> None:
    io = AtomicCheckpointIO()
    checkpoint = {"state_dict": {"w": torch.arange(100_000, dtype=torch.float32)}, "global_step": 1}
    with small_filesystem(tmp_path / "disk", 1 << 20) as disk:
        last = disk / "checkpoints" / "last.ckpt"
        io.save_checkpoint(checkpoint, last)
        fill(disk, leave=256 * 1024)
        with pytest.raises(DiskFullError) as caught:
            io.save_checkpoint({**checkpoint, "global_step": 2}, last)
        line = str(caught.value)
        assert line.startswith(f"{last}: no space left on device: writing it needs more than 390.6 KiB "
                               "(400,000 bytes), ") and "\n" not in line
        assert load_checkpoint_file(last)["global_step"] == 1
        assert sorted(p.name for p in last.parent.iterdir()) == ["last.ckpt"]


@pytest.mark.slow
def test_a_disk_that_fills_during_a_fit_stops_it_at_the_last_good_checkpoint_with_exit_code_4(
    tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with small_filesystem(tmp_path / "disk", 8 << 20) as disk:
        code = main(["fit", *short_run_args(
            tiny_scene, disk, "--checkpoint.every_n_train_steps", "1", "--trainer.limit_val_batches", "0",
            "--trainer.callbacks+=tests.helpers.fill_disk.FillDiskAtStep", "--trainer.callbacks.step", "3",
            steps=6)])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("nerf-lightning")]
        run = disk / RUN
        last = run / "checkpoints" / "last.ckpt"
        assert code == 4 and len(lines) == 1 and "Traceback" not in err, err
        size = r"[\d.]+ KiB \([\d,]+ bytes\)"
        kept = "any previous file of that name is kept and no partial file is left"
        expected = (f"nerf-lightning: {re.escape(str(last))}: no space left on device: "
                    f"writing it needs more than {size}, {size} free there; {kept}")
        assert re.fullmatch(expected, lines[0]), lines[0]
        assert load_checkpoint_file(last)["global_step"] == 3  # written before the disk filled
        record = load_run_record(run)  # 64 KiB were left: room for the record, not for a checkpoint
        assert record["status"] == "failed" and record["error"] == f"DiskFullError: {lines[0][16:]}"
        assert not [p for p in disk.rglob("*") if is_temporary(p.name)]
