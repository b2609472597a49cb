"""Atomic writes and remembered file digests (nerf_lightning.files)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import torch

from nerf_lightning.files import (
    DigestMemo,
    FolderExistsError,
    PendingFile,
    atomic_folder,
    atomic_path,
    atomic_torch_save,
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    digests,
    file_sha256,
    is_temporary,
)
from nerf_lightning.files.digests import memo_file

TICK = 0.05
"""Longer than a file system timestamp tick: a write after this sleep gets a new mtime and ctime."""


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if is_temporary(p.name))


# -------------------------------------------------------------------------------------------- atomic


def test_failure_mid_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old content")
    with pytest.raises(RuntimeError, match="disk full"), atomic_write(target) as handle:
        handle.write(b"half of the new")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"old content"
    assert leftovers(tmp_path) == []
    with pytest.raises(KeyboardInterrupt), atomic_path(target) as temporary:
        temporary.write_bytes(b"new")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old content" and leftovers(tmp_path) == []


def test_failure_in_serialisation_or_rename_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    atomic_write_json({"a": 1}, target)
    circular: dict[str, object] = {}
    circular["self"] = circular
    with pytest.raises(ValueError, match="Circular"):
        atomic_write_json(circular, target)
    with mock.patch.object(os, "replace", side_effect=OSError("rename refused")), pytest.raises(OSError):
        atomic_write_text("new", target)
    assert json.loads(target.read_text()) == {"a": 1}
    assert leftovers(tmp_path) == []

    class Unpicklable:
        def __reduce__(self) -> tuple:
            raise TypeError("cannot pickle this")

    checkpoint = tmp_path / "last.ckpt"
    atomic_torch_save({"step": 1}, checkpoint, sync_dir=True)
    with pytest.raises(TypeError, match="cannot pickle"):
        atomic_torch_save({"step": 2, "bad": Unpicklable()}, checkpoint)
    assert torch.load(checkpoint, weights_only=True) == {"step": 1}
    assert leftovers(tmp_path) == []


def test_new_files_get_the_umask_mode_and_the_suffix_is_kept(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        path = atomic_write_text("x", tmp_path / "sub" / "a.txt")  # the folder is created
    finally:
        os.umask(umask)
    assert path.read_text() == "x" and (path.stat().st_mode & 0o777) == 0o644
    pending = PendingFile(tmp_path / "video.mp4")
    assert pending.path.parent == tmp_path and pending.path.suffix == ".mp4"
    assert is_temporary(pending.path.name)
    pending.path.write_bytes(b"frames")
    assert pending.commit().read_bytes() == b"frames" and leftovers(tmp_path) == []
    discarded = PendingFile(tmp_path / "video.mp4")
    discarded.path.write_bytes(b"other")
    discarded.discard()
    assert (tmp_path / "video.mp4").read_bytes() == b"frames" and leftovers(tmp_path) == []


def test_atomic_folder_publishes_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "entry"
    with pytest.raises(RuntimeError), atomic_folder(target) as folder:
        (folder / "a").write_text("a")
        raise RuntimeError("interrupted")
    assert not target.exists() and os.listdir(tmp_path) == []

    with atomic_folder(target) as folder:
        (folder / "a").write_text("first")
    with pytest.raises(FolderExistsError), atomic_folder(target) as folder:  # the first one wins
        (folder / "a").write_text("second")
    assert (target / "a").read_text() == "first" and os.listdir(tmp_path) == ["entry"]

    with atomic_folder(target, replace=True) as folder:
        (folder / "b").write_text("replaced")
    assert sorted(os.listdir(target)) == ["b"] and os.listdir(tmp_path) == ["entry"]


# ------------------------------------------------------------------------------------------- digests


@pytest.fixture
def counted() -> Iterator[mock.MagicMock]:
    """Counts the files actually read; starts with nothing remembered in this process."""
    digests.forget_in_process()
    with mock.patch.object(digests, "file_sha256", wraps=digests.file_sha256) as spy:
        yield spy
    digests.forget_in_process()


@pytest.fixture
def not_racy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Files just written may be remembered (tests sleep a tick before changing one)."""
    monkeypatch.setattr(digests, "RACY_SECONDS", 0.0)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_digests_are_remembered_until_the_stat_changes(
    tmp_path: Path, counted: mock.MagicMock, not_racy: None
) -> None:
    path = tmp_path / "image.png"
    path.write_bytes(b"a" * 1000)
    memo_dir = tmp_path / "cache"
    with DigestMemo(memo_dir, tmp_path) as memo:
        assert memo.digest(path) == (1000, sha(b"a" * 1000))
        assert memo.digest(path) == (1000, sha(b"a" * 1000))
    assert counted.call_count == 1 and memo_file(memo_dir, tmp_path).is_file()

    digests.forget_in_process()  # a later run: only the memo on disk
    with DigestMemo(memo_dir, tmp_path) as memo:
        assert memo.digest(path).sha256 == sha(b"a" * 1000)
    assert counted.call_count == 1

    # Same size, mtime restored (as cp -p, rsync -t or touch -d leave it): the new ctime gives it away.
    before = path.stat()
    time.sleep(TICK)
    path.write_bytes(b"b" * 1000)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_ino) == (
        before.st_size, before.st_mtime_ns, before.st_ino)
    with DigestMemo(memo_dir, tmp_path) as memo:
        assert memo.digest(path).sha256 == sha(b"b" * 1000)
    assert counted.call_count == 2

    replaced = tmp_path / "other"  # another file renamed over it: another inode
    replaced.write_bytes(b"c" * 1000)
    os.utime(replaced, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(replaced, path)
    digests.forget_in_process()
    with DigestMemo(memo_dir, tmp_path) as memo:
        assert memo.digest(path).sha256 == sha(b"c" * 1000)
    assert counted.call_count == 3


def test_racy_files_are_not_remembered(tmp_path: Path, counted: mock.MagicMock) -> None:
    path = tmp_path / "fresh"
    path.write_bytes(b"just written")
    with DigestMemo(tmp_path / "cache", tmp_path) as memo:
        memo.digest(path)
        memo.digest(path)
    assert counted.call_count == 2  # its timestamp tick may not be over: a same-size rewrite could hide
    assert not (tmp_path / "cache").exists()  # nothing to remember, nothing written


def test_a_corrupt_memo_is_ignored_and_rewritten(
    tmp_path: Path, counted: mock.MagicMock, not_racy: None
) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"content")
    memo_dir = tmp_path / "cache"
    stored = memo_file(memo_dir, tmp_path)
    stored.parent.mkdir(parents=True)
    for garbage in (b"{not json", b"[]", json.dumps({"format": "nerf-lightning file digests", "version": 1,
                                                      "scope": str(tmp_path), "files": {str(path): [1, 2]}})
                    .encode()):
        stored.write_bytes(garbage)
        digests.forget_in_process()
        with DigestMemo(memo_dir, tmp_path) as memo:
            assert memo.digest(path) == (7, sha(b"content"))
        document = json.loads(stored.read_text())
        assert document["files"][str(path)][-1] == sha(b"content")
    assert counted.call_count == 3


