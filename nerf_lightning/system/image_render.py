"""What an evaluation step returns: one whole rendered image beside its target."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor


@dataclass(frozen=True)
class ImageRender:
    """A whole rendered image and its target, as returned by evaluation steps (``[H, W, C]``);
    ``mask`` ``[H, W]`` bool marks the pixels that count in metrics (``None``: all)."""

    target: Tensor
    rgb: Tensor
    depth: Tensor
    opacity: Tensor
    samples_per_ray: Tensor
    near: float
    far: float
    mask: Tensor | None = None

    def to(self, device: torch.device | str) -> ImageRender:
        """The same render with its tensors on ``device``.

        Lightning moves what ``predict_step`` returns to the CPU with ``to`` when it has one; it
        cannot rebuild a frozen dataclass field by field.
        """
        tensors = {name: getattr(self, name).to(device)
                   for name in ("target", "rgb", "depth", "opacity", "samples_per_ray")}
        mask = None if self.mask is None else self.mask.to(device)
        return replace(self, **tensors, mask=mask)
