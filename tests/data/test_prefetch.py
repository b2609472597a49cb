"""Training batches prefetched on a background thread (``nerf_lightning/data/prefetch.py``): made on another
thread while the caller works, served only for an equal key, failures raised on the caller, and fits that
are bitwise the same with prefetching on or off, resumed or not, with the wait logged by ``Telemetry``."""

from __future__ import annotations

import json
import pickle
import threading
import traceback
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.data.prefetch import Prefetcher
from tests.helpers.runs import RUN, short_run_args


# ------------------------------------------------------------------------------------ the prefetcher
def test_the_next_result_is_made_on_another_thread_while_the_caller_works() -> None:
    prefetcher: Prefetcher[int, tuple[int, int]] = Prefetcher()
    started, release = threading.Event(), threading.Event()

    def job() -> tuple[int, int]:
        started.set()
        assert release.wait(timeout=60), "the caller never released the job"
        return 7, threading.get_ident()

    prefetcher.schedule(1, job)  # returns at once: the job waits for `release`, set only below
    assert started.wait(timeout=60)  # the job runs ...
    caller_work = sum(range(1000))  # ... while the caller does something else
    assert prefetcher.busy
    release.set()
    value, job_thread = prefetcher.request(1, lambda: pytest.fail("a scheduled key is not computed again"))
    assert (value, caller_work) == (7, 499500)
    assert job_thread != threading.get_ident()
    assert (prefetcher.hits, prefetcher.misses) == (1, 0)
    assert prefetcher.last_wait_s is not None and prefetcher.last_wait_s >= 0.0
    prefetcher.close()
    assert not prefetcher.busy
    assert pickle.loads(pickle.dumps(prefetcher)).request(1, lambda: (0, 0)) == (0, 0)  # an idle copy


def test_a_changed_key_misses_and_is_computed_on_the_caller() -> None:
    prefetcher: Prefetcher[tuple[int, int], int] = Prefetcher()
    threads: dict[str, int] = {}

    def stale() -> int:
        threads["stale"] = threading.get_ident()
        return 1

    def fresh() -> int:
        threads["fresh"] = threading.get_ident()
        return 2

    prefetcher.schedule((5, 1024), stale)
    assert prefetcher.request((5, 2048), fresh) == 2  # same position, another batch size
    assert threads["fresh"] == threading.get_ident()
    assert (prefetcher.hits, prefetcher.misses) == (0, 1)
    prefetcher.discard()  # waits for the stale job if it still ran: its result is never served
    assert prefetcher.request((5, 1024), fresh) == 2 and prefetcher.misses == 2
    prefetcher.close()


def _failing_read() -> int:
    raise OSError("the disk went away")


def test_an_exception_on_the_worker_is_raised_on_the_caller_with_its_traceback() -> None:
    prefetcher: Prefetcher[int, int] = Prefetcher()
    prefetcher.schedule(3, _failing_read)
    with pytest.raises(OSError, match="the disk went away") as raised:
        prefetcher.request(3, lambda: 0)
    frames = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert "_failing_read" in frames  # the worker's own frames, not only the caller's
    assert any("prefetch" in note for note in raised.value.__notes__)

    started = threading.Event()

    def failing_after_start() -> int:
        started.set()
        return _failing_read()

    prefetcher.schedule(4, failing_after_start)  # a job whose key no request asks for ...
    assert started.wait(timeout=60)
    with pytest.raises(OSError, match="the disk went away"):
        prefetcher.close()  # ... still fails loudly, here at the latest (close waits for a running job)
    assert prefetcher.request(4, lambda: 9) == 9  # raised once; the prefetcher works on


# ------------------------------------------------------------------------------ the data module
def _data(scene: Path, cache: Path, prefetch: bool, selection: str = "uniform") -> NerfDataModule:
    data = NerfDataModule(root=str(scene), cache_dir=str(cache), rays_per_batch=64, prefetch=prefetch,
                          pixel_selection=selection, error_map_resolution=4)  # type: ignore[arg-type]
    data.setup("fit")
    return data


def _same(a: RayBatch, b: RayBatch) -> bool:
    return (torch.equal(a.rays.origins, b.rays.origins) and torch.equal(a.rays.directions, b.rays.directions)
            and torch.equal(a.rgb, b.rgb) and a.pixel_indices is not None and b.pixel_indices is not None
            and torch.equal(a.pixel_indices, b.pixel_indices) and a.sampler_seed == b.sampler_seed)


