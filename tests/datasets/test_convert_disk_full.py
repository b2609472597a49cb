"""``data convert --copy`` into a full disk: one line naming the image, the bytes it needs and the bytes
free, exit code 4, no temporary file left (the copies go through nerf_lightning.files.atomic_write)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nerf_lightning import cli
from nerf_lightning.files import is_temporary
from tests.helpers.datasets import llff_capture
from tests.helpers.small_disk import fill, small_filesystem


def test_copying_images_onto_a_full_disk_is_one_line_and_exit_code_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = llff_capture(tmp_path / "capture")
    with small_filesystem(tmp_path / "disk", 1 << 20) as disk:
        dst = disk / "out"
        fill(disk)
        code = cli.main(["data", "convert", str(src), str(dst), "--images", str(src / "images_2"), "--copy"])
        err = capsys.readouterr().err.splitlines()
        assert code == 4 and len(err) == 1, err
        first = sorted((src / "images_2").iterdir())[0]
        assert err[0].startswith(f"nerf-lightning: {dst / 'images_2' / first.name}: no space left on device: "
                                 "writing it needs ")
        assert f"{first.stat().st_size:,} bytes" in err[0]
        assert " free there; any previous file of that name is kept" in err[0]
        assert not [p for p in disk.rglob("*") if is_temporary(p.name)]
