"""LPIPS from torchmetrics, only when its backbone weights are already on this machine.

torchmetrics builds LPIPS on a torchvision backbone whose ImageNet weights torchvision would
download on first use. Nothing here downloads: the expected weight file in the torch hub
cache is checked *before* the metric is constructed, and when it is absent (or torchvision
is not installed) LPIPS is skipped with a reason.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from urllib.parse import urlparse

import torch
from torchmetrics import Metric

LPIPS_NETS = {"alex": "AlexNet_Weights", "vgg": "VGG16_Weights", "squeeze": "SqueezeNet1_1_Weights"}


def backbone_weights_path(net: str) -> Path:
    """Where torchvision keeps the ImageNet weights of the LPIPS backbone ``net`` (may not exist).

    The path ``torch.hub.load_state_dict_from_url`` uses: ``<torch hub dir>/checkpoints/<file name
    of the weights' URL>``. Needs torchvision.
    """
    import torchvision.models

    weights = getattr(torchvision.models, LPIPS_NETS[net]).DEFAULT
    return Path(torch.hub.get_dir()) / "checkpoints" / Path(urlparse(weights.url).path).name


def _linear_layers_path(net: str) -> Path:
    """The LPIPS linear-layer weights that ship inside torchmetrics."""
    import torchmetrics.functional.image.lpips as lpips_module

    return Path(lpips_module.__file__).resolve().parent / "lpips_models" / f"{net}.pth"


def load_lpips(net: str = "alex") -> tuple[Metric | None, str]:
    """``(metric, "")`` when LPIPS can be computed offline, else ``(None, reason)``.

    The metric takes ``[B, 3, H, W]`` images in ``[0, 1]`` (``normalize=True``); lower is better.
    """
    if net not in LPIPS_NETS:
        return None, f"unknown LPIPS network {net!r} (expected one of {', '.join(LPIPS_NETS)})"
    if importlib.util.find_spec("torchvision") is None:
        return None, "torchvision is not installed"
    try:
        weights = backbone_weights_path(net)
    except Exception as error:  # a torchvision that does not match torch fails on import
        return None, f"torchvision is unusable ({type(error).__name__}: {error})"
    if not weights.is_file():
        return None, f"no {net} backbone weights in the torch hub cache ({weights}); nothing is downloaded"
    if not _linear_layers_path(net).is_file():
        return None, f"torchmetrics has no LPIPS weights for {net}"
    from torchmetrics.image import LearnedPerceptualImagePatchSimilarity

    try:
        return LearnedPerceptualImagePatchSimilarity(net_type=net, normalize=True), ""
    except Exception as error:
        return None, f"{type(error).__name__}: {error}"
