"""Data-parallel training in real processes: 2 CPU ranks (gloo) launched by Lightning itself.

One 2-rank run (module fixture) is inspected from every side: identical parameters, sampler
buffers, error maps and batch sizes on both ranks, rank-distinct rays, one run folder (rank 0's), and
validation/test metrics equal to a single process's on the same checkpoint (an odd number of
views, so padding would count one twice), its test run by the same ranks once the fit is done
(``tests/helpers/dist_fit_then_test.py``: one launch instead of two); where a browser can run, it
watches that run through rank 0's viewer. Then a 2-rank run loses rank 1 to SIGKILL, which ends
rank 0 with one line naming it, and is resumed in its run folder, to the watched run's parameters.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.commands.base import WARM_PRELOAD
from nerf_lightning.core.warm_start import WarmStarter
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.runs.record import load_run_record
from tests.helpers.dist_fit_then_test import FIT_DONE, THEN_TEST
from tests.helpers.runs import REPO, RUN, kill_at_step, short_run_args

pytestmark = [
    pytest.mark.slow,  # every test trains in processes of its own
    pytest.mark.skipif(not torch.distributed.is_available(), reason="needs torch.distributed"),
]

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
       "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
STEPS = 10
FIT_THEN_TEST = "tests.helpers.dist_fit_then_test"
"""``python -m`` this: ``fit``, then ``test`` in the same ranks (``tests/helpers/dist_fit_then_test.py``)."""
SAMPLER = ("--model.sampler=tests.helpers.ddp.StampedOccupancyGrid", "--model.sampler.resolution", "16",
           "--model.sampler.update_every", "2", "--model.sampler.warmup_steps", "2",
           "--model.sampler.steps_per_diagonal", "64", "--model.sampler.occupancy_threshold", "0.08")


def _args(scene: Path, out: Path, *extra: str) -> list[str]:
    """A short CPU run with grid updates every 2 steps (random cells after step 2), 64 steps per grid
    diagonal (not 512: cheaper renders; the occupancy threshold 8 times 0.01 to match), error-driven
    pixels, SampleBudget (from the demo config), every view validated once at the end."""
    return short_run_args(scene, out, "--data.steps_per_epoch", str(STEPS), "--data.pixel_selection", "error",
                          "--trainer.limit_val_batches", "1.0", "--trainer.limit_test_batches", "1.0",
                          "--checkpoint.every_n_train_steps", "1", "--trainer.accelerator", "cpu", *extra,
                          steps=STEPS, sampler_args=SAMPLER)


def _ddp(*args: str) -> list[str]:
    return [*args, "--config", str(REPO / "configs" / "ddp.yaml"), "--trainer.accelerator", "cpu",
            "--trainer.devices", "2"]  # after the overlay, which sets the accelerator and devices


def _dump(directory: Path) -> list[str]:
    return ["--trainer.callbacks+=tests.helpers.ddp.DumpRankState",
            "--trainer.callbacks.dirpath", str(directory)]


def _run(command: str, *args: str, timeout: float = 240, module: str = "nerf_lightning",
         env: dict[str, str] = ENV) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", module, command, *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _run_warm(starter: WarmStarter, log: Path, *args: str, timeout: float = 240) -> tuple[int, str]:
    """``python -m nerf_lightning ARGS`` started by ``starter``: its exit code and what it printed (stdout
    and stderr, its ranks' too)."""
    with log.open("wb") as output:
        process = starter.start(args, output, ENV)
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return code, log.read_text()


def _state(checkpoint: Path) -> dict[str, torch.Tensor]:
    return torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]


