"""``nerf-lightning fit|validate|test|predict``: LightningCLI with the project's callbacks as options.

The model, the data module and the trainer are LightningCLI's; :class:`NerfCLI` adds the default
callbacks as ``--checkpoint.*``, ``--preview.*``, ``--throughput.*``, ``--error_feedback.*``,
``--eval_report.*``, ``--viewer.*`` (the live browser viewer, off by default) and ``--preemption.*``
(a fit stopped by SIGTERM, a scheduler's early signal or Ctrl-C keeps its last step and exits with a
code that asks for a requeue), loads ``--ckpt_path`` with the command's ``--weights_only``
(``--ckpt_path last``: the newest ``last.ckpt`` of the run folder, so a requeued job runs the same
command line again) and turns a refused constructor argument into one line.

Its help is the project's own where Lightning's would end mid-sentence (Lightning describes a
subcommand, and jsonargparse titles a group, by the first line of a docstring, which is cut where
the first sentence is wrapped): :data:`SUBCOMMANDS` describes ``fit|validate|test|predict`` in the
listing, at the top of ``CMD --help`` and as the title of the subcommand's own options
(``--ckpt_path``...), each callback group is described by its docstring's whole first sentence, and
``nerf-lightning --help`` ends with the other commands (:func:`nerf_lightning.commands.other_commands`).
"""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, NoReturn

import lightning.pytorch as pl
import yaml
from jsonargparse import DefaultHelpFormatter
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO

from nerf_lightning.callbacks import (
    ErrorFeedback,
    EvalReport,
    Preemption,
    PreviewImages,
    RaysPerSecond,
    ResumeTimeNotice,
    RunProgressBar,
    Viewer,
)
from nerf_lightning.callbacks.checkpoint import NerfCheckpoint
from nerf_lightning.callbacks.prediction_writer import PredictionWriter
from nerf_lightning.callbacks.preemption import FitStopped
from nerf_lightning.commands import other_commands
from nerf_lightning.commands.base import UsageError, first_sentence
from nerf_lightning.commands.ckpt_path import (
    LAST,
    newest_last_checkpoint,
    replace_ckpt_path,
    say,
    with_run_config,
)
from nerf_lightning.commands.lost_rank import SayWhichRankIsLost, lost_rank_error
from nerf_lightning.config.errors import ConstructorLog, constructor_error
from nerf_lightning.config.slips import explain
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.runs.checkpoint_hparams import model_hparams, set_model_defaults
from nerf_lightning.runs.checkpoint_io import TRUST_OPTION, AtomicCheckpointIO, load_checkpoint_file
from nerf_lightning.runs.folders import (
    RunFolderTakenError,
    RunLogger,
    check_run_name,
    checkpoint_of,
    default_run_name,
    holds_checkpoint,
    run_folder_of,
)
from nerf_lightning.runs.record import RunRecorder
from nerf_lightning.samplers import load_sampler_plugins
from nerf_lightning.system.host_memory import keep_freed_memory
from nerf_lightning.system.module import COMPONENTS, NerfModule
from nerf_lightning.system.onednn import bound_primitive_cache

SUBCOMMANDS = {
    "fit": "Train the model, validating and checkpointing as configured (--ckpt_path resumes a run).",
    "validate": "Score a model (--ckpt_path: a trained one) on the validation views: PSNR and SSIM.",
    "test": "Score a trained model (--ckpt_path) on --data.test_split's views: PSNR, SSIM and an "
            "evaluation report.",
    "predict": "Render the test views with a trained model (--ckpt_path) and write the images "
               "(--predict_writer.*).",
}
"""Each LightningCLI subcommand's description: one sentence, for the listing of ``nerf-lightning
--help``, the top of ``CMD --help`` and the title of the subcommand's own options."""

DEFAULT_ROOT = "runs"
"""Where run folders go unless ``--trainer.default_root_dir`` (or a config) says otherwise."""