def test_a_lying_memo_is_not_trusted_when_the_stat_differs(
    tmp_path: Path, counted: mock.MagicMock, not_racy: None
) -> None:
    path = tmp_path / "data"
    path.write_bytes(b"content")
    memo_dir = tmp_path / "cache"
    with DigestMemo(memo_dir, tmp_path) as memo:
        memo.digest(path)
    stored = memo_file(memo_dir, tmp_path)
    document = json.loads(stored.read_text())
    entry = document["files"][str(path)]
    for lie in ([entry[0], entry[1] + 1, *entry[2:-1], "0" * 64],  # another mtime: not trusted
                [*entry[:-1], "z" * 64]):  # not a digest: ignored
        document["files"][str(path)] = lie
        stored.write_text(json.dumps(document))
        digests.forget_in_process()
        with DigestMemo(memo_dir, tmp_path) as memo:
            assert memo.digest(path).sha256 == sha(b"content")
    assert counted.call_count == 3


def test_memos_merge_prune_and_never_fail(tmp_path: Path, counted: mock.MagicMock, not_racy: None) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"a")
    b.write_bytes(b"b")
    memo_dir = tmp_path / "cache"
    first, second = DigestMemo(memo_dir, tmp_path), DigestMemo(memo_dir, tmp_path)  # two processes
    first.digest(a)
    first.save()
    digests.forget_in_process()
    second.digest(b)
    second.save()  # merged with what the first wrote
    assert set(json.loads(memo_file(memo_dir, tmp_path).read_text())["files"]) == {str(a), str(b)}

    a.unlink()
    c = tmp_path / "c"
    c.write_bytes(b"c")
    with DigestMemo(memo_dir, tmp_path) as memo:
        memo.digest(c)
    assert set(json.loads(memo_file(memo_dir, tmp_path).read_text())["files"]) == {str(b), str(c)}

    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the memo folder should be")
    digests.forget_in_process()
    with DigestMemo(blocker, tmp_path) as memo:  # cannot be written: only costs hashing next time
        assert memo.digest(c) == file_sha256(c)
    assert blocker.read_text().startswith("a file")
