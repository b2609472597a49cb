"""Instant-NGP style field: hash-grid encoding with small MLPs (the default field)."""

from __future__ import annotations

from typing import Any, Literal

import torch
from torch import Tensor, nn

from nerf_lightning.fields.appearance import COLOR_CORRECTION_DIM, AppearanceEmbedding, correct_colors
from nerf_lightning.fields.base import RadianceField, trunc_exp
from nerf_lightning.fields.standalone import HashGridRadiance, frozen_copy
from nerf_lightning.nn.encodings import MAX_SH_DEGREE, HashGridEncoding, spherical_harmonics


def _mlp(in_dim: int, hidden: int, out_dim: int, num_hidden_layers: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    dim = in_dim
    for _ in range(num_hidden_layers):
        layers += [nn.Linear(dim, hidden), nn.ReLU(inplace=True)]
        dim = hidden
    layers.append(nn.Linear(dim, out_dim))
    return nn.Sequential(*layers)


# The finest level a footprint-sized grid may take (its corner indices stay far inside int32).
MAX_FOOTPRINT_RESOLUTION = 1 << 16


class HashGridField(RadianceField):
    """Multiresolution hash grid → density MLP → colour MLP on spherical harmonics of the view.

    Args:
        num_levels, features_per_level, log2_hashmap_size, base_resolution, max_resolution:
            the hash-grid encoding (resolutions are cells across the scene box's longest side).
            ``max_resolution: auto`` sizes the finest level to the training pixels instead
            (``cells_per_footprint``).
        cells_per_footprint: with ``max_resolution: auto``, how many cells of the finest level span
            the width of one training pixel at the content's centre
            (:meth:`~nerf_lightning.fields.RadianceField.set_pixel_footprint`, told before training;
            the chosen resolution is part of the checkpoint). Finer cells hold detail that no training
            pixel resolves on its own, which a grid fits to the training views and renders new views
            without: the train-test gap grows. The rule follows the capture's resolution and scale, so
            a scene at 800 pixels gets eight times the cells of the same scene at 100. Until told,
            the grid is built at 1024.
        hidden_dim: width of both MLPs.
        geometry_features: features passed from the density MLP to the colour MLP.
        color_layers: hidden layers of the colour MLP.
        direction_degree: the view direction enters the colour MLP as ``direction_degree ** 2``
            spherical harmonics (1 to 4, instant-ngp's count: 4 is bands 0 to 3). Fewer give colour
            fewer ways to vary with the view, which a few training views cannot pin down; 1 is a
            colour independent of the view.
        appearance_dim: size of a per-training-image appearance code fed to the colour MLP
            (:mod:`~nerf_lightning.fields.appearance`; evaluation views get the mean code);
            ``0`` (the default) has none.
        color_correction: instead of codes fed to the colour MLP, one affine map of colour per
            training image applied to the MLP's colours
            (:func:`~nerf_lightning.fields.appearance.correct_colors`, 12 numbers per image, zero at
            the start), the result clamped to ``[0, 1]``; evaluation views get the mean map, as they
            get the mean code. One map changes every colour of a photo alike, about as exposure and
            white balance do, and cannot change one part of a photo apart from the rest, as a code
            can. Not with ``appearance_dim``.
        color_correction_rate: the corrections are this times the numbers the optimizer moves, so
            under Adam they move this fraction of the field's step (and ``AppearanceHalfFit``'s fit
            of one moves at this fraction of its learning rate). Adam steps a parameter by about its
            learning rate whatever the size of its gradient, and a photo's correction gets its
            gradient from the few of a step's rays that photo holds, so at the field's rate noise
            alone moves a correction about as far as an exposure would.
        contraction: ``none``, ``l2`` or ``linf`` (:class:`~nerf_lightning.fields.RadianceField`).
            With contraction the scene box takes the middle half of each axis of the grid, so
            give it twice the ``max_resolution`` for the same detail inside the box.
        grid_decay: weight of Zip-NeRF's normalised weight decay on the hash grid: the table's
            gradient gets that of ``grid_decay * sum over levels of mean(feature ** 2)``
            (:meth:`~nerf_lightning.nn.encodings.HashGridEncoding.level_mean_squares`), as if the
            loss held that term (it is not in the logged loss); ``0`` (the default) adds nothing.
            Against sparse views: table rows that fit a few training rays and no others are pulled
            back to zero.
        level_anneal_steps: coarse-to-fine: over the first this many training steps the levels are
            switched on one after the other, coarsest first, each fading in over ``level_anneal_steps /
            (num_levels - 1)`` steps (a cosine ramp of the weight its features enter the density MLP
            with, as Nerfies anneals its frequencies); afterwards every level counts fully. Early
            geometry then comes from cells many training rays share, before fine cells can fit each
            view on its own. ``0`` (the default) uses every level from the first step. The weights
            are part of the checkpoint, so a run stopped mid-way renders as it trained.
        compiled: run the hash grid's kernels compiled by ``torch.compile``
            (:mod:`~nerf_lightning.nn.hash_kernels`): the same results up to float rounding, after a
            compile on first use that later runs load from Inductor's cache. Off by default: on a
            CPU the fused kernels leave the training step about as long as it was (the gathers and
            the scatter-add, which compiling cannot fuse away, dominate); on a GPU, where every eager
            operation is a kernel launch of its own, fusing them is what compiling is for.
    """

    finest_resolution: Tensor

    def __init__(self, num_levels: int = 16, features_per_level: int = 2, log2_hashmap_size: int = 17,
                 base_resolution: int = 16, max_resolution: int | Literal["auto"] = 1024,
                 cells_per_footprint: float = 1.25, hidden_dim: int = 64,
                 geometry_features: int = 15, color_layers: int = 2, direction_degree: int = MAX_SH_DEGREE,
                 appearance_dim: int = 0, color_correction: bool = False, color_correction_rate: float = 0.1,
                 contraction: str = "none", grid_decay: float = 0.0, level_anneal_steps: int = 0,
                 compiled: bool = False) -> None:
        super().__init__(contraction)
        if appearance_dim < 0:
            raise ValueError(f"appearance_dim must be >= 0, got {appearance_dim}")
        if color_correction and appearance_dim > 0:
            raise ValueError("color_correction replaces the appearance codes: give appearance_dim 0 with it, "
                             f"got {appearance_dim}")
        if not grid_decay >= 0.0:
            raise ValueError(f"grid_decay must be >= 0, got {grid_decay}")
        if max_resolution != "auto" and not (isinstance(max_resolution, int) and max_resolution > 0):
            raise ValueError(f"max_resolution must be a positive number of cells or 'auto', "
                             f"got {max_resolution!r}")
        if not cells_per_footprint > 0.0:
            raise ValueError(f"cells_per_footprint must be > 0, got {cells_per_footprint}")
        if not 1 <= direction_degree <= MAX_SH_DEGREE:
            raise ValueError(f"direction_degree must be 1 to {MAX_SH_DEGREE} (spherical harmonics of "
                             f"degree ** 2 terms), got {direction_degree}")
        if level_anneal_steps < 0:
            raise ValueError(f"level_anneal_steps must be >= 0 steps, got {level_anneal_steps}")
        self.grid_decay = grid_decay
        self.footprint_sized = max_resolution == "auto"
        self.cells_per_footprint = cells_per_footprint
        self._grid_args = (num_levels, features_per_level, log2_hashmap_size, base_resolution)
        self._compiled = compiled
        resolution = 1024 if max_resolution == "auto" else max_resolution
        if self.footprint_sized:  # in the state dict: a checkpoint rebuilds the grid it was trained with
            self.register_buffer("finest_resolution", torch.tensor(resolution, dtype=torch.int64))
        self.encoding = self._new_encoding(resolution, torch.device("cpu"))
        self.density_mlp = _mlp(self.encoding.output_dim, hidden_dim, 1 + geometry_features, 1)
        self.direction_degree = direction_degree
        self.color_mlp = _mlp(geometry_features + direction_degree**2 + appearance_dim, hidden_dim, 3,
                              color_layers)
        if not color_correction_rate > 0.0:
            raise ValueError(f"color_correction_rate must be > 0, got {color_correction_rate}")
        self.color_correction = color_correction
        self.color_correction_rate = color_correction_rate
        per_image = COLOR_CORRECTION_DIM if color_correction else appearance_dim
        self.appearance = AppearanceEmbedding(per_image) if per_image > 0 else None
        self.level_anneal_steps = level_anneal_steps
        if level_anneal_steps > 0:  # [L] the weight of each level's features, coarsest first
            self.register_buffer("level_weights", torch.ones(num_levels))
            self.register_buffer("_levels", torch.arange(num_levels, dtype=torch.float32), persistent=False)
            self.set_training_step(0)

    def _new_encoding(self, max_resolution: int, device: torch.device) -> HashGridEncoding:
        """A grid whose finest level has ``max_resolution`` cells (new parameters: make it before the
        optimizer is built), on ``device``."""
        encoding = HashGridEncoding(*self._grid_args, max_resolution, self._compiled).to(device)
        if self.grid_decay > 0.0:
            encoding.table.register_hook(self._decayed_table_gradient)
        return encoding

    def _resize_encoding(self, max_resolution: int) -> None:
        self.finest_resolution.fill_(max_resolution)
        self.encoding = self._new_encoding(max_resolution, self.encoding.table.device)

    def set_pixel_footprint(self, footprint: float) -> None:
        """With ``max_resolution: auto``: the finest level gets ``cells_per_footprint`` cells per
        ``footprint`` along the scene box's longest side (twice that with a contraction, where the
        box takes half of the grid), between ``base_resolution`` and ``2**16``."""
        if not self.footprint_sized:
            return
        if not footprint > 0.0:
            raise ValueError(f"the pixel footprint must be a positive width, got {footprint}")
        bounds = self.scene_bounds.detach().double().cpu()
        span = float((bounds[1] - bounds[0]).max()) * (1.0 if self.contraction == "none" else 2.0)
        base_resolution = self._grid_args[3]
        resolution = min(max(round(self.cells_per_footprint * span / footprint), base_resolution),
                         MAX_FOOTPRINT_RESOLUTION)
        if resolution != int(self.finest_resolution):
            self._resize_encoding(resolution)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        saved = state_dict.get(prefix + "finest_resolution") if self.footprint_sized else None
        if saved is not None and int(saved) != int(self.finest_resolution):
            self._resize_encoding(int(saved))  # the checkpoint's grid, whatever this data would choose
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def uses_image_indices(self) -> bool:
        return self.appearance is not None

    @property
    def appearance_codes(self) -> AppearanceEmbedding | None:
        return self.appearance

    def set_num_images(self, num_images: int) -> None:
        if self.appearance is not None:
            self.appearance.resize(num_images)

    def _decayed_table_gradient(self, grad: Tensor) -> Tensor:
        """The table's gradient plus that of ``grid_decay * level_mean_squares()``: ``2 * grid_decay *
        row_weights * table``, added in one pass where the gradient arrives instead of as a loss
        term, whose square, product and sum over every row would cost a pass each way."""
        encoding = self.encoding
        return torch.addcmul(grad, encoding.table.detach(), encoding.row_weights, value=2.0 * self.grid_decay)

    def set_training_step(self, step: int) -> None:
        """With ``level_anneal_steps``: level ``l`` of ``L`` gets weight ``(1 - cos(pi * clamp(a - l, 0,
        1))) / 2`` where ``a = 1 + (L - 1) * min(step / level_anneal_steps, 1)``: the coarsest level always
        counts, the finest from the last step of the ramp. On the weights' device, without a host read."""
        if self.level_anneal_steps <= 0:
            return
        num_levels = self._grid_args[0]
        reach = 1.0 + (num_levels - 1) * min(step / self.level_anneal_steps, 1.0)
        ramp = (reach - self._levels).clamp_(0.0, 1.0)
        self.level_weights.copy_((1.0 - torch.cos(torch.pi * ramp)) * 0.5)

    def _geometry(self, positions: Tensor) -> Tensor:
        features = self.encoding(self.normalize_positions(positions))  # [S, L * F], level after level
        if self.level_anneal_steps > 0:
            num_levels, features_per_level = self._grid_args[:2]
            weighted = features.view(-1, num_levels, features_per_level) * self.level_weights[:, None]
            features = weighted.view(-1, num_levels * features_per_level)
        return self.density_mlp(features)

    def density(self, positions: Tensor) -> Tensor:
        # exp in float32 also under autocast: in fp16 it overflows above ~11, in bf16 it is coarse.
        return trunc_exp(self._geometry(positions)[:, 0].float() - 1.0)

    def forward(self, positions: Tensor, directions: Tensor,
                image_indices: Tensor | None = None) -> tuple[Tensor, Tensor]:
        geometry = self._geometry(positions)
        density = trunc_exp(geometry[:, 0].float() - 1.0)
        color_in = [geometry[:, 1:], spherical_harmonics(directions, self.direction_degree).to(geometry)]
        if self.appearance is not None and not self.color_correction:
            color_in.append(self.appearance(image_indices, positions.shape[0]).to(geometry))
        rgb = self.color_mlp(torch.cat(color_in, dim=-1)).float().sigmoid()
        if self.appearance is not None and self.color_correction:
            codes = self.appearance(image_indices, positions.shape[0]).float()
            rgb = correct_colors(rgb, codes * self.color_correction_rate).clamp(0.0, 1.0)
        return density, rgb

    def standalone(self) -> HashGridRadiance:
        """The torch-only twin for export (:class:`~nerf_lightning.fields.standalone.HashGridRadiance`)."""
        code = self.appearance.mean_code().detach().float().cpu() if self.appearance is not None else None
        appearance = code if code is not None and not self.color_correction else torch.zeros(0)
        correction = code * self.color_correction_rate if code is not None and self.color_correction else None
        level_weights = self.level_weights if self.level_anneal_steps > 0 else None
        return HashGridRadiance(self.encoding.standalone(level_weights), frozen_copy(self.density_mlp),
                                frozen_copy(self.color_mlp), self.scene_bounds.detach().float().cpu(),
                                contraction=self.contraction, appearance=appearance,
                                direction_degree=self.direction_degree, color_correction=correction)
