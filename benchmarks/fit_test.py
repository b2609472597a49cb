"""One benchmark run in one process: ``nerf-lightning fit`` and then ``test`` of its final weights.

    python -m benchmarks.fit_test --config RUN_CONFIG --trainer.default_root_dir OUT [fit options]

The test run goes to ``OUT/test``; the process's peak memory at the end of ``fit`` (resident set on
a CPU, allocator peak on CUDA) to ``OUT/fit_memory.json``. Running both in one interpreter saves
a start-up (imports, plugin discovery, dataset loading) per run, which adds up over the dozens of
runs of ``make bench``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from nerf_lightning.callbacks.telemetry import peak_memory_bytes
from nerf_lightning.cli import main as nerf_lightning


def _option(args: list[str], name: str) -> str:
    index = args.index(name)
    return args[index + 1]


def main(args: list[str]) -> int:
    code = nerf_lightning(["fit", *args])
    if code:
        return code
    out = Path(_option(args, "--trainer.default_root_dir"))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    (out / "fit_memory.json").write_text(json.dumps({"peak_memory_mb": peak_memory_bytes(device) / 2**20}))
    version = max((out / "lightning_logs").glob("version_*"), key=lambda p: int(p.name.split("_")[1]))
    return nerf_lightning(["test", *args, "--ckpt_path", str(version / "checkpoints" / "last.ckpt"),
                           "--trainer.default_root_dir", str(out / "test")])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
