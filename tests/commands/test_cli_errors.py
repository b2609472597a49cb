"""One-line errors for broken checkpoints and for constructors that refuse their arguments.

Every command that loads a checkpoint (fit --ckpt_path, validate, test, predict, render, export)
reports a truncated or corrupt file, or one that weights-only loading refuses, as one
``nerf-lightning: FILE: ...`` line on stderr with exit code 2, leaving the file as it was. A
sampler's (built-in or plugin), a field's, a callback's or the model's ``ValueError`` for a bad
argument is one ``nerf-lightning: KEY (Class): message`` line instead of a jsonargparse traceback.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from nerf_lightning.cli import main
from nerf_lightning.runs.checkpoint_io import AtomicCheckpointIO, CheckpointError, load_checkpoint_file
from tests.helpers.runs import short_run_args


class Payload:
    """A class a pickled checkpoint can reference: weights-only loading refuses to build it."""


class BrokenCallback(pl.Callback):
    """A callback whose constructor has a bug (not a ValueError): its traceback must stay."""

    def __init__(self) -> None:
        raise RuntimeError("a bug in a callback")


def _error_line(err: str) -> str:
    """The one ``nerf-lightning`` line of ``err``; fails on a traceback or more than one line."""
    assert "Traceback" not in err and "Expected a <class" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("nerf-lightning")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def run_copy(tiny_run: Path, tmp_path: Path) -> Path:
    """A copy of ``tiny_run``'s run folder (``config.yaml``, ``checkpoints/last.ckpt``)."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    shutil.copy(tiny_run / "config.yaml", run / "config.yaml")
    shutil.copy(tiny_run / "checkpoints" / "last.ckpt", run / "checkpoints" / "last.ckpt")
    return run


@pytest.fixture
def truncated(run_copy: Path) -> Path:
    """``last.ckpt`` cut to its first 4,000 bytes, in the run's ``checkpoints/``."""
    path = run_copy / "checkpoints" / "truncated.ckpt"
    path.write_bytes((run_copy / "checkpoints" / "last.ckpt").read_bytes()[:4000])
    return path


@pytest.fixture(params=["os.system", "instance"])
def pickled(run_copy: Path, request: pytest.FixtureRequest) -> Path:
    """A real checkpoint that also holds a pickled callable (``os.system``) or a test-module object."""
    checkpoint = torch.load(run_copy / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    checkpoint["hook"] = os.system if request.param == "os.system" else Payload()
    path = run_copy / "checkpoints" / "pickled.ckpt"
    torch.save(checkpoint, path)
    return path


def _lightning(command: str, scene: Path, out: Path, *extra: str) -> int:
    return main([command, *short_run_args(scene, out, "--eval_report.lpips", "false", *extra)])


@pytest.mark.parametrize("command", ["test", "validate", "predict", "fit"])
@pytest.mark.slow
def test_truncated_checkpoint_is_one_line_for_every_lightning_command(
    command: str, truncated: Path, tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = truncated.read_bytes()
    out = tmp_path / "out"
    assert _lightning(command, tiny_scene, out, "--ckpt_path", str(truncated)) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"nerf-lightning: {truncated}: not a readable checkpoint: expected a complete "
                           "torch.save archive, but the file (4000 bytes) is truncated or corrupt"), line
    assert truncated.read_bytes() == before
    assert not out.exists()  # refused before anything was written: no run folder, none in the run's
    assert sorted(p.name for p in truncated.parents[1].iterdir()) == ["checkpoints", "config.yaml"]


@pytest.mark.parametrize("command", ["render", "export"])
@pytest.mark.slow
def test_truncated_checkpoint_is_one_line_for_render_and_export(
    command: str, truncated: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = truncated.read_bytes()
    out = tmp_path / ("video.gif" if command == "render" else "field.npz")
    extra = ["--frames", "1"] if command == "render" else ["--format", "grid", "--resolution", "8"]
    assert main([command, "--ckpt_path", str(truncated), "--out", str(out), *extra]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"nerf-lightning: {truncated}: not a readable checkpoint"), line
    assert "truncated or corrupt" in line
    assert truncated.read_bytes() == before
    assert not out.exists()


@pytest.mark.slow
def test_refused_pickled_checkpoint_is_one_line_and_loads_when_trusted(
    pickled: Path, tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = pickled.read_bytes()
    assert _lightning("test", tiny_scene, tmp_path / "out", "--ckpt_path", str(pickled)) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"nerf-lightning: {pickled}: refused by weights-only loading: expected only "
                           "tensors and plain values, found the pickled Python object "), line
    assert line.endswith("(nothing in the file was run); if you trust the file, "
                         "load it with --weights_only false"), line
    assert pickled.read_bytes() == before
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in pickled.parents[1].iterdir()) == ["checkpoints", "config.yaml"]
    # The way out the line names works: a trusted file loads with --weights_only false.
    assert _lightning("test", tiny_scene, tmp_path / "out", "--ckpt_path", str(pickled),
                      "--weights_only", "false") == 0
    # A checkpoint of a run folder: the test went into RUN/test, beside the run it scored.
    assert (pickled.parents[1] / "test" / "run.json").is_file() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["render", "export"])
