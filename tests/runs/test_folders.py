"""Run folders (``nerf_lightning/runs/folders.py``): claimed atomically by processes racing for one name,
named after what trained, taken by ``test`` and ``compare``, and never left behind by a failed command."""

from __future__ import annotations

import datetime as dt
import json
import multiprocessing
import re
from pathlib import Path

import pytest

from nerf_lightning.runs.folders import claim, default_run_name, last_checkpoint, run_folder_of, slug
from nerf_lightning.runs.record import load_run_record
from tests.helpers.runs import run_cli, short_run_args

RACERS = 16


def _claim_when_all_are_ready(root: str, barrier: multiprocessing.synchronize.Barrier,
                              results: multiprocessing.queues.Queue) -> None:
    barrier.wait()
    results.put(claim(Path(root), "scene-demo-20261202-120000").name)


@pytest.mark.slow
def test_processes_claiming_one_name_at_once_each_get_their_own_folder(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")  # the children start with this process's imports
    barrier, results = context.Barrier(RACERS), context.Queue()
    racers = [context.Process(target=_claim_when_all_are_ready, args=(str(tmp_path), barrier, results))
              for _ in range(RACERS)]
    for racer in racers:
        racer.start()
    names = [results.get(timeout=60) for _ in racers]
    for racer in racers:
        racer.join(timeout=60)
        assert racer.exitcode == 0
    name = "scene-demo-20261202-120000"
    expected = [name, *(f"{name}-{n}" for n in range(2, RACERS + 1))]
    assert sorted(names) == sorted(expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(expected)


def test_a_default_name_says_what_trained_on_what_and_when() -> None:
    when = dt.datetime(2026, 12, 2, 9, 5, 7)
    assert default_run_name("fern", "real-forward", when) == "fern-real-forward-20261202-090507"
    assert default_run_name("my scene (2)", None, when) == "my-scene-2-20261202-090507"
    assert default_run_name(None, None, when) == "20261202-090507"
    assert slug("../..") == "run"


def test_a_run_folder_names_its_last_checkpoint_and_a_checkpoint_its_run(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(FileNotFoundError, match=f"{run}: a folder without checkpoints/last.ckpt"):
        last_checkpoint(run)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    assert last_checkpoint(run) == run / "checkpoints" / "last.ckpt"
    assert run_folder_of(run / "checkpoints" / "last.ckpt") is None  # no run.json, no config.yaml: not a run
    (run / "config.yaml").write_text("seed_everything: 0\n")
    assert run_folder_of(run / "checkpoints" / "last.ckpt") == run


def _folders(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


@pytest.mark.slow
def test_a_fit_names_its_folder_and_tests_land_in_it_and_failures_leave_nothing(tiny_scene: Path,
                                                                               tmp_path: Path) -> None:
    out = tmp_path / "runs"
    fit = run_cli("fit", *short_run_args(tiny_scene, out, "--run_name", "null", steps=3))
    assert fit.returncode == 0, fit.stderr
    [name] = _folders(out)
    assert re.fullmatch(r"demo-demo-\d{8}-\d{6}", name), name  # the scene folder, the config, the time
    run = out / name
    assert (run / "checkpoints" / "last.ckpt").is_file() and (run / "run.json").is_file()

    # test takes the run folder, with no --config: it reads the run's; each test claims the next folder
    for _ in range(2):
        tested = run_cli("test", "--ckpt_path", str(run), "--trainer.enable_progress_bar", "false")
        assert tested.returncode == 0, tested.stderr
    assert [p.name for p in sorted(run.glob("test*"))] == ["test", "test-2"]
    second = json.loads((run / "test-2" / "run.json").read_text())
    assert second["status"] == "completed" and (run / "test-2" / "eval.json").is_file()
    assert load_run_record(run)["metrics"]["test"] == second["metrics"]["test"]  # what compare shows

    failed = run_cli("test", "--ckpt_path", str(run), "--data.root", str(tmp_path / "gone"))
    assert failed.returncode == 2 and "gone: not a folder" in failed.stderr
    assert [p.name for p in sorted(run.glob("test*"))] == ["test", "test-2"]  # nothing left, nothing replaced

    failed = run_cli("fit", *short_run_args(tmp_path / "gone", out, "--run_name", "null", steps=3))
    assert failed.returncode == 2
    assert _folders(out) == [name]

    taken = run_cli("fit", *short_run_args(tiny_scene, out, "--run_name", name, steps=3))
    assert taken.returncode == 2
    assert taken.stderr.strip().splitlines()[-1] == (
        f"nerf-lightning: --run_name {name}: {run} already holds a run; resume it with --ckpt_path {run}, "
        "or choose another --run_name")

    escaping = run_cli("fit", *short_run_args(tiny_scene, out, "--run_name", "../elsewhere", steps=3))
    assert escaping.returncode == 2
    assert escaping.stderr.strip().splitlines()[-1] == (
        "nerf-lightning: --run_name ../elsewhere: expected a folder name of letters, digits, '.', '_' "
        "and '-' (such as elsewhere)")
    assert _folders(out) == [name] and not (tmp_path / "elsewhere").exists()