class NerfHelpFormatter(DefaultHelpFormatter):
    """jsonargparse's help formatter, keeping a listing as written: a paragraph of a description or
    epilog with indented lines (the other commands that end ``nerf-lightning --help``, wrapped by
    :func:`nerf_lightning.commands.listing`) is printed as it is; other paragraphs are filled one by
    one (argparse would fill the whole text as one paragraph)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = []
        for paragraph in text.strip("\n").split("\n\n"):
            listed = paragraph.startswith(" ") or "\n " in paragraph
            paragraphs.append(paragraph if listed else super()._fill_text(paragraph, width, indent))
        return "\n\n".join(paragraphs)


def _describe_callback_group(parser: LightningArgumentParser, key: str, callback: type) -> None:
    """Title the ``--key.*`` options by the callback's class and describe them by its docstring's
    first sentence, whole (jsonargparse titles them by its first line, cut where the sentence wraps)."""
    group = parser.groups[key]
    if not group._group_actions:  # argparse's list; a group without options is left out of the help
        return
    group.title = f"the {callback.__name__} callback"
    group.description = first_sentence(inspect.getdoc(callback) or "")


class NerfArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, whose refusal of a slip (a mistyped key on the command line or in a config
    file, an unknown sampler) is one line naming the key, where it came from and what was probably
    meant (:func:`nerf_lightning.config.slips.explain`), instead of the usage text; other refusals
    are jsonargparse's."""

    given_args: ClassVar[Sequence[str]] = ()
    """The arguments being parsed (set by :meth:`NerfCLI.parse_arguments`): their ``--config`` files
    are where a refused key is looked for."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self  # jsonargparse's, not a contract of ours
        keys = [action.dest for action in parser._actions if action.option_strings and "." in action.dest]
        files = [Path(value) for option, value in zip(self.given_args, self.given_args[1:], strict=False)
                 if option in ("--config", "-c") and Path(value).is_file()]
        line = explain(message, keys, files, list(load_sampler_plugins()))
        if line is None:
            super().error(message, ex)
        prog = parser.prog.replace(" [options]", "")
        sys.stderr.write(f"{prog}: {line} (options: {prog} --help)\n")
        self.exit(2)


class _RequestedSubcommands:
    """``NerfCLI.subcommands``: LightningCLI's on the class; on a command line being built, only the
    subcommand its arguments begin with (:func:`requested_subcommand`), when they begin with one.

    Each subcommand's parser holds every option of the model, the data and the trainer, built from their
    signatures: building the parsers of the three subcommands a command does not run is most of the
    command line's start-up. ``nerf-lightning --help``, a mistyped subcommand and options before the
    subcommand still get all four, so the listing and the errors name every choice."""

    def __get__(self, cli: NerfCLI | None, owner: type) -> Callable[[], dict[str, set[str]]]:
        every = LightningCLI.subcommands
        requested = None if cli is None else cli._requested
        if requested is None:
            return every
        return lambda: {requested: every()[requested]}


class NerfCLI(LightningCLI):
    """LightningCLI with the project's default callbacks exposed as ``--checkpoint.*``,
    ``--preview.*``, ``--throughput.*``, ``--eval_report.*``, ``--predict_writer.*`` and ``--viewer.*``."""

    CALLBACK_GROUPS: ClassVar[dict[str, type]] = {
        "checkpoint": NerfCheckpoint,
        "preview": PreviewImages,
        "throughput": RaysPerSecond,
        "error_feedback": ErrorFeedback,  # feeds data.pixel_selection=error
        "eval_report": EvalReport,
        "predict_writer": PredictionWriter,  # acts in predict only
        "viewer": Viewer,  # off unless --viewer.enabled true; fit only
        "preemption": Preemption,  # fit only; runs after every other callback (instantiate_trainer)
    }
    """The default callbacks, each configured by its ``--key.*`` options."""

    exit_code: int = 0
    """The command's exit code when the fit was stopped (:class:`FitStopped`: a preemption, Ctrl-C)."""

    _requested: str | None = None
    """The subcommand the arguments begin with, if any (:class:`_RequestedSubcommands`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._requested = requested_subcommand(kwargs.get("args"))
        super().__init__(*args, **kwargs)

    subcommands = _RequestedSubcommands()

    def setup_parser(self, add_subcommands: bool, main_kwargs: dict[str, Any],
                     subparser_kwargs: dict[str, Any]) -> None:
        """LightningCLI's parsers, with :data:`SUBCOMMANDS`' descriptions and the help formatter
        that keeps a listing.

        Lightning gives the subcommand parsers' ``description`` from ``parser_kwargs``, but takes the
        listing's text and the title of the subcommand's own options from ``Trainer``'s docstrings,
        with no hook: those two are set here, on the parsers it made.
        """
        main_kwargs = {"formatter_class": NerfHelpFormatter, **main_kwargs}
        described = {name: {"description": text, **subparser_kwargs.get(name, {})}
                     for name, text in SUBCOMMANDS.items()}
        subparser_kwargs = {**subparser_kwargs, **described}
        super().setup_parser(add_subcommands, main_kwargs, subparser_kwargs)
        if not add_subcommands:
            return
        for choice in self.parser._subcommands_action._choices_actions:  # argparse's listing entries
            choice.help = SUBCOMMANDS.get(choice.dest, choice.help)
        for name, parser in self._subcommand_parsers.items():
            group = parser.groups.get(name)  # jsonargparse names a method's group by the method
            if group is not None and name in SUBCOMMANDS:
                group.title = SUBCOMMANDS[name].removesuffix(".")  # no full stop, as jsonargparse's titles
            for action in parser._actions:  # argparse's list of every option
                if action.dest == "weights_only":  # Lightning's help gives torch's default (None), not ours
                    parser.set_defaults({"weights_only": True})  # no pickled code runs
                    action.help = ("load --ckpt_path with torch.load(weights_only=True): only tensors and "
                                   f"plain values, no pickled code runs ({TRUST_OPTION} only for a file you "
                                   "trust).")

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        for key, callback in self.CALLBACK_GROUPS.items():
            parser.add_lightning_class_args(callback, key)
            _describe_callback_group(parser, key, callback)
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/psnr",
                "checkpoint.mode": "max",
                "checkpoint.save_last": True,
                "checkpoint.filename": "best-step{step}-psnr{val/psnr:.2f}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )
        parser.add_argument(
            "--run_name", type=str | None, default=None,
            help="The run folder's name under --trainer.default_root_dir (default: SCENE-CONFIG-DATE-TIME, "
                 "made unique). A fit resumed from a run's checkpoint writes into that run's folder, and "
                 "validate, test and predict of a run's checkpoint into RUN/<command>/, whatever this says.")
        parser.set_defaults({"trainer.default_root_dir": DEFAULT_ROOT})

    def _parse_ckpt_path(self) -> None:
        """Read ``--ckpt_path``'s hyperparameters with :func:`load_checkpoint_file`, as the model's defaults.

        LightningCLI loads the checkpoint here, before building anything, with
        ``torch.load(weights_only=True)`` whatever ``--weights_only`` says: a truncated file or one
        weights-only loading refuses ended in a torch traceback, and a trusted file could not be
        loaded with ``--weights_only false``. This loads it with the command's ``--weights_only``,
        and a broken file is a one-line :class:`CheckpointError` before anything is written.
        A missing file is left to the trainer (``FileNotFoundError``), as in LightningCLI.

        ``--ckpt_path last`` is resolved here first (:meth:`_resolve_last`).
        """
        if not self.config.get("subcommand"):
            return
        subcommand = self.config.subcommand
        command_config = self.config[subcommand]
        ckpt_path = command_config.get("ckpt_path")
        checkpoint = None
        if ckpt_path == LAST:
            ckpt_path, checkpoint = self._resolve_last(subcommand, command_config)
            command_config["ckpt_path"] = ckpt_path
        elif ckpt_path and Path(ckpt_path).is_dir():  # a run folder: its last checkpoint
            folder, ckpt_path = ckpt_path, str(checkpoint_of(Path(ckpt_path)))
            command_config["ckpt_path"] = ckpt_path
            if self._args is None:  # the processes a data-parallel fit starts read sys.argv again
                sys.argv[1:] = replace_ckpt_path(sys.argv[1:], folder, ckpt_path)
        if not ckpt_path or not Path(ckpt_path).is_file():
            return
        if checkpoint is None:
            checkpoint = load_checkpoint_file(ckpt_path, weights_only=command_config.get("weights_only"))
        hparams = model_hparams(checkpoint)
        if not hparams:
            return
        # Defaults, parsed again: config files and options still win (see runs/checkpoint_hparams.py).
        set_model_defaults(self._parser(subcommand), hparams, str(ckpt_path))
        args = self._args
        if subcommand != "fit":  # an evaluation rebuilds the trained components, whatever a config says
            given = list(sys.argv[1:] if args is None else args)
            extra = self._checkpoint_components(subcommand, hparams, given)
            args = [*given, *extra] if extra else args
        self.parse_arguments(self.parser, args)
        self.config[subcommand]["ckpt_path"] = ckpt_path  # parsed again: "last" again, unless from sys.argv

    def _checkpoint_components(self, subcommand: str, hparams: dict[str, Any], given: list[str]) -> list[str]:
        """Options that rebuild the checkpoint's own components (:data:`COMPONENTS`: field, sampler,
        renderer, camera refinement, with their settings) for ``validate``, ``test`` or ``predict``,
        over what a config file says: a config written for training (``--config demo`` with its
        OccupancyGrid) must not replace the sampler a run was trained with. A component given on the
        command line (``--model.sampler ...``) is the user's override and is kept; a config's other
        model settings (``eval_chunk_rays``...) still apply. Says in one line which components differed."""
        model = self.config[subcommand].get("model") or {}
        options: list[str] = []
        differed = []
        for name in COMPONENTS:
            if any(arg == f"--model.{name}" or arg.startswith((f"--model.{name}.", f"--model.{name}="))
                   for arg in given):
                continue
            trained = hparams.get(name)
            parsed = model.get(name)
            parsed_class = getattr(parsed, "class_path", None) if parsed is not None else None
            trained_class = trained.get("class_path") if isinstance(trained, dict) else None
            if parsed is not None and _short(parsed_class) != _short(trained_class):  # a config's other class
                differed.append(f"model.{name} {_short(trained_class)}, "
                                f"not the config's {_short(parsed_class)}")
            options += [f"--model.{name}", json.dumps(trained) if trained is not None else "null"]
        if differed:
            say(f"{subcommand}: using the checkpoint's {'; '.join(differed)} (--model.NAME overrides)")
        return options

    def _resolve_last(self, subcommand: str, command_config: Any) -> tuple[str | None, dict[str, Any] | None]:
        """``--ckpt_path last``: the newest good ``last.ckpt`` under ``trainer.default_root_dir``
        (:func:`newest_last_checkpoint`) and its contents, said in one line; for ``fit`` without one,
        ``(None, None)``: training starts fresh, as a requeued job's first run must.

        The path replaces ``last`` in ``sys.argv`` when the arguments came from there: the processes a
        data-parallel fit starts run that command line again, and must all load this same file.

        Raises:
            FileNotFoundError: ``validate``, ``test`` or ``predict`` found no checkpoint.
        """
        root = Path(command_config.get("trainer", {}).get("default_root_dir") or ".")
        found = newest_last_checkpoint(root, command_config.get("weights_only"))
        where = f"{root}/RUN/checkpoints/last.ckpt"
        if found is None:
            if subcommand != "fit":
                raise FileNotFoundError(f"--ckpt_path last: no loadable checkpoint {where}; expected a run "
                                        "of 'nerf-lightning fit' with this --trainer.default_root_dir")
            say(f"--ckpt_path last: no checkpoint {where} yet; training starts fresh")
            path = None
        else:
            path = str(found[0])
            say(f"--ckpt_path last: resuming from {path} (step {found[1].get('global_step', '?')})")
        if self._args is None:  # LightningCLI parsed sys.argv
            sys.argv[1:] = replace_ckpt_path(sys.argv[1:], LAST, path)
        return path, None if found is None else found[1]

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        self._args = args  # kept for _parse_ckpt_path, which parses them again
        NerfArgumentParser.given_args = tuple(args) if isinstance(args, list | tuple) else tuple(sys.argv[1:])
        super().parse_arguments(parser, args)

    def _dump_config(self) -> None:
        """LightningCLI's (the config it gives the model as hyperparameters), without validating the
        config again: it was validated when it was parsed, and validating repeats every option's type
        check."""
        if hasattr(self, "config_dump"):
            return
        text = self.parser.dump(self.config, skip_link_targets=False, skip_unset=False, skip_validation=True,
                                format="yaml")
        dumped = yaml.safe_load(text)
        self.config_dump = dumped[self.config.subcommand] if "subcommand" in self.config else dumped

    def instantiate_classes(self) -> None:
        """LightningCLI's, with a constructor's ``ValueError`` (a sampler's, a field's, a callback's,
        the model's) turned into one :class:`ConstructorArgumentError` line naming the
        config key and the class (see :mod:`nerf_lightning.config.errors`)."""
        constructors = ConstructorLog()
        constructors.watch(self.parser)
        try:
            super().instantiate_classes()
        except (ValueError, TypeError) as error:
            command = self.subcommand
            config = self.config[command] if command else self.config
            refused = constructor_error(error, constructors, config, self._parser(command))
            if refused is None:
                raise
            raise refused from error

    def instantiate_trainer(self, **kwargs: object) -> pl.Trainer:
        trainer = super().instantiate_trainer(**kwargs)
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # keep any I/O plugin the user chose
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        stoppers = [callback for callback in trainer.callbacks if isinstance(callback, Preemption)]
        for callback in stoppers:  # last: the checkpoint at a stop holds every callback's state of the step
            trainer.callbacks.remove(callback)
            trainer.callbacks.append(callback)
        if trainer.world_size > 1:
            trainer.callbacks.insert(0, SayWhichRankIsLost())  # no --option: it only keeps rank 0 to say it
        if not any(isinstance(callback, ResumeTimeNotice) for callback in trainer.callbacks):
            # Not a --option group: it has nothing to configure, it only explains a silent stop.
            trainer.callbacks.insert(0, ResumeTimeNotice())
        bar = trainer.progress_bar_callback
        if type(bar) in (TQDMProgressBar, RichProgressBar):  # Lightning's default: one bar per epoch
            trainer.callbacks[trainer.callbacks.index(bar)] = RunProgressBar()  # one for the whole run
        logger = self._run_logger(trainer)
        if logger is not None:
            trainer.logger = logger
        return trainer

    def _run_logger(self, trainer: pl.Trainer) -> RunLogger | None:
        """The run folder's logger (:mod:`nerf_lightning.runs.folders`) in place of Lightning's default
        one; ``None`` when ``--trainer.logger`` chose another (or none).

        Raises:
            RunFolderTakenError: ``fit --run_name`` names a folder holding a run's checkpoints.
        """
        config = self.config[self.subcommand] if self.subcommand else None
        if config is None or config.get("trainer", {}).get("logger") not in (None, True) \
                or type(trainer.logger) is not TensorBoardLogger:
            return None
        ckpt_path = config.get("ckpt_path")
        run = run_folder_of(Path(ckpt_path)) if ckpt_path and Path(ckpt_path).is_file() else None
        if run is not None:  # a resumed fit goes on in its folder; an evaluation goes into RUN/<command>
            return RunLogger(run.parent, name=run.name) if self.subcommand == "fit" \
                else RunLogger(run, proposed=self.subcommand)  # RUN/test, then RUN/test-2...: none replaced
        root = Path(trainer.default_root_dir)
        name = config.get("run_name")
        if name:
            try:
                check_run_name(name)
            except ValueError as error:
                raise UsageError(str(error)) from None
            if self.subcommand == "fit" and (root / name).is_dir() and holds_checkpoint(root / name):
                raise RunFolderTakenError(f"--run_name {name}: {root / name} already holds a run; resume it "
                                          f"with --ckpt_path {root / name}, or choose another --run_name")
            return RunLogger(root, name=name)
        files = config.get("config") or []
        scene = config.get("data", {}).get("root")
        return RunLogger(root, proposed=default_run_name(Path(str(scene)).name if scene else None,
                                                         Path(str(files[0])).stem if files else None))

    def _run_subcommand(self, subcommand: str) -> None:
        """LightningCLI's; a command that fails removes the run folder it created, unless a checkpoint
        was written into it (:meth:`RunLogger.discard_if_empty`); a collective whose peer process died is
        one :class:`~nerf_lightning.core.errors.RankLostError` line (:mod:`.lost_rank`)."""
        try:
            super()._run_subcommand(subcommand)
        except BaseException as error:
            logger = self.trainer.logger
            if isinstance(logger, RunLogger):
                logger.discard_if_empty()
            lost = lost_rank_error(self.trainer, error)  # a data-parallel peer that died: one line
            if lost is not None:
                raise lost from None
            raise

    def fit(self, model: pl.LightningModule, **kwargs: Any) -> None:
        """``Trainer.fit``; a fit :class:`Preemption` stopped prints its line (rank zero) and sets
        :attr:`exit_code` instead of raising."""
        try:
            self.trainer.fit(model, **kwargs)
        except FitStopped as stopped:
            if self.trainer.is_global_zero:
                print(stopped.message, file=sys.stderr, flush=True)
            self.exit_code = int(stopped.code)

    def predict(self, return_predictions: bool | None = None, **kwargs: Any) -> None:
        """``Trainer.predict``, keeping no predictions unless ``--return_predictions true``: the
        command line drops what it returns and ``--predict_writer`` has written each view already,
        while the returned list would hold every view's colour, depth and opacity in memory until
        the last one is rendered."""
        self.trainer.predict(return_predictions=bool(return_predictions), **kwargs)


def requested_subcommand(args: ArgsType) -> str | None:
    """The subcommand ``args`` (``sys.argv[1:]`` when ``None``) start with; ``None`` when they start with
    anything else (an option of the main parser, an unknown name, nothing) or are not a list."""
    given = sys.argv[1:] if args is None else args
    if isinstance(given, list | tuple) and given and given[0] in SUBCOMMANDS:
        return str(given[0])
    return None


def _short(class_path: str | None) -> str:
    return "none" if class_path is None else class_path.rsplit(".", 1)[-1]


def run_lightning_cli(args: list[str] | None = None) -> NerfCLI:
    """Run a LightningCLI subcommand (``fit``, ``validate``, ``test``, ``predict``); the CLI, whose
    :attr:`NerfCLI.exit_code` is the command's (non-zero when a fit was stopped by a signal)."""
    keep_freed_memory()
    bound_primitive_cache()
    load_sampler_plugins()
    if args is None:
        sys.argv[1:] = with_run_config(sys.argv[1:])  # the ranks a data-parallel fit starts read it too
    elif isinstance(args, list | tuple):
        args = with_run_config(list(args))
    given = sys.argv[1:] if args is None else args
    wants_help = isinstance(given, list | tuple) and any(arg in ("-h", "--help") for arg in given)
    return NerfCLI(
        NerfModule,
        NerfDataModule,
        seed_everything_default=0,
        save_config_callback=RunRecorder,
        parser_class=NerfArgumentParser,
        save_config_kwargs={"overwrite": True},
        args=args,
        parser_kwargs={"prog": "nerf-lightning",
                       "description": "Train and evaluate NeRFs with pluggable ray samplers; the other "
                       "commands are listed at the end.",
                       # Imports every command's module: only for the help that shows it.
                       "epilog": other_commands() if wants_help else None},
    )