@pytest.mark.slow
def test_refused_pickled_checkpoint_is_one_line_for_render_and_export(
    command: str, run_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = torch.load(run_copy / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    checkpoint["hook"] = os.system
    pickled = run_copy / "checkpoints" / "pickled.ckpt"
    torch.save(checkpoint, pickled)
    before = pickled.read_bytes()
    out = tmp_path / ("video.gif" if command == "render" else "field.npz")
    extra = ["--frames", "1"] if command == "render" else ["--format", "grid", "--resolution", "8"]
    assert main([command, "--ckpt_path", str(pickled), "--out", str(out), *extra]) == 2
    line = _error_line(capsys.readouterr().err)
    assert line.startswith(f"nerf-lightning: {pickled}: refused by weights-only loading"), line
    assert line.endswith("if you trust the file, load it with --weights_only false")
    assert pickled.read_bytes() == before and not out.exists()
    trusted = [command, "--ckpt_path", str(pickled), "--out", str(out), *extra, "--weights_only", "false"]
    assert main(trusted) == 0
    assert out.is_file()


@pytest.mark.slow
def test_lightning_loads_through_the_same_helper(truncated: Path) -> None:
    """The trainer's own load (the checkpoint connector calls strategy.load_checkpoint, which calls
    checkpoint_io.load_checkpoint) raises the same one-line error."""
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, plugins=[AtomicCheckpointIO()])
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        trainer.strategy.load_checkpoint(truncated, weights_only=True)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "not a readable checkpoint: expected a complete torch.save archive, but the file is empty"),
        (b"not a checkpoint\n", "not a readable checkpoint: expected a complete torch.save archive, "
         "but the file (17 bytes) is truncated or corrupt"),
        ("tensor", "not a Lightning checkpoint: expected a dict with a 'state_dict', found a Tensor"),
        ("dict", "not a Lightning checkpoint: expected a dict with a 'state_dict', "
         "found a dict with keys step"),
        ("directory", "is a directory; expected a checkpoint file"),
    ],
)
def test_load_checkpoint_file_names_the_file_and_what_was_expected(tmp_path: Path, content: bytes | str,
                                                                   message: str) -> None:
    path = tmp_path / "x.ckpt"
    if content == "tensor":
        torch.save(torch.zeros(2), path)
    elif content == "dict":
        torch.save({"step": 1}, path)
    elif content == "directory":
        path.mkdir()
    else:
        assert isinstance(content, bytes)
        path.write_bytes(content)
    with pytest.raises(CheckpointError) as raised:
        load_checkpoint_file(path)
    assert str(raised.value).startswith(f"{path}: {message}") and "\n" not in str(raised.value)
    with pytest.raises(FileNotFoundError, match=r"missing\.ckpt: no such checkpoint"):
        load_checkpoint_file(tmp_path / "missing.ckpt")


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (("--model.sampler", "OccupancyGrid", "--model.sampler.explore_fraction", "2"),
         "nerf-lightning: model.sampler (OccupancyGrid): explore_fraction must be in (0, 1], got 2.0"),
        (("--model.eval_chunk_samples", "0"),
         "nerf-lightning: model (NerfModule): eval_chunk_samples must be a positive number of samples or "
         "null, got 0"),
        (("--eval_report.worst_k", "-1"),
         "nerf-lightning: eval_report (EvalReport): worst_k must be an integer >= 0, got -1"),
        (("--data.rays_per_batch", "0"),
         "nerf-lightning: data (NerfDataModule): rays_per_batch must be a positive integer, got 0"),
        (("--model.field", "HashGridField", "--model.field.contraction", "sphere"),
         "nerf-lightning: model.field (HashGridField): contraction must be one of none, l2, linf, "
         "got 'sphere'"),
        (("--trainer.callbacks+=nerf_lightning.callbacks.SampleBudget", "--trainer.callbacks.smoothing=2"),
         "nerf-lightning: trainer.callbacks[4] (SampleBudget): smoothing must be in (0, 1], got 2.0"),
    ],
)
@pytest.mark.slow
def test_constructor_value_error_is_one_line(tiny_scene: Path, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             extra: tuple[str, ...], expected: str) -> None:
    out = tmp_path / "out"
    assert main(["fit", *short_run_args(tiny_scene, out, *extra, sampler_args=())]) == 2
    assert _error_line(capsys.readouterr().err) == expected
    assert not out.exists()


@pytest.mark.slow
def test_plugin_sampler_value_error_is_one_line(tiny_scene: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("nerf_lightning_disparity")
    args = short_run_args(tiny_scene, tmp_path / "out", sampler_args=(
        "--model.sampler=Disparity", "--model.sampler.min_near=0"))
    assert main(["fit", *args]) == 2
    assert _error_line(capsys.readouterr().err) == (
        "nerf-lightning: model.sampler (Disparity): min_near must be > 0, got 0.0")


@pytest.mark.slow
def test_render_override_value_error_is_one_line(tiny_run: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "video.gif"
    assert main(["render", "--ckpt_path", str(tiny_run / "checkpoints" / "last.ckpt"), "--out", str(out),
                 "--model.sampler.explore_fraction", "2"]) == 2
    assert _error_line(capsys.readouterr().err) == (
        "nerf-lightning: model.sampler (OccupancyGrid): explore_fraction must be in (0, 1], got 2.0")
    assert not out.exists()


@pytest.mark.slow
def test_a_constructor_bug_keeps_its_traceback(tiny_scene: Path, tmp_path: Path) -> None:
    """Only ValueErrors are argument errors: any other exception of a constructor still propagates."""
    args = short_run_args(tiny_scene, tmp_path / "out", f"--trainer.callbacks+={__name__}.BrokenCallback")
    with pytest.raises(Exception) as raised:
        main(["fit", *args])
    chain, error = [], raised.value
    while error is not None:
        chain.append(error)
        error = error.__cause__ or error.__context__
    assert any(isinstance(error, RuntimeError) and str(error) == "a bug in a callback" for error in chain)
