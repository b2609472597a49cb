"""The radiance-field contract: positions and directions in, density and colour out."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

from nerf_lightning.core.constructor_spec import RecordsConstructorArguments
from nerf_lightning.core.types import SceneBox
from nerf_lightning.fields.appearance import AppearanceEmbedding
from nerf_lightning.nn.contraction import check_contraction, positions_to_unit_cube


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
    (:mod:`nerf_lightning.core.constructor_spec`), so checkpoints can say how to rebuild the field.

    Args:
        contraction: ``"none"`` stretches the scene box over the encoding's unit cube (positions
            outside are clamped onto its faces: object scenes); ``"l2"`` or ``"linf"`` keep the box
            as the inner half of the cube and contract all of space beyond it into the rest
            (unbounded real scenes; :mod:`nerf_lightning.nn.contraction`). Pair a contracting field
            with rays that run past the box (``data.unbounded``).

    Per-image parameters: a field may keep a table indexed by training image (appearance
    embeddings). :meth:`set_num_images` tells it how many there are before training, and
    :meth:`forward` then gets each sample's image index; evaluation views are not training images
    and get ``None``.

    Detail sized to the capture: :meth:`set_pixel_footprint` tells the field, before training, how
    wide a training pixel is at the content, for a field that sizes its finest detail to it.
    """

    scene_bounds: Tensor

    def __init__(self, contraction: str = "none") -> None:
        super().__init__()
        self.contraction = check_contraction(contraction)
        self.register_buffer("scene_bounds", SceneBox.cube(1.5).as_tensor())

    def set_scene_box(self, box: SceneBox) -> None:
        self.scene_bounds.copy_(box.as_tensor())

    @property
    def uses_image_indices(self) -> bool:
        """Whether :meth:`forward` wants each sample's training-image index (default: no, and the
        training system then calls it with positions and directions only)."""
        return False

    def set_num_images(self, num_images: int) -> None:
        """Size per-image tables for ``num_images`` training images (default: the field has none).

        Called before training starts, after :meth:`set_scene_box`; a checkpoint restored later
        brings its own tables.
        """

    def set_pixel_footprint(self, footprint: float) -> None:
        """Size what depends on the training pixels' footprint: ``footprint`` is the world-space width of
        one training pixel at the content's centre (default: the field has nothing that does).

        Called before training starts, after :meth:`set_scene_box`; a checkpoint restored later brings
        what it was sized to.
        """

    def set_training_step(self, step: int) -> None:
        """Set what follows the training progress to its value at ``step`` (the trainer's global step),
        before each training step's forward pass (default: the field has nothing that does).

        Called with the same step by every rank and again after a resume, so it must depend on ``step``
        alone; what it sets that a render needs belongs in the state dict.
        """

    @property
    def appearance_codes(self) -> AppearanceEmbedding | None:
        """The field's per-image appearance codes, when it has them (default: none). Test-time
        evaluation fits a code of its own through them (:mod:`nerf_lightning.evaluation.appearance_fit`)."""
        return None

    def normalize_positions(self, positions: Tensor) -> Tensor:
        """``[S, 3]`` world positions mapped to ``[0, 1]^3`` over the scene box: clamped onto it, or
        contracted (see ``contraction``)."""
        return positions_to_unit_cube(positions, self.scene_bounds, self.contraction)

    @abstractmethod
    def density(self, positions: Tensor) -> Tensor:
        """``[S]`` non-negative density at world positions ``[S, 3]``."""

    @abstractmethod
    def forward(self, positions: Tensor, directions: Tensor,
                image_indices: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Density ``[S]`` and colour ``[S, 3]`` in ``[0, 1]`` at ``positions [S, 3]``
        seen along unit ``directions [S, 3]``.

        ``image_indices [S]`` (int64) is the training image each sample's ray comes from, in
        training; ``None`` for views that are not training images (evaluation), where a field
        with per-image parameters uses a documented stand-in (their mean, for example). Fields
        without per-image parameters ignore it.
        """

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