def _assert_equal_states(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    different = [name for name in a if not torch.equal(a[name], b[name])]
    assert not different, f"differ: {different}"


@pytest.fixture(scope="module")
def odd_scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo scene at 24x24 with 8 train and 3 (odd) val and test views."""
    return make_demo_scene(tmp_path_factory.mktemp("odd") / "demo", num_train=8, num_val=3, num_test=3,
                           resolution=24)


def _browser_missing() -> str | None:
    from tests.helpers.browser import browser_missing

    return browser_missing()


@dataclass(frozen=True)
class DdpRun:
    out: Path
    """``--trainer.default_root_dir``: the fit's run folder is ``OUT/run`` and nothing else is there."""
    dump: Path
    """Each rank's state at the end (``tests.helpers.ddp.DumpRankState``), kept outside ``out``."""
    test_out: Path
    """The 2-rank test's ``--trainer.default_root_dir``: never made, the test writes into ``OUT/run``."""
    stderr: str
    watched: bool
    """Whether a browser watched it (where Chromium, Playwright and viser are installed)."""


@pytest.fixture(scope="module")
def ddp_run(odd_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> DdpRun:
    """The 2-rank run every test inspects, whose ranks then test its ``last.ckpt`` (into ``OUT/run/test``;
    ``tests/helpers/dist_fit_then_test.py``); where a browser can run, watched by one through rank 0's
    viewer for 3 of its steps (``tests/helpers/ddp.py``), which makes it also the test that watching
    changes nothing: the killed and resumed run, never watched, must end with the same parameters."""
    out, dump = tmp_path_factory.mktemp("ddp"), tmp_path_factory.mktemp("ddp_dump")
    test_out = tmp_path_factory.mktemp("ddp_test") / "out"
    args = _ddp(*_args(odd_scene, out, *_dump(dump)))
    checkpoint = out / RUN / "checkpoints" / "last.ckpt"
    env = {**ENV, THEN_TEST: json.dumps(_ddp(*_args(odd_scene, test_out, "--ckpt_path", str(checkpoint))))}
    if _browser_missing() is not None:
        return DdpRun(out, dump, test_out, _run("fit", *args, module=FIT_THEN_TEST, env=env).stderr,
                      watched=False)
    from playwright.sync_api import sync_playwright

    from tests.helpers.browser import CHROMIUM_ARGS, chromium_path

    args += ["--viewer.enabled", "true", "--viewer.port", "0",
             "--trainer.callbacks+=tests.helpers.ddp.HoldUntilWatched", "--trainer.callbacks.frames", "3",
             "--trainer.callbacks.from_step", "4"]
    # The browser starts first: beside two training ranks its start-up took most of a minute.
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        process = subprocess.Popen([sys.executable, "-m", FIT_THEN_TEST, "fit", *args], env=env, cwd=REPO,
                                   stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                   start_new_session=True)
        assert process.stderr is not None
        lines, url = [], None
        try:
            for line in process.stderr:  # until rank 0 announces its viewer
                lines.append(line)
                if line.startswith("viewer: http"):
                    url = line.split()[1]
                    break
            assert url is not None, "".join(lines)[-3000:]
            browser.new_page(viewport={"width": 640, "height": 480}).goto(url)
            for line in process.stderr:  # until the fit is over (rank 0's viewer closed), the browser open
                lines.append(line)
                if line.startswith(FIT_DONE):
                    break
        except BaseException:
            os.killpg(process.pid, signal.SIGKILL)  # both ranks
            raise
        finally:
            browser.close()  # its page draws on the CPU while open: not beside the test
    lines += process.stderr.readlines()
    assert process.wait(60) == 0, "".join(lines)[-3000:]
    return DdpRun(out, dump, test_out, "".join(lines), watched=True)


def test_ranks_hold_identical_parameters_and_sampler_state_with_distinct_rays(ddp_run: DdpRun) -> None:
    ranks = [torch.load(ddp_run.dump / f"rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2] and [r["global_step"] for r in ranks] == [STEPS] * 2
    zero, one = ranks
    _assert_equal_states(zero["state_dict"], one["state_dict"])  # parameters and every buffer
    grid = zero["state_dict"]
    assert (grid["sampler.occupancy"] >= 0).all() and 0 < grid["sampler.occupied"].float().mean() < 1
    # The stamp is written from the local rank at each update: rank 0's value everywhere shows
    # that updated buffers are broadcast, not merely computed alike.
    assert grid["sampler.stamp"].tolist() == [0, STEPS - 2] == one["state_dict"]["sampler.stamp"].tolist()
    errors = [r["datamodule"]["error_map"]["errors"] for r in ranks]
    assert torch.equal(errors[0], errors[1]) and errors[0].unique().numel() > 100  # moved, identically
    assert zero["budget"] == one["budget"] and zero["budget"]["world_size"] == 2
    assert zero["rays_per_batch"] == one["rays_per_batch"]
    # Rays differ between ranks (the rank is part of their seed) but not between runs.
    pixels = [r["first_batch"]["pixels"] for r in ranks]
    assert pixels[0].shape == pixels[1].shape and not torch.equal(pixels[0], pixels[1])
    # The one checkpoint holds the ranks' common state.
    checkpoint = ddp_run.out / RUN / "checkpoints" / "last.ckpt"
    _assert_equal_states(_state(checkpoint), zero["state_dict"])


def test_one_run_folder_checkpoint_folder_and_record(ddp_run: DdpRun) -> None:
    _assert_one_run_folder(ddp_run.out)
    run = ddp_run.out / RUN
    assert sorted(p.relative_to(ddp_run.out).as_posix() for p in ddp_run.out.rglob("run.json")) == [
        f"{RUN}/run.json", f"{RUN}/test/run.json"]  # the fit's and its 2-rank test's, both rank 0's
    assert [p.relative_to(ddp_run.out).as_posix() for p in ddp_run.out.rglob("checkpoints")] == [
        f"{RUN}/checkpoints"]
    record = load_run_record(run)
    assert record["status"] == "completed" and record["global_step"] == STEPS
    assert record["world_size"] == 2
    telemetry = (run / "telemetry.jsonl").read_text().splitlines()
    assert [json.loads(line)["global_step"] for line in telemetry] == list(range(1, STEPS + 1))  # rank 0's


def _assert_one_run_folder(out: Path) -> None:
    """``OUT`` holds the run folder ``OUT/run`` and nothing else: rank 1, which never claims a folder,
    made none of its own (none named ``pending``, the name it reads before rank 0's is broadcast)."""
    assert [p.name for p in out.iterdir()] == [RUN]
    assert not [p for p in out.rglob("*") if "pending" in p.name]


def _single_process(command: str, scene: Path, out: Path, checkpoint: Path) -> dict[str, Any]:
    cli = run_lightning_cli([command, *_args(scene, out, "--ckpt_path", str(checkpoint))])
    return {k: float(v) for k, v in cli.trainer.callback_metrics.items()}


def test_validation_and_test_metrics_equal_a_single_process_evaluation(
    ddp_run: DdpRun, odd_scene: Path, tmp_path: Path
) -> None:
    # A copy of the run folder, with its 2-rank test (RUN/test): evaluations of its checkpoint write
    # into it (RUN/validate, RUN/test-2...).
    run = shutil.copytree(ddp_run.out / RUN, tmp_path / RUN)
    checkpoint = run / "checkpoints" / "last.ckpt"
    single_val = _single_process("validate", odd_scene, tmp_path / "val", checkpoint)
    ddp_fit = load_run_record(run)["metrics"]["fit"]  # validated at the last step, 3 views over 2 ranks
    for name in ("val/psnr", "val/ssim"):
        assert ddp_fit[name] == pytest.approx(single_val[name], rel=1e-5, abs=1e-6), name

    # The 2-rank test wrote into the run folder it scored, in one folder (rank 0's claim), not OUT.
    assert not ddp_run.test_out.exists() and sorted(p.name for p in run.iterdir() if p.is_dir()) == [
        "checkpoints", "test", "validate"]
    ddp_test = load_run_record(run / "test")["metrics"]["test"]
    assert load_run_record(run)["metrics"]["test"] == ddp_test  # the fit's record shows its test
    single_test = _single_process("test", odd_scene, tmp_path / "test", checkpoint)
    assert (run / "test-2" / "run.json").is_file()  # a later test claims the next folder
    for name in ("test/psnr", "test/ssim"):
        assert ddp_test[name] == pytest.approx(single_test[name], rel=1e-5, abs=1e-6), name


def test_a_killed_rank_ends_rank_0_with_one_line_and_the_run_resumes_to_the_same_parameters(
    ddp_run: DdpRun, odd_scene: Path, tmp_path: Path
) -> None:
    out = tmp_path / "killed"
    killed_at = 3
    # Both 2-rank launches below are `python -m nerf_lightning fit` whose rank 0 is forked from one server
    # that imported torch and Lightning once (nerf_lightning.core.warm_start, as a pipeline starts its
    # stages): a process of its own (pid, signals, exit code), which starts rank 1 as a fresh interpreter.
    with WarmStarter("nerf_lightning", preload=WARM_PRELOAD) as starter:
        # Rank 1 SIGKILLs itself at the start of step 3, after the step-3 checkpoint: a lost peer at the
        # same moment every time, no polling from here. Rank 0 must not wait in a collective for it (the
        # timeout is far below gloo's), and ends with one line naming it and exit code 75.
        killed = _ddp(*_args(odd_scene, out, *kill_at_step(killed_at, rank=1)))
        code, printed = _run_warm(starter, tmp_path / "killed.log", "fit", *killed, timeout=120)
        assert code == 75, printed[-3000:]  # resumable, as a preempted fit
        last = out / RUN / "checkpoints" / "last.ckpt"
        [line] = [line for line in printed.splitlines() if line.startswith("nerf-lightning: data-parallel")]
        assert re.fullmatch(rf"nerf-lightning: data-parallel fit of 2 processes stopped at step {killed_at}: "
                            rf"rank 1 was killed by SIGKILL; the last checkpoint is {re.escape(str(last))} "
                            rf"\(step {killed_at}\); to resume, run the same command with --ckpt_path last",
                            line), line
        assert "Traceback" not in printed
        assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == killed_at
        _assert_one_run_folder(out)
        # The killed run's folder as it was, for the resume on one device below (the 2-rank resume
        # overwrites its last.ckpt).
        single = tmp_path / "single"
        shutil.copytree(out / RUN, single / RUN)

        code, printed = _run_warm(starter, tmp_path / "resumed.log", "fit",
                                  *_ddp(*_args(odd_scene, out, "--ckpt_path", "last")))  # as the line says
        assert code == 0, printed[-3000:]
    # The resumed run went on in the killed run's folder, which holds the final step's last.ckpt.
    _assert_one_run_folder(out)
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == STEPS
    assert len(list((out / RUN).glob("events.out.tfevents.*"))) == 2  # the killed fit's and the resumed one's
    # Same number of ranks: the resumed run continues exactly (the fixture run is its reference).
    _assert_equal_states(_state(ddp_run.out / RUN / "checkpoints" / "last.ckpt"), _state(last))

    # On one device instead of two: it resumes and finishes, with the same global batch.
    at_kill = single / RUN / "checkpoints" / "last.ckpt"
    budget = torch.load(at_kill, map_location="cpu", weights_only=True)["callbacks"]
    saved_rays = next(v for k, v in budget.items() if k.startswith("SampleBudget"))["rays_per_batch"]
    cli = run_lightning_cli(["fit", *_args(odd_scene, single, "--ckpt_path", str(at_kill),
                                           *_dump(single / "dump"))])
    assert cli.trainer.global_step == STEPS
    dump = torch.load(single / "dump" / "rank0.pt", weights_only=True)
    assert dump["first_batch"]["global_step"] == killed_at and dump["first_batch"]["rays"] == 2 * saved_rays


def test_a_browser_watched_rank_0_while_both_ranks_trained_in_step(ddp_run: DdpRun) -> None:
    """The viewer under data parallelism: only rank 0 serves (one URL), a browser got frames from it
    between steps, and the ranks ran the same steps to the same parameters (the first test), none held
    apart from the other."""
    if not ddp_run.watched:
        pytest.skip(f"viewer: {_browser_missing()}")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert sum(line.startswith("viewer: http") for line in ddp_run.stderr.splitlines()) == 1  # not rank 1
    events = EventAccumulator(str(ddp_run.out / RUN), size_guidance={"scalars": 0})
    events.Reload()
    assert max(event.value for event in events.Scalars("viewer/frames_sent")) >= 3


def test_camera_refinement_trains_on_both_ranks_though_it_sits_out_most_steps(odd_scene: Path,
                                                                               tmp_path: Path) -> None:
    """The corrections learn on steps 3 and 7 only (``start_step``, ``every``); DDP's reducer expects
    every parameter in every step's graph, so the other steps must still hand it one, and leave the
    corrections where they are: both ranks finish with the same, trained table."""
    dump = tmp_path / "dump"
    _run("fit", *_ddp(*_args(odd_scene, tmp_path / "out", "--model.camera_refinement=CameraRefinement",
                             "--model.camera_refinement.start_step=3", "--model.camera_refinement.every=4",
                             *_dump(dump))))
    states = [torch.load(dump / f"rank{r}.pt", weights_only=True)["state_dict"] for r in (0, 1)]
    tables = [state["camera_refinement.corrections"] for state in states]
    assert torch.equal(tables[0], tables[1]) and tables[0].shape == (8, 6)
    assert float(tables[0].abs().max()) > 0.0


def test_a_rank_that_meets_a_photo_past_the_models_codes_ends_the_test_with_the_other(odd_scene: Path,
                                                                                      tmp_path: Path) -> None:
    """A model with appearance codes for ``odd_scene``'s 8 training photos, tested by 2 ranks on a capture
    of 9 with every training photo scored: rank 0's share (photos 0, 2, 4, 6, 8) holds photo 8, which has
    no code, rank 1's (1, 3, 5, 7) does not. Both must still join the gather of the training scores: the
    test ends, its test views scored, its report saying why no training photo is."""
    larger = make_demo_scene(tmp_path / "larger", num_train=9, num_val=3, num_test=3, resolution=24)
    codes = ("--model.field.appearance_dim", "4")
    lean = ("--trainer.limit_val_batches", "0", "--eval_report.lpips", "false", "--eval_report.worst_k", "0")
    run_lightning_cli(["fit", *short_run_args(odd_scene, tmp_path / "fit", *codes, *lean, steps=3)])
    run = tmp_path / "fit" / RUN
    checkpoint = run / "checkpoints" / "last.ckpt"
    test = short_run_args(larger, tmp_path / "test", *codes, *lean, "--ckpt_path", str(checkpoint),
                          "--eval_report.train_views", "9")
    _run("test", *_ddp(*test), timeout=120)
    record = json.loads((run / "test" / "eval.json").read_text())
    skipped = record["train"]["skipped"]
    assert record["num_views"] == 3
    assert "training photo 8 has no row in its appearance codes (8 rows)" in skipped, skipped
