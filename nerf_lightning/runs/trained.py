"""A trained model and its data module, rebuilt from a run's ``config.yaml`` and a checkpoint.

The model and data arguments are read from the config LightningCLI saved in the run directory
(the data module's arguments are only there; the model's hyperparameters in the checkpoint serve
``NerfModule.load_from_checkpoint`` and the LightningCLI commands), then the weights are loaded with
``weights_only`` (no pickled code runs; ``--weights_only false`` for a trusted file that needs
it), in the same order as ``test --ckpt_path``: the data module's scene box first, then the
checkpoint's state. A broken checkpoint is a one-line
:class:`~nerf_lightning.runs.checkpoint_io.CheckpointError`, a constructor refusing an argument a
one-line :class:`~nerf_lightning.config_errors.ConstructorArgumentError`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import ArgumentParser

from nerf_lightning.config_errors import constructor_error
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.module import NerfModule
from nerf_lightning.runs.checkpoint_io import TRUST_OPTION, load_checkpoint_file
from nerf_lightning.samplers import load_sampler_plugins

RUN_CONFIG = "config.yaml"


class TrainedRunError(ValueError):
    """The checkpoint or the run config cannot be used."""


def add_trained_run_arguments(parser: argparse.ArgumentParser) -> None:
    """``--ckpt_path`` (required) and ``--config`` of the commands that load a trained run."""
    parser.add_argument("--ckpt_path", "--ckpt-path", dest="ckpt_path", type=Path, required=True,
                        help="checkpoint of a fit run (e.g. RUN/checkpoints/last.ckpt)")
    parser.add_argument("--config", type=Path, default=None,
                        help="the run's config.yaml or run directory (default: the checkpoint's run)")
    parser.add_argument("--weights_only", "--weights-only", dest="weights_only", type=_bool, default=True,
                        metavar="{true,false}",
                        help="load the checkpoint with torch.load(weights_only=True): only tensors and "
                        "plain values, no pickled code runs (default: true; "
                        f"{TRUST_OPTION} only for a file you trust)")


def _bool(text: str) -> bool:
    value = {"true": True, "false": False}.get(text.strip().lower())
    if value is None:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return value


def run_config_path(ckpt_path: Path, config: Path | None = None) -> Path:
    """The config to rebuild ``ckpt_path``'s model with.

    ``config`` (a ``config.yaml`` or a run directory holding one) when given, else the
    ``config.yaml`` of the run the checkpoint belongs to (``RUN/checkpoints/x.ckpt`` →
    ``RUN/config.yaml``).
    """
    if config is None:
        run = ckpt_path.parent.parent if ckpt_path.parent.name == "checkpoints" else ckpt_path.parent
        config = run / RUN_CONFIG
        if not config.is_file():
            raise TrainedRunError(
                f"{ckpt_path}: no {RUN_CONFIG} in its run directory {run}; pass --config RUN_DIR/{RUN_CONFIG}"
            )
        return config
    config = config / RUN_CONFIG if config.is_dir() else config
    if not config.is_file():
        raise FileNotFoundError(f"{config}: no such config file")
    return config


def _parser() -> ArgumentParser:
    parser = ArgumentParser(prog="nerf-lightning render", exit_on_error=False)
    parser.add_class_arguments(NerfModule, "model", fail_untyped=False, sub_configs=True)
    parser.add_class_arguments(NerfDataModule, "data", fail_untyped=False, sub_configs=True)
    return parser


def load_trained(
    ckpt_path: Path,
    config_path: Path,
    overrides: list[str] | None = None,
    device: str | torch.device = "cpu",
    weights_only: bool = True,
) -> tuple[NerfModule, NerfDataModule]:
    """The model of ``ckpt_path`` in eval mode on ``device``, and its data module after ``setup("test")``.

    Args:
        ckpt_path: a Lightning checkpoint of a ``fit`` run.
        config_path: that run's ``config.yaml`` (its ``model`` and ``data`` sections are used).
        overrides: ``--model.*`` / ``--data.*`` arguments applied on top of the config
            (e.g. ``["--data.root", "elsewhere"]``).
        device: where the model goes.
        weights_only: load the checkpoint with ``torch.load(weights_only=...)``.

    Raises:
        FileNotFoundError: no checkpoint file, or no ``config_path``.
        CheckpointError: the checkpoint is truncated, corrupt, refused by weights-only loading or
            not a Lightning checkpoint (checked before the model is built).
        ConstructorArgumentError: a class of the config refused its arguments.
        TrainedRunError: the config or the checkpoint does not fit.
    """
    if not ckpt_path.is_file():
        raise FileNotFoundError(f"{ckpt_path}: no such checkpoint")
    checkpoint = load_checkpoint_file(ckpt_path, map_location="cpu", weights_only=weights_only)
    load_sampler_plugins()  # samplers by short name, plugins included
    config: dict[str, Any] = yaml.safe_load(config_path.read_text()) or {}
    if not isinstance(config, dict) or "model" not in config:
        raise TrainedRunError(f"{config_path}: not a run config (expected a 'model' section)")
    parser = _parser()
    try:
        namespace = parser.parse_object({key: config[key] for key in ("model", "data") if key in config})
        namespace = parser.parse_args(overrides or [], namespace=namespace)
    except argparse.ArgumentError as error:
        raise TrainedRunError(f"{config_path}: {str(error).splitlines()[0]}") from None
    instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # renamed in 4.49
    try:
        built = instantiate(namespace)
    except (ValueError, TypeError) as error:
        refused = constructor_error(error, namespace, parser)
        if refused is None:
            raise
        raise refused from error
    model: NerfModule = built.model
    datamodule: NerfDataModule = built.data
    datamodule.setup("test")
    assert datamodule.scene_box is not None
    model.set_scene_box(datamodule.scene_box)
    model.on_load_checkpoint(checkpoint)
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as error:
        raise TrainedRunError(
            f"{ckpt_path}: does not fit the model of {config_path} ({str(error).splitlines()[0]})"
        ) from None
    return model.to(device).eval(), datamodule

