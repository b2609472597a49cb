"""The radiance-field contract: positions and directions in, density and colour out."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

from nerf_lightning.constructor_spec import RecordsConstructorArguments
from nerf_lightning.types import SceneBox


class TruncExp(torch.autograd.Function):
    """``exp`` whose gradient is clamped for large inputs (instant-NGP's density activation)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        return torch.exp(x)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return grad * torch.exp(x.clamp(max=15.0))


def trunc_exp(x: Tensor) -> Tensor:
    return TruncExp.apply(x)


class RadianceField(RecordsConstructorArguments, nn.Module, ABC):
    """Maps world positions (and view directions) to density and colour.

    The scene box is a buffer, so it travels with checkpoints and devices; the training
    system sets it from the data before the first step. The constructor's arguments are recorded
    (:mod:`nerf_lightning.constructor_spec`), so checkpoints can say how to rebuild the field.
    """

    scene_bounds: Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scene_bounds", SceneBox.cube(1.5).as_tensor())

    def set_scene_box(self, box: SceneBox) -> None:
        self.scene_bounds.copy_(box.as_tensor())

    def normalize_positions(self, positions: Tensor) -> Tensor:
        """``[S, 3]`` world positions mapped to ``[0, 1]^3`` over the scene box (clamped)."""
        lower, upper = self.scene_bounds[0], self.scene_bounds[1]
        return ((positions - lower) / (upper - lower)).clamp(0.0, 1.0)

    @abstractmethod
    def density(self, positions: Tensor) -> Tensor:
        """``[S]`` non-negative density at world positions ``[S, 3]``."""

    @abstractmethod
    def forward(self, positions: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        """Density ``[S]`` and colour ``[S, 3]`` in ``[0, 1]`` at ``positions [S, 3]``
        seen along unit ``directions [S, 3]``."""

    def standalone(self) -> nn.Module | None:
        """A torch-only copy of this field in evaluation mode, for ``nerf-lightning export``; ``None``
        (the default) when the field cannot be exported.

        The module must have ``density(positions [S, 3]) -> [S]`` and ``forward(positions [S, 3],
        directions [S, 3]) -> (density [S], rgb [S, 3])``, computing exactly what :meth:`density`
        and :meth:`forward` compute in evaluation mode, from copies of the weights (later training
        must not change it), with code that ``torch.export`` can trace (and ``torch.jit.script``
        compile, for the TorchScript format). Export queries it on the CPU in float32.
        """
        return None
