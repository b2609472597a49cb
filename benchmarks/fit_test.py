"""One benchmark run in one process: ``nerf-lightning fit`` and then ``test`` of its final weights.

    python -m benchmarks.fit_test [--train-views all|N] --config RUN_CONFIG --trainer.default_root_dir OUT
        [fit options]

The test run goes to ``OUT/test``; the process's peak memory at the end of ``fit`` (resident set on
a CPU, allocator peak on CUDA) to ``OUT/fit_memory.json``. Running both in one interpreter saves
a start-up (imports, plugin discovery, dataset loading) per run, which adds up over the dozens of
runs of ``make bench``.

``--train-views`` (before the other options; ``all`` or a count, the first that many) adds a second
``test`` of the same weights on the training views (``--data.test_split train``) into
``OUT/test_train``, scored by the same code as the test views, so a train-test gap compares like
with like. Its report keeps the per-view scores only (no panels, no LPIPS): only its PSNR and SSIM
are read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from benchmarks.common import TRAIN_TEST
from nerf_lightning.callbacks.telemetry import peak_memory_bytes
from nerf_lightning.cli import main as nerf_lightning


def _option(args: list[str], name: str) -> str:
    index = args.index(name)
    return args[index + 1]


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
    code = nerf_lightning(["fit", *args])
    if code:
        return code
    out = Path(_option(args, "--trainer.default_root_dir"))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    (out / "fit_memory.json").write_text(json.dumps({"peak_memory_mb": peak_memory_bytes(device) / 2**20}))
    version = max((out / "lightning_logs").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    checkpoint = ["--ckpt_path", str(version / "checkpoints" / "last.ckpt")]
    code = nerf_lightning(["test", *args, *checkpoint, "--trainer.default_root_dir", str(out / "test")])
    if code or train_views is None:
        return code
    return nerf_lightning(["test", *args, *checkpoint, "--trainer.default_root_dir", str(out / TRAIN_TEST),
                           *train_test_args(train_views)])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
