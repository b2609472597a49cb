"""Full disks (nerf_lightning.files.space and the atomic writers): on a real small file system (a tmpfs),
a write that does not fit is one DiskFullError whose message is one line naming the file, the bytes it
needs and the bytes free; the previous file stays as it was and no temporary file is left."""

from __future__ import annotations

import errno
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from nerf_lightning.files import (
    DiskFullError,
    atomic_folder,
    atomic_path,
    atomic_torch_save,
    atomic_write_bytes,
    atomic_write_json,
    find_disk_full,
    is_temporary,
)
from nerf_lightning.files.atomic import torch_save_size
from tests.helpers.small_disk import fill, small_filesystem

MIB = 1 << 20


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _assert_one_line(error: DiskFullError, path: Path, *, needed: str, free: int) -> None:
    line = str(error)
    assert "\n" not in line and line.startswith(f"{path}: no space left on device: writing it needs {needed}")
    assert f"({free:,} bytes) free there" in line or f"{free} bytes free there" in line
    assert error.errno == errno.ENOSPC and isinstance(error, OSError)


def test_a_write_larger_than_the_free_space_is_one_line_and_keeps_the_old_file(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "disk", MIB) as disk:
        target = disk / "record.json"
        atomic_write_json({"old": True}, target)
        data = b"x" * (2 * MIB)
        with pytest.raises(DiskFullError) as caught:
            atomic_write_bytes(data, target)
        free = shutil.disk_usage(disk).free
        _assert_one_line(caught.value, target, needed=f"2.0 MiB ({len(data):,} bytes)", free=free)
        assert "previous file of that name is kept and no partial file is left" in str(caught.value)
        assert target.read_text() == '{\n  "old": true\n}\n' and _names(disk) == ["record.json"]
        assert free > MIB - 64 * 1024  # the temporary file's space was given back


def test_a_torch_save_that_cannot_fit_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    checkpoint = {"state_dict": {"w": torch.zeros(400_000)}, "optimizer": [torch.zeros(10)]}
    size = torch_save_size(checkpoint)
    assert size == 400_000 * 4 + 40
    with small_filesystem(tmp_path / "disk", MIB) as disk:
        target = disk / "last.ckpt"
        atomic_torch_save({"state_dict": {"w": torch.ones(3)}}, target)
        old = target.read_bytes()
        before = shutil.disk_usage(disk).free
        with pytest.raises(DiskFullError) as caught:
            atomic_torch_save(checkpoint, target)
        assert caught.value.__cause__ is None  # refused up front, not a failed write
        _assert_one_line(caught.value, target, needed=f"more than 1.5 MiB ({size:,} bytes)", free=before)
        assert target.read_bytes() == old and _names(disk) == ["last.ckpt"]


def test_a_disk_filling_during_torch_save_is_recognised_behind_torchs_runtime_error(tmp_path: Path) -> None:
    """torch's zip writer turns ENOSPC into a RuntimeError ('unexpected pos'); without the check up front
    the write meets it, and it is a DiskFullError all the same."""
    with small_filesystem(tmp_path / "disk", MIB) as disk:
        target = disk / "last.ckpt"
        atomic_torch_save({"w": torch.ones(3)}, target)
        with pytest.raises(DiskFullError) as caught:
            atomic_torch_save({"w": torch.zeros(400_000)}, target, check_space=False)
        assert isinstance(caught.value.__cause__, RuntimeError)
        assert "writing it needs more than 1.5 MiB" in str(caught.value)
        assert torch.load(target, weights_only=True)["w"].tolist() == [1.0, 1.0, 1.0]
        assert _names(disk) == ["last.ckpt"]


def test_a_writer_of_its_own_and_a_folder_name_what_they_had_written(tmp_path: Path) -> None:
    """``atomic_path`` (a writer that opens the file itself) and ``atomic_folder`` do not know the size in
    advance: the line says more than what was written before the disk filled."""
    with small_filesystem(tmp_path / "disk", MIB) as disk:
        fill(disk, leave=256 * 1024)
        with pytest.raises(DiskFullError) as caught, atomic_path(disk / "frame.png") as temporary:
            temporary.write_bytes(b"p" * MIB)
        assert str(caught.value).startswith(f"{disk / 'frame.png'}: no space left on device: writing it "
                                            "needs more than 2")
        with pytest.raises(DiskFullError) as caught, atomic_folder(disk / "entry") as folder:
            (folder / "a").write_bytes(b"a" * 128 * 1024)
            (folder / "b").write_bytes(b"b" * MIB)
        assert str(caught.value).startswith(f"{disk / 'entry'}: no space left on device: writing it needs "
                                            "more than")
        assert caught.value.needed is not None and caught.value.needed >= 128 * 1024
        assert not any(is_temporary(name) for name in _names(disk))


def test_any_write_error_of_a_full_disk_is_found_with_the_file_it_was_writing(tmp_path: Path) -> None:
    """A writer outside the package: an OSError without a filename, raised while a file was open for
    writing, names that file (its final name when it was a temporary one)."""
    with small_filesystem(tmp_path / "disk", MIB) as disk:
        fill(disk)
        events = disk / ".events.tmp-12-0123abcd.log"
        with pytest.raises(OSError) as caught, open(events, "wb") as handle:
            handle.write(b"e" * 64 * 1024)
            handle.flush()
        assert caught.value.filename is None
        found = find_disk_full(RuntimeError("while logging"))
        assert found is None
        wrapped = RuntimeError("while logging")
        wrapped.__context__ = caught.value
        found = find_disk_full(wrapped)
        assert found is not None and found.path == disk / "events.log" and not found.kept
        assert str(found) == f"{disk / 'events.log'}: no space left on device: 0 bytes free there"


def test_the_error_pickles_and_names_a_quota(tmp_path: Path) -> None:
    error = DiskFullError(tmp_path / "x.ckpt", code=errno.EDQUOT, needed=3 * MIB, free=MIB)
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) == (
        f"{tmp_path / 'x.ckpt'}: disk quota exceeded: writing it needs 3.0 MiB (3,145,728 bytes), "
        "1.0 MiB (1,048,576 bytes) free there (the quota may allow less); any previous file of that name "
        "is kept and no partial file is left")
    assert again.errno == errno.EDQUOT and find_disk_full(again) is again
    assert find_disk_full(KeyboardInterrupt()) is None
