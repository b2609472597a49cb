"""A checkpoint's model hyperparameters as the defaults of a command's ``--model.*`` options.

``fit --ckpt_path``, ``validate``, ``test`` and ``predict`` build the model from the checkpoint's
hyperparameters (``NerfModule`` saves them: plain arguments and class_path/init_args specs of the
field, sampler and renderer), so ``nerf-lightning test --ckpt_path RUN/checkpoints/last.ckpt
--data.root DIR`` rebuilds the trained model without its config. LightningCLI merges them *over*
the parsed config, which would silently undo an explicit ``--model.eval_chunk_rays 1024``; here they
become the parser's defaults instead and the arguments are parsed again, so a config file or an
option still wins and the checkpoint fills in everything they leave unset (e.g. a sampler's
``--model.sampler.resolution 16`` given at training time only). Checkpoints without
hyperparameters (written before ``NerfModule`` saved them) change nothing.
"""

from __future__ import annotations

from typing import Any

from jsonargparse import ArgumentParser

from nerf_lightning.core.errors import CheckpointError

_LIGHTNING_KEYS = ("_instantiator", "_class_path")  # how load_from_checkpoint builds the model, no option


def model_hparams(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """The ``model.*`` values a loaded checkpoint holds (empty for one saved without hyperparameters)."""
    hparams = checkpoint.get("hyper_parameters") or {}
    return {key: value for key, value in dict(hparams).items() if key not in _LIGHTNING_KEYS}


def set_model_defaults(parser: ArgumentParser, hparams: dict[str, Any], ckpt_path: str) -> None:
    """Make ``hparams`` the defaults of ``parser``'s ``model.*`` options.

    Raises:
        CheckpointError: a hyperparameter is no option of the model (a checkpoint of another model
            class or version); one line naming the file.
    """
    try:
        parser.set_defaults({"model": hparams})
    except (KeyError, ValueError, TypeError) as error:
        detail = " ".join(str(error).strip("'\"").split())
        raise CheckpointError(
            f"{ckpt_path}: its model hyperparameters do not fit this NerfModule ({detail}); "
            "expected a checkpoint written by nerf-lightning fit"
        ) from error
