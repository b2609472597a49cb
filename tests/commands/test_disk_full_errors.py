"""A full disk is one line and exit code 4 from every command (nerf_lightning.commands.errors.report): a
DiskFullError of the package's writers, and an ENOSPC met by a writer of its own, TensorBoard's event
writer included, whose background thread then prints no traceback."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from nerf_lightning.commands.errors import DISK_FULL_EXIT, report
from nerf_lightning.files import DiskFullError, atomic_write_bytes
from tests.helpers.small_disk import fill, small_filesystem


def _reported(run: object) -> tuple[int, list[str]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = report(None, run)  # type: ignore[arg-type]
    return code, err.getvalue().splitlines()


def test_a_package_writer_on_a_full_disk_is_one_line_and_exit_code_4(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "disk", 1 << 20) as disk:
        def run() -> int:
            atomic_write_bytes(b"x" * (2 << 20), disk / "preview.png")
            return 0

        code, lines = _reported(run)
    assert code == DISK_FULL_EXIT == 4
    assert len(lines) == 1 and lines[0].startswith(f"nerf-lightning: {disk / 'preview.png'}: no space left")


def test_a_bug_keeps_its_traceback() -> None:
    with pytest.raises(RuntimeError, match="a bug"):
        report(None, lambda: (_ for _ in ()).throw(RuntimeError("a bug")))


def test_tensorboards_event_writer_on_a_full_disk_is_one_line_without_a_thread_traceback(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Its thread writes the events and dies of ENOSPC; the writer raises that error again at its next
    call: one line naming the events file, none of the thread's traceback."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    with small_filesystem(tmp_path / "disk", 1 << 20) as disk:
        writer = EventFileWriter(str(disk / "tb"), flush_secs=0)
        (events,) = (disk / "tb").iterdir()
        fill(disk)
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag="loss", simple_value=1.0)])

        def run() -> int:
            for step in range(100_000):
                writer.add_event(event_pb2.Event(step=step, summary=summary))
            return 0

        code, lines = _reported(run)
        writer._async_writer._worker.join()  # its excepthook has run
    assert code == DISK_FULL_EXIT
    assert lines == [f"nerf-lightning: {events}: no space left on device: 0 bytes free there"]
    assert "Exception in thread" not in capfd.readouterr().err


def test_a_thread_that_died_of_a_full_disk_unseen_by_the_command_is_still_said(tmp_path: Path) -> None:
    import threading

    error = DiskFullError(tmp_path / "events.log", free=0, kept=False)

    def run() -> int:
        def fail() -> None:
            raise error

        thread = threading.Thread(target=fail)
        thread.start()
        thread.join()
        return 0

    code, lines = _reported(run)
    assert code == DISK_FULL_EXIT and lines == [f"nerf-lightning: {error}"]