@pytest.mark.parametrize("selection", ["uniform", "error"])
def test_the_data_module_serves_prefetched_batches_equal_to_unprefetched_ones(
        selection: str, device: torch.device, tiny_scene: Path, tmp_path: Path) -> None:
    """Each position's batch is the same with prefetching on or off, through a change of ``rays_per_batch``
    and (error selection) a move of the error map between steps; on the CPU the prefetched ones are served,
    on an accelerator (the pixels in its memory) every batch is made on the calling thread."""
    prefetched, direct = (_data(tiny_scene, tmp_path, flag, selection) for flag in (True, False))
    try:
        for position in range(6):
            if position == 3:
                for data in (prefetched, direct):
                    data.rays_per_batch = 48  # as SampleBudget does after a step
            batches = [data.train_batch(position, device) for data in (prefetched, direct)]
            assert _same(*batches), f"batch {position} differs"
            assert batches[0].rgb.shape == (prefetched.rays_per_batch, 3)
            for data, batch in zip((prefetched, direct), batches, strict=True):
                errors = batch.rgb.mean(dim=1)  # [R] any per-ray errors, the same for both
                data.observe_ray_errors(batch, errors)
                assert data.data_wait_s is not None and data.data_wait_s >= 0.0
        if selection == "error":
            assert prefetched.error_map is not None and direct.error_map is not None
            assert torch.equal(prefetched.error_map.errors, direct.error_map.errors)
        prefetched_batches = 5 if device.type == "cpu" else 0  # on the CPU: all but the first
        assert (prefetched._prefetcher.hits, prefetched._prefetcher.misses) == (prefetched_batches,
                                                                                6 - prefetched_batches)
        assert direct._prefetcher.hits == 0 and direct._prefetcher.misses == 6
    finally:
        prefetched.teardown("fit")
        direct.teardown("fit")


# -------------------------------------------------------------------------------------- real fits
def _fit(scene: Path, out: Path, steps: int, *extra: str) -> tuple[Path, NerfDataModule]:
    cli = run_lightning_cli(["fit", *short_run_args(scene, out, "--checkpoint.every_n_train_steps", "1",
                                                    "--trainer.limit_val_batches", "0",
                                                    "--trainer.accelerator", "cpu",  # bitwise: on the CPU
                                                    *extra, steps=steps)])
    return out / RUN / "checkpoints" / "last.ckpt", cli.datamodule


def _assert_same_parameters(got: Path, want: Path) -> None:
    mine = torch.load(got, map_location="cpu", weights_only=True)
    theirs = torch.load(want, map_location="cpu", weights_only=True)
    assert mine["global_step"] == theirs["global_step"]
    assert mine["state_dict"].keys() == theirs["state_dict"].keys()
    for name, value in theirs["state_dict"].items():
        assert torch.equal(mine["state_dict"][name], value), f"{name} differs"


@pytest.fixture(scope="module")
def uniform_fits(tiny_scene: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Path]:
    """6-step fits of the demo config (SampleBudget resizes every batch, Telemetry on) with prefetching on
    and off: their last checkpoints."""
    fits = {}
    for prefetch in (True, False):
        checkpoint, data = _fit(tiny_scene, tmp_path_factory.mktemp(f"prefetch-{prefetch}"), 6,
                                "--data.prefetch", str(prefetch).lower())
        assert data._prefetcher.hits == (5 if prefetch else 0)  # every batch after the first was prefetched
        fits[prefetch] = checkpoint
    return fits


@pytest.mark.slow
def test_a_fit_is_bitwise_the_same_with_prefetching_on_or_off(uniform_fits: dict[bool, Path]) -> None:
    _assert_same_parameters(uniform_fits[True], uniform_fits[False])


@pytest.mark.slow
def test_error_selection_is_bitwise_the_same_with_prefetching_on_or_off(tiny_scene: Path,
                                                                       tmp_path: Path) -> None:
    runs = {}
    for prefetch in (True, False):
        runs[prefetch], data = _fit(tiny_scene, tmp_path / str(prefetch), 6, "--data.prefetch",
                                    str(prefetch).lower(), "--data.pixel_selection", "error",
                                    "--data.error_map_resolution", "4")
        assert data._prefetcher.hits == (5 if prefetch else 0)  # prefetched after the map moved
    _assert_same_parameters(runs[True], runs[False])
    maps = [torch.load(runs[flag], map_location="cpu", weights_only=True)["NerfDataModule"]["error_map"]
            for flag in (True, False)]
    assert torch.equal(maps[0]["errors"], maps[1]["errors"])


@pytest.mark.slow
def test_a_resumed_fit_with_prefetching_equals_an_uninterrupted_one(
        uniform_fits: dict[bool, Path], tiny_scene: Path, tmp_path: Path) -> None:
    partial, _ = _fit(tiny_scene, tmp_path, 3, "--data.prefetch", "true")
    assert torch.load(partial, map_location="cpu", weights_only=True)["global_step"] == 3
    resumed, data = _fit(tiny_scene, tmp_path, 6, "--data.prefetch", "true", "--ckpt_path", str(partial))
    assert resumed == partial  # the run goes on in its folder
    assert data._prefetcher.hits == 2  # steps 5 and 6: the first batch after the resume is made anew
    _assert_same_parameters(resumed, uniform_fits[True])


@pytest.mark.slow
def test_telemetry_logs_the_wait_for_data_per_step(uniform_fits: dict[bool, Path]) -> None:
    run = uniform_fits[True].parents[1]
    records = [json.loads(line) for line in (run / "telemetry.jsonl").read_text().splitlines()]
    assert [r["global_step"] for r in records] == list(range(1, 7))
    assert all(r["data_wait"] >= 0.0 for r in records)
    assert all(r["data_wait"] <= r["data"] for r in records[1:])  # a part of the data stage (measured)
    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    events.Reload()
    waits = [e.value for e in events.Scalars("telemetry/ms_data_wait")]
    assert waits == pytest.approx([1000.0 * r["data_wait"] for r in records], rel=1e-5)  # one step per log
