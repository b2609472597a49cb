"""A trained model and its data module, rebuilt from a checkpoint and its run's ``config.yaml``.

The one place that turns a checkpoint into a ready model: ``render``, ``export`` (through the
options :func:`add_trained_run_arguments` declares and :func:`parse_trained_run` fills) and the
pipeline (:func:`run_config_path`) use it.

The model and data arguments are read from the config LightningCLI saved in the run directory
(``RUN/config.yaml`` beside ``RUN/checkpoints/``, or ``--run_config``); ``--model.*`` and ``--data.*``
options override them. A checkpoint outside a run directory is rebuilt from the model's
hyperparameters it holds (``NerfModule`` saves them) when ``--data.root`` says where the data is (the
data module's arguments are only in the run config). The weights are loaded with ``weights_only`` (no
pickled code runs; ``--weights_only false`` for a trusted file that needs it), in the same order as
``test --ckpt_path``: the data module's scene box first, then the checkpoint's state. A broken
checkpoint is a one-line :class:`~nerf_lightning.runs.checkpoint_io.CheckpointError`, a constructor
refusing an argument a one-line :class:`~nerf_lightning.config.errors.ConstructorArgumentError`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import ArgumentParser, Namespace

from nerf_lightning.config.errors import ConstructorLog, constructor_error
from nerf_lightning.core.errors import FrameMismatchError
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.runs.checkpoint_hparams import model_hparams
from nerf_lightning.runs.checkpoint_io import TRUST_OPTION, load_checkpoint_file
from nerf_lightning.runs.folders import RUN_CONFIG, checkpoint_of
from nerf_lightning.samplers import load_sampler_plugins
from nerf_lightning.system.module import NerfModule

TRAINED_RUN_OPTIONS = ("ckpt_path", "run_config", "weights_only", "device", "model", "data")
"""The options :func:`add_trained_run_arguments` declares (not passed to the command's function)."""
TRAINING_ONLY = ("model.learning_rate", "model.learning_rate_decay_steps", "model.learning_rate_decay_start",
                 "model.learning_rate_decay_floor", "model.on_nonfinite_loss", "data.random_background",
                 "data.rays_per_batch", "data.steps_per_epoch", "data.pixel_selection",
                 "data.error_map_resolution", "data.error_map_uniform_fraction", "data.prefetch",
                 "data.images_per_window", "data.window_steps")
"""``--model.*`` / ``--data.*`` options only training reads: a trained-run command accepts them (a run's
config holds them; a printed config gives them back) and its help says they do not apply."""


class TrainedRunError(ValueError):
    """The checkpoint or the run config cannot be used."""


def run_config_path(ckpt_path: Path, config: Path | None = None) -> Path:
    """The config to rebuild ``ckpt_path``'s model with.

    ``config`` (a ``config.yaml`` or a run directory holding one) when given, else the
    ``config.yaml`` of the run the checkpoint belongs to (``RUN/checkpoints/x.ckpt`` →
    ``RUN/config.yaml``).
    """
    if config is None:
        found = _beside(ckpt_path)
        if found is None:
            raise TrainedRunError(f"{ckpt_path}: no {RUN_CONFIG} in its run directory {_run_dir(ckpt_path)}; "
                                  f"pass --run_config RUN_DIR/{RUN_CONFIG} (or --data.root DIR to rebuild "
                                  "the model from the checkpoint's hyperparameters)")
        return found
    config = config / RUN_CONFIG if config.is_dir() else config
    if not config.is_file():
        raise FileNotFoundError(f"{config}: no such config file")
    return config


def _run_dir(ckpt_path: Path) -> Path:
    return ckpt_path.parent.parent if ckpt_path.parent.name == "checkpoints" else ckpt_path.parent


def _beside(ckpt_path: Path) -> Path | None:
    config = _run_dir(ckpt_path) / RUN_CONFIG
    return config if config.is_file() else None


def add_trained_run_arguments(parser: ArgumentParser) -> None:
    """``--ckpt_path`` (required), ``--run_config``, ``--weights_only``, ``--device`` and every
    ``--model.*`` / ``--data.*`` option of :class:`NerfModule` and :class:`NerfDataModule` (their
    values default to the run's config; given ones override it)."""
    load_sampler_plugins()  # samplers by short name (--model.sampler=Disparity), plugins included
    parser.add_argument("--ckpt_path", type=str, required=True,
                        help="checkpoint of a fit run (e.g. RUN/checkpoints/last.ckpt), or the run folder "
                             "RUN for its last.ckpt.")
    parser.add_argument("--run_config", type=str | None, default=None,
                        help=f"the run's {RUN_CONFIG} or run directory (default: the checkpoint's run).")
    parser.add_argument("--weights_only", type=bool, default=True,
                        help="load the checkpoint with torch.load(weights_only=True): only tensors and plain "
                        f"values, no pickled code runs ({TRUST_OPTION} only for a file you trust).")
    parser.add_argument("--device", type=str, default="auto",
                        help="auto (a GPU if any), cpu, cuda or cuda:N.")
    _add_model_and_data(parser)
    # jsonargparse titles the groups by the classes' docstrings, which describe training.
    _describe_group(parser, "model", "the model",
                    f"The model, rebuilt from the checkpoint and its run's {RUN_CONFIG} (or the checkpoint's "
                    "hyperparameters); an option given here overrides the run's value.")
    _describe_group(parser, "data", "the data",
                    f"The data module, rebuilt from the run's {RUN_CONFIG}; an option given here overrides "
                    "the run's value (--data.root DIR when the dataset moved).")
    for action in parser._actions:  # argparse's list of every option
        if action.dest in TRAINING_ONLY:
            action.help = f"{action.help or ''} Used only in training: no effect here.".lstrip()


def _describe_group(parser: ArgumentParser, name: str, title: str, description: str) -> None:
    group = parser.groups[name]
    group.title = title
    group.description = description


def _add_model_and_data(parser: ArgumentParser) -> None:
    parser.add_class_arguments(NerfModule, "model", fail_untyped=False, sub_configs=True)
    parser.add_class_arguments(NerfDataModule, "data", fail_untyped=False, sub_configs=True)


def _given(args: list[str], names: tuple[str, ...]) -> dict[str, Any]:
    """The values of options ``names`` in ``args`` and the ``--config`` files among them, the later
    winning as in jsonargparse: what is needed before the full parse (which needs the run config)."""
    found: dict[str, Any] = {}
    index = 0
    while index < len(args):
        name, equals, value = args[index].partition("=")
        key = name[2:] if name.startswith("--") else ""
        if key == "config" or key in names:
            if not equals and index + 1 < len(args):
                index += 1
                value = args[index]
            if key != "config":
                found[key] = value
            else:
                try:
                    doc = yaml.safe_load(Path(value).read_text(encoding="utf-8"))
                except (OSError, yaml.YAMLError):  # the full parse reports it
                    doc = None
                for name in names:  # a dotted name (data.root) is a nested key of the file
                    value = doc
                    for part in name.split("."):
                        value = value.get(part) if isinstance(value, dict) else None
                    if value is not None:
                        found[name] = value
        index += 1
    return found


def _truth(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() not in ("false", "0", "no")


def _sections(ckpt_path: Path, run_config: str | None, weights_only: bool,
              data_root: str | None) -> tuple[dict[str, Any], Path | None]:
    """The ``model`` and ``data`` values to start from, and the config file they came from (``None``:
    the checkpoint's hyperparameters, used only outside a run directory and with ``--data.root``)."""
    if run_config is not None or _beside(ckpt_path) is not None or data_root is None:
        path = run_config_path(ckpt_path, None if run_config is None else Path(run_config))
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(config, dict) or "model" not in config:
            raise TrainedRunError(f"{path}: not a run config (expected a 'model' section)")
        return {key: config[key] for key in ("model", "data") if config.get(key) is not None}, path
    checkpoint = load_checkpoint_file(ckpt_path, map_location="cpu", weights_only=weights_only)
    model = model_hparams(checkpoint)
    if not model:
        raise TrainedRunError(f"{ckpt_path}: holds no model hyperparameters and there is no {RUN_CONFIG} "
                              f"in its run directory {_run_dir(ckpt_path)}; "
                              f"pass --run_config RUN_DIR/{RUN_CONFIG}")
    return {"model": model}, None


def parse_trained_run(parser: ArgumentParser, args: list[str]) -> tuple[Namespace, TrainedRun | None]:
    """Parse a trained-run command: the run's config first, then ``args`` over it.

    The checkpoint and the run config are found before the full parse, so that ``--print_config``
    prints the model and data the command will really use, and a printed config (which holds them
    all) runs unchanged with ``--config``. Without ``--ckpt_path`` (``--help``, ``--print_config``
    of the defaults, or the missing option's error) ``args`` are parsed alone.
    """
    given = _given(args, ("ckpt_path", "run_config", "weights_only", "data.root"))
    if "ckpt_path" not in given or any(arg in ("-h", "--help") for arg in args):
        return parser.parse_args(args), None
    ckpt_path = checkpoint_of(Path(given["ckpt_path"]))
    weights_only = _truth(given.get("weights_only", True))
    sections, config_path = _sections(ckpt_path, given.get("run_config"), weights_only,
                                      given.get("data.root"))
    base_parser = ArgumentParser(exit_on_error=False, env_prefix=False, default_env=False)
    _add_model_and_data(base_parser)
    try:
        base = base_parser.parse_object(sections)
    except argparse.ArgumentError as error:
        where = config_path or f"{ckpt_path} (hyperparameters)"
        raise TrainedRunError(f"{where}: {str(error).splitlines()[0]}") from None
    namespace = parser.parse_args(args, namespace=base)
    namespace.ckpt_path = str(ckpt_path)  # a run folder given stands for its last checkpoint
    run = TrainedRun(ckpt_path, config_path, namespace, parser, bool(namespace.weights_only),
                     device(namespace.device))
    return namespace, run


def device(name: str) -> torch.device:
    """``auto``: a GPU when there is one, else the CPU; any other name as torch spells it."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@dataclass
class TrainedRun:
    """A parsed trained-run command line; :meth:`load` builds the model and the data module.

    Loading waits until the command has checked its own options, so a wrong option is reported
    before any checkpoint is read or any dataset decoded.
    """

    ckpt_path: Path
    config_path: Path | None
    namespace: Namespace
    parser: ArgumentParser
    weights_only: bool = True
    device: torch.device = torch.device("cpu")  # noqa: RUF009 (immutable)

    @property
    def source(self) -> dict[str, str]:
        """Where the model came from, for the metadata of exported files."""
        config = str(self.config_path) if self.config_path else f"{self.ckpt_path} (hyperparameters)"
        return {"checkpoint": str(self.ckpt_path), "config": config}

    def load(self) -> tuple[NerfModule, NerfDataModule]:
        """The model in eval mode on :attr:`device`, and its data module after ``setup("test")``.

        Raises:
            CheckpointError: the checkpoint is truncated, corrupt, refused by weights-only loading or
                not a Lightning checkpoint (checked before the model is built).
            ConstructorArgumentError: a class of the config refused its arguments.
            TrainedRunError: the config and the checkpoint do not fit.
        """
        checkpoint = load_checkpoint_file(self.ckpt_path, map_location="cpu", weights_only=self.weights_only)
        sections = Namespace(model=self.namespace.model, data=self.namespace.data)
        parser = ArgumentParser(exit_on_error=False, env_prefix=False, default_env=False)
        _add_model_and_data(parser)
        instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # renamed in 4.49
        constructors = ConstructorLog()
        constructors.watch(parser)
        try:
            built = instantiate(sections)
        except (ValueError, TypeError) as error:
            refused = constructor_error(error, constructors, sections, parser)
            if refused is None:
                raise
            raise refused from error
        model: NerfModule = built.model
        datamodule: NerfDataModule = built.data
        # The data module's saved state names the frame the field was trained in (data.normalise):
        # set before setup, checked once setup has estimated this configuration's frame.
        try:
            datamodule.load_state_dict(checkpoint.get(type(datamodule).__qualname__, {}))
            datamodule.setup("test")
        except FrameMismatchError as error:
            raise TrainedRunError(f"{self.ckpt_path}: data.{error}") from None
        assert datamodule.scene_box is not None
        model.set_scene_box(datamodule.scene_box)
        model.on_load_checkpoint(checkpoint)
        try:
            model.load_state_dict(checkpoint["state_dict"])
        except RuntimeError as error:
            raise TrainedRunError(f"{self.ckpt_path}: does not fit the model of "
                                  f"{self.source['config']} ({str(error).splitlines()[0]})") from None
        return model.to(self.device).eval(), datamodule


def load_trained(
    ckpt_path: Path,
    config_path: Path,
    overrides: list[str] | None = None,
    device: str | torch.device = "cpu",
    weights_only: bool = True,
) -> tuple[NerfModule, NerfDataModule]:
    """The model of ``ckpt_path`` in eval mode on ``device``, and its data module after ``setup("test")``,
    with ``config_path``'s model and data sections and ``overrides`` (``["--data.root", "elsewhere"]``)
    over them. Raises as :meth:`TrainedRun.load`, and ``FileNotFoundError`` for a missing file."""
    parser = ArgumentParser(exit_on_error=False, env_prefix=False, default_env=False)
    add_trained_run_arguments(parser)
    args = ["--ckpt_path", str(ckpt_path), "--run_config", str(config_path),
            "--weights_only", str(weights_only).lower(), *(overrides or [])]
    try:
        _, run = parse_trained_run(parser, args)
    except argparse.ArgumentError as error:
        raise TrainedRunError(f"{config_path}: {str(error).splitlines()[0]}") from None
    assert run is not None
    run.device = torch.device(device)
    return run.load()
