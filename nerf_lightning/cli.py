"""Command line: ``nerf-lightning fit|validate|test|predict`` (LightningCLI) and ``nerf-lightning data ...``.

The only module that wires data, model, samplers and callbacks together.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from nerf_lightning.callbacks import PreviewImages, RaysPerSecond
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.data.demo_scene import make_demo_scene
from nerf_lightning.data.errors import DatasetError
from nerf_lightning.module import NerfModule
from nerf_lightning.samplers import load_sampler_plugins


def _keep_large_allocations() -> None:
    """Stop glibc from returning large blocks to the OS after every step.

    Each training step allocates and frees tensors of tens of MB; by default glibc maps and
    unmaps them each time and the page faults cost more than the arithmetic on CPU.
    """
    if sys.platform != "linux":
        return
    import ctypes

    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    libc.mallopt(m_mmap_threshold, 1 << 30)
    libc.mallopt(m_trim_threshold, 1 << 34)


class NerfCLI(LightningCLI):
    """LightningCLI with the project's default callbacks exposed as ``--checkpoint.*``,
    ``--preview.*`` and ``--throughput.*``."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({
            "checkpoint.monitor": "val/psnr",
            "checkpoint.mode": "max",
            "checkpoint.save_last": True,
            "checkpoint.filename": "best-step{step}-psnr{val/psnr:.2f}",
            "checkpoint.auto_insert_metric_name": False,
        })
        parser.add_lightning_class_args(PreviewImages, "preview")
        parser.add_lightning_class_args(RaysPerSecond, "throughput")


def run_lightning_cli(args: list[str] | None = None) -> NerfCLI:
    """Run a LightningCLI subcommand (``fit``, ``validate``, ``test``, ``predict``)."""
    _keep_large_allocations()
    load_sampler_plugins()
    return NerfCLI(
        NerfModule,
        NerfDataModule,
        seed_everything_default=0,
        save_config_kwargs={"overwrite": True},
        args=args,
        parser_kwargs={"description": "Train and evaluate NeRFs with pluggable ray samplers."},
    )


def run_data_cli(args: list[str]) -> int:
    """``nerf-lightning data make-demo DIR``."""
    parser = argparse.ArgumentParser(prog="nerf-lightning data", description="Dataset tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("make-demo", help="write the embedded procedural demo scene (Blender layout)")
    demo.add_argument("directory", type=Path)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--resolution", type=int, default=100)
    options = parser.parse_args(args)
    if options.command == "make-demo":
        out = make_demo_scene(options.directory, seed=options.seed, resolution=options.resolution)
        print(f"demo scene written to {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args and args[0] == "data":
            return run_data_cli(args[1:])
        run_lightning_cli(None if argv is None else args)  # None: LightningCLI reads sys.argv itself
    except DatasetError as error:
        print(f"nerf-lightning: dataset error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
