"""One benchmark run in one process: ``nerf-lightning fit`` and then ``test`` of its final weights.

    python -m benchmarks.fit_test [--train-views all|N] --config RUN_CONFIG --trainer.default_root_dir OUT
        [--run_name NAME] [fit options]

The fit writes into the run folder ``OUT/NAME`` (``--run_name``, ``run`` unless given: a new folder,
which the fit refuses to reuse), the test of its ``last.ckpt`` into ``OUT/NAME/test``; the process's
peak memory at the end of ``fit`` (resident set on a CPU, allocator peak on CUDA) to
``OUT/fit_memory.json``. Running both in one interpreter saves a start-up (imports, plugin
discovery, dataset loading) per run, which adds up over the dozens of runs of ``make bench``.

``--train-views`` (before the other options; ``all`` or a count, the first that many) adds a second
``test`` of the same weights on the training views (``--data.test_split train``) into
``OUT/NAME/test-2`` (the run's second test), scored by the same code as the test views (each
training photo rendered as it was fitted, with its own per-image parameters), so a train-test gap
compares like with like. Its report keeps the per-view scores only (no panels, no
LPIPS): only its PSNR and SSIM are read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from benchmarks.common import RUN, TEST, TRAIN_TEST
from nerf_lightning.callbacks.telemetry import peak_memory_bytes
from nerf_lightning.cli import main as nerf_lightning
from nerf_lightning.core.subnormal import flush_subnormals
from nerf_lightning.core.warm_start import end_process


def _option(args: list[str], name: str) -> str | None:
    """The value of ``NAME VALUE`` or ``NAME=VALUE`` in ``args`` (the last one given); ``None`` without it."""
    value = None
    for index, arg in enumerate(args):
        if arg == name and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith(f"{name}="):
            value = arg.split("=", 1)[1]
    return value


def _test(args: list[str], folder: Path) -> int:
    """``nerf-lightning test ARGS`` of a run's checkpoint, which writes into the run's next test folder:
    ``folder``, which must not be there before and must be after (the harness reads it by its name)."""
    if folder.exists():
        raise SystemExit(f"{folder}: already there; a benchmark tests a run folder its own fit made")
    code = nerf_lightning(["test", *args])
    if code == 0 and not folder.is_dir():
        raise SystemExit(f"test wrote no {folder}")
    return code


def train_test_args(train_views: str) -> list[str]:
    """The ``test`` options that score the training views (``all`` or the first ``train_views``)."""
    if train_views != "all" and not (train_views.isdigit() and int(train_views) > 0):
        raise SystemExit(f"--train-views: expected 'all' or a positive count of views, got {train_views!r}")
    limit = [] if train_views == "all" else ["--trainer.limit_test_batches", train_views]
    return ["--data.test_split", "train", "--eval_report.worst_k", "0", "--eval_report.worst_panels", "false",
            "--eval_report.panel_views", "[]", "--eval_report.lpips", "false", *limit]


def main(args: list[str]) -> int:
    train_views = None
    if args[:1] == ["--train-views"]:
        train_views, args = args[1], args[2:]
        train_test_args(train_views)  # refused before any training
    if _option(args, "--run_name") is None:
        args = [*args, "--run_name", RUN]
    root = _option(args, "--trainer.default_root_dir")
    if root is None:
        raise SystemExit("benchmarks.fit_test: --trainer.default_root_dir OUT is required")
    code = nerf_lightning(["fit", *args])
    if code:
        return code
    out = Path(root)
    run = out / str(_option(args, "--run_name"))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    (out / "fit_memory.json").write_text(json.dumps({"peak_memory_mb": peak_memory_bytes(device) / 2**20}))
    checkpoint = ["--ckpt_path", str(run / "checkpoints" / "last.ckpt")]  # the tests write into the run
    code = _test([*args, *checkpoint], run / TEST)
    if code or train_views is None:
        return code
    return _test([*args, *checkpoint, *train_test_args(train_views)], run / TRAIN_TEST)


if __name__ == "__main__":
    flush_subnormals()  # before any thread starts, as the nerf-lightning script does
    end_process(main(sys.argv[1:]))  # as the nerf-lightning script ends: without the interpreter's teardown
