"""Command line: ``nerf-lightning fit|validate|test|predict`` (LightningCLI) and
``data|compare|render|export|pipeline``.

The only module that wires data, model, samplers and callbacks together.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.plugins.io import TorchCheckpointIO

from nerf_lightning.callbacks import ErrorFeedback, EvalReport, PreviewImages, RaysPerSecond, ResumeTimeNotice
from nerf_lightning.callbacks.checkpoint import NerfCheckpoint
from nerf_lightning.callbacks.prediction_writer import PredictionWriter
from nerf_lightning.config_errors import ConstructorArgumentError, constructor_error
from nerf_lightning.configs_lookup import resolve_config_args
from nerf_lightning.data.cache import warm_cache
from nerf_lightning.data.convert import convert_dataset
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.data.demo_scene import make_demo_scene
from nerf_lightning.data.errors import DatasetError, DatasetValidationError
from nerf_lightning.data.loading import LOADERS
from nerf_lightning.data.validate import SPLITS, validate_dataset
from nerf_lightning.export.cli import run_export_cli
from nerf_lightning.module import NerfModule, NonFiniteLossError
from nerf_lightning.onednn import bound_primitive_cache
from nerf_lightning.pipeline import run_pipeline_cli
from nerf_lightning.render_video import run_render_cli
from nerf_lightning.runs.checkpoint_hparams import model_hparams, set_model_defaults
from nerf_lightning.runs.checkpoint_io import AtomicCheckpointIO, CheckpointError, load_checkpoint_file
from nerf_lightning.runs.compare import run_compare
from nerf_lightning.runs.record import RunRecorder
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
    ``--preview.*``, ``--throughput.*``, ``--eval_report.*`` and ``--predict_writer.*``."""

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_lightning_class_args(NerfCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/psnr",
                "checkpoint.mode": "max",
                "checkpoint.save_last": True,
                "checkpoint.filename": "best-step{step}-psnr{val/psnr:.2f}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        parser.add_lightning_class_args(PreviewImages, "preview")
        parser.add_lightning_class_args(RaysPerSecond, "throughput")
        parser.add_lightning_class_args(ErrorFeedback, "error_feedback")  # feeds data.pixel_selection=error
        parser.add_lightning_class_args(EvalReport, "eval_report")
        parser.add_lightning_class_args(PredictionWriter, "predict_writer")  # acts in predict only
        if "weights_only" in {action.dest for action in parser._actions}:
            parser.set_defaults({"weights_only": True})  # checkpoints load without running pickled code

    def _parse_ckpt_path(self) -> None:
        """Read ``--ckpt_path``'s hyperparameters with :func:`load_checkpoint_file`, as the model's defaults.

        LightningCLI loads the checkpoint here, before building anything, with
        ``torch.load(weights_only=True)`` whatever ``--weights_only`` says: a truncated file or one
        weights-only loading refuses ended in a torch traceback, and a trusted file could not be
        loaded with ``--weights_only false``. This loads it with the command's ``--weights_only``,
        and a broken file is a one-line :class:`CheckpointError` before anything is written.
        A missing file is left to the trainer (``FileNotFoundError``), as in LightningCLI.
        """
        if not self.config.get("subcommand"):
            return
        command_config = self.config[self.config.subcommand]
        ckpt_path = command_config.get("ckpt_path")
        if not ckpt_path or not Path(ckpt_path).is_file():
            return
        checkpoint = load_checkpoint_file(ckpt_path, weights_only=command_config.get("weights_only"))
        hparams = model_hparams(checkpoint)
        if not hparams:
            return
        # Defaults, parsed again: config files and options still win (see runs/checkpoint_hparams.py).
        set_model_defaults(self._parser(self.config.subcommand), hparams, str(ckpt_path))
        self.parse_arguments(self.parser, self._args)

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        self._args = args  # kept for _parse_ckpt_path, which parses them again
        super().parse_arguments(parser, args)

    def instantiate_classes(self) -> None:
        """LightningCLI's, with a constructor's ``ValueError`` (a sampler's, a field's, a callback's,
        the model's) turned into one :class:`ConstructorArgumentError` line (see
        :mod:`nerf_lightning.config_errors`)."""
        try:
            super().instantiate_classes()
        except (ValueError, TypeError) as error:
            command = self.subcommand
            config = self.config[command] if command else self.config
            refused = constructor_error(error, config, self._parser(command))
            if refused is None:
                raise
            raise refused from error

    def instantiate_trainer(self, **kwargs: object) -> pl.Trainer:
        trainer = super().instantiate_trainer(**kwargs)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # keep any I/O plugin the user chose
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if not any(isinstance(callback, ResumeTimeNotice) for callback in trainer.callbacks):
            # Not a --option group: it has nothing to configure, it only explains a silent stop.
            trainer.callbacks.insert(0, ResumeTimeNotice())
        return trainer


def run_lightning_cli(args: list[str] | None = None) -> NerfCLI:
    """Run a LightningCLI subcommand (``fit``, ``validate``, ``test``, ``predict``)."""
    _keep_large_allocations()
    bound_primitive_cache()
    load_sampler_plugins()
    return NerfCLI(
        NerfModule,
        NerfDataModule,
        seed_everything_default=0,
        save_config_callback=RunRecorder,
        save_config_kwargs={"overwrite": True},
        args=args,
        parser_kwargs={"description": "Train and evaluate NeRFs with pluggable ray samplers. Also: "
                       "'nerf-lightning data make-demo DIR', 'nerf-lightning data validate DIR', "
                       "'nerf-lightning data cache DIR', 'nerf-lightning data convert SRC DST', "
                       "'nerf-lightning compare RUN_DIR_A RUN_DIR_B', "
                       "'nerf-lightning render --ckpt_path CKPT --out FILE', "
                       "'nerf-lightning export --ckpt_path CKPT "
                       "--format mesh|pointcloud|grid|pt2|torchscript --out FILE [--verify]', "
                       "'nerf-lightning pipeline --config PIPELINE.yaml'."},
    )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def run_data_cli(args: list[str]) -> int:
    """``nerf-lightning data make-demo|validate|cache DIR`` and ``data convert SRC DST``.

    ``validate`` prints one line per warning (``warning: ...``) and per problem, then a summary line,
    to stdout; it returns 1 when the dataset cannot be loaded, 0 otherwise. ``convert`` prints what
    it wrote; its errors (:class:`DatasetError`, an existing ``transforms.json``) propagate to
    :func:`main`, which prints them on one line and returns 2.
    """
    parser = argparse.ArgumentParser(prog="nerf-lightning data", description="Dataset tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("make-demo", help="write the embedded procedural demo scene (Blender layout)")
    demo.add_argument("directory", type=Path)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--resolution", type=int, default=100)
    check = commands.add_parser(
        "validate",
        help="check a dataset without training: one line per problem, exit code 1 if it cannot be used",
    )
    check.add_argument("directory", type=Path)
    check.add_argument(
        "--format",
        dest="dataset_format",
        choices=["auto", *LOADERS],
        default="auto",
        help="dataset format (default: detected from the folder's files)",
    )
    check.add_argument(
        "--downscale",
        type=_positive_int,
        default=1,
        help="image downscale factor training will use (default: 1)",
    )
    warm = commands.add_parser(
        "cache",
        help="decode a dataset's images into the image cache now, as training with the same settings "
        "would (train, val and test splits); exit code 1 if the cache cannot be written",
    )
    warm.add_argument("directory", type=Path)
    warm.add_argument("--format", dest="dataset_format", choices=["auto", *LOADERS], default="auto",
                      help="dataset format (default: detected from the folder's files)")
    warm.add_argument("--downscale", type=_positive_int, default=1,
                      help="image downscale factor training will use (default: 1)")
    warm.add_argument("--background", type=float, nargs=3, default=(1.0, 1.0, 1.0), metavar=("R", "G", "B"),
                      help="colour transparent pixels are composited over (default: 1 1 1)")
    warm.add_argument("--cache-dir", "--cache_dir", dest="cache_dir", type=Path, default=None,
                      help="the cache folder (default: $XDG_CACHE_HOME/nerf-lightning)")
    warm.add_argument("--splits", nargs="+", choices=SPLITS, default=list(SPLITS),
                      help="splits to cache (default: train val test)")
    convert = commands.add_parser(
        "convert",
        help="write DST/transforms.json (nerfstudio layout) from an LLFF capture or a COLMAP model; "
        "images outside DST are hard-linked (or copied) into it",
        description="Convert an LLFF capture (SRC/poses_bounds.npy + images/ or images_N/) or a COLMAP "
        "sparse model (cameras/images .bin or .txt, in SRC, SRC/sparse/0 or SRC/sparse; images in "
        "images/ next to or above it) into DST/transforms.json for the nerfstudio loader, which reads "
        "only images inside its dataset folder. When the image folder is inside DST (DST is the capture "
        "or an ancestor) the frames reference the images in place; otherwise (a fresh folder, a "
        "read-only capture) each image is hard-linked, or copied where links are not possible, to "
        "DST/<image folder name>/ (written under a temporary name, then renamed). An identical file "
        "already there is kept; a different one is only replaced with --force. The file's 'conversion' "
        "section records the source, how the images were placed, the applied world transform (the "
        "identity: the source's world frame is kept) and the camera-axis change to OpenGL. Check the "
        "result with 'nerf-lightning data validate DST'.",
    )
    convert.add_argument("source", type=Path, metavar="SRC",
                         help="LLFF capture folder, COLMAP capture folder or COLMAP model folder "
                         "(only read: it may be read-only)")
    convert.add_argument("destination", type=Path, metavar="DST",
                         help="folder to write transforms.json into (created if needed); images outside "
                         "it are linked or copied into it")
    convert.add_argument("--images", type=Path, default=None, metavar="DIR",
                         help="image folder to reference (COLMAP: default images/ next to or above the "
                         "model; LLFF: images/ or an images_N/ of SRC, default images/ else the "
                         "smallest N)")
    convert.add_argument("--copy", action="store_true",
                         help="copy images into DST instead of hard-linking them (a hard link shares the "
                         "file with SRC: editing it edits both); no effect when the images are in DST")
    convert.add_argument("--force", action="store_true",
                         help="replace an existing DST/transforms.json and different files where images go")
    options = parser.parse_args(args)
    if options.command == "make-demo":
        out = make_demo_scene(options.directory, seed=options.seed, resolution=options.resolution)
        print(f"demo scene written to {out}")
    elif options.command == "validate":
        report = validate_dataset(
            options.directory, dataset_format=options.dataset_format, downscale=options.downscale
        )
        print("\n".join(report.lines()))
        return 0 if report.ok else 1
    elif options.command == "cache":
        warmed = warm_cache(options.directory, tuple(options.splits), dataset_format=options.dataset_format,
                            background=tuple(options.background), downscale=options.downscale,
                            cache_dir=options.cache_dir)
        print("\n".join(split.line() for split in warmed))
        return 0 if all(split.cached for split in warmed) else 1
    elif options.command == "convert":
        result = convert_dataset(options.source, options.destination, images=options.images,
                                 force=options.force, copy=options.copy)
        print("\n".join(result.messages))
    return 0


def run_compare_cli(args: list[str]) -> int:
    """``nerf-lightning compare RUN_DIR_A RUN_DIR_B``."""
    parser = argparse.ArgumentParser(
        prog="nerf-lightning compare",
        description="Show how two recorded runs differ (config, environment, data, metrics).",
    )
    parser.add_argument("run_a")
    parser.add_argument("run_b")
    options = parser.parse_args(args)
    print(run_compare(options.run_a, options.run_b))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        args = resolve_config_args(args)  # --config demo: the shipped demo.yaml when no such file is here
        if argv is None:
            sys.argv[1:] = args  # LightningCLI, and the ranks DDP launches, read the command line itself
        if args and args[0] == "data":
            return run_data_cli(args[1:])
        if args and args[0] == "compare":
            return run_compare_cli(args[1:])
        if args and args[0] == "render":
            return run_render_cli(args[1:])
        if args and args[0] == "export":
            return run_export_cli(args[1:])
        if args and args[0] == "pipeline":
            return run_pipeline_cli(args[1:])
        run_lightning_cli(None if argv is None else args)  # None: LightningCLI reads sys.argv itself
    except DatasetValidationError as error:  # every problem, as 'nerf-lightning data validate' lists them
        for problem in error.problems:
            print(f"nerf-lightning: dataset error: {problem}", file=sys.stderr)
        count = len(error.problems)
        print(
            f"nerf-lightning: {error.file}: {count} problem{'s' if count != 1 else ''}; "
            f"list them again with '{error.command}'",
            file=sys.stderr,
        )
        return 2
    except DatasetError as error:
        print(f"nerf-lightning: dataset error: {error}", file=sys.stderr)
        return 2
    except (CheckpointError, ConstructorArgumentError) as error:  # a broken checkpoint; a refused argument
        print(f"nerf-lightning: {error}", file=sys.stderr)
        return 2
    except NonFiniteLossError as error:
        print(f"nerf-lightning: {error}", file=sys.stderr)
        return 3
    except (FileNotFoundError, FileExistsError) as error:  # e.g. a missing --ckpt_path; an output to keep
        print(f"nerf-lightning: {error}", file=sys.stderr)
        return 2
    except ValueError as error:
        if args and args[0] in ("compare", "render", "export"):
            print(f"nerf-lightning {args[0]}: {error}", file=sys.stderr)
            return 2
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
