"""Instant-NGP style field: hash-grid encoding with small MLPs (the default field)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.fields.appearance import AppearanceEmbedding
from nerf_lightning.fields.base import RadianceField, trunc_exp
from nerf_lightning.fields.standalone import HashGridRadiance, frozen_copy
from nerf_lightning.nn.encodings import HashGridEncoding, spherical_harmonics_deg4


def _mlp(in_dim: int, hidden: int, out_dim: int, num_hidden_layers: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    dim = in_dim
    for _ in range(num_hidden_layers):
        layers += [nn.Linear(dim, hidden), nn.ReLU(inplace=True)]
        dim = hidden
    layers.append(nn.Linear(dim, out_dim))
    return nn.Sequential(*layers)


class HashGridField(RadianceField):
    """Multiresolution hash grid → density MLP → colour MLP on spherical harmonics of the view.

    Args:
        num_levels, features_per_level, log2_hashmap_size, base_resolution, max_resolution:
            the hash-grid encoding (resolutions are cells across the scene box).
        hidden_dim: width of both MLPs.
        geometry_features: features passed from the density MLP to the colour MLP.
        color_layers: hidden layers of the colour MLP.
        appearance_dim: size of a per-training-image appearance code fed to the colour MLP
            (:mod:`~nerf_lightning.fields.appearance`; evaluation views get the mean code);
            ``0`` (the default) has none.
        contraction: ``none``, ``l2`` or ``linf`` (:class:`~nerf_lightning.fields.RadianceField`).
            With contraction the scene box takes the middle half of each axis of the grid, so
            give it twice the ``max_resolution`` for the same detail inside the box.
        grid_decay: weight of Zip-NeRF's normalised weight decay on the hash grid: the table's
            gradient gets that of ``grid_decay * sum over levels of mean(feature ** 2)``
            (:meth:`~nerf_lightning.nn.encodings.HashGridEncoding.level_mean_squares`), as if the
            loss held that term (it is not in the logged loss); ``0`` (the default) adds nothing.
            Against sparse views: table rows that fit a few training rays and no others are pulled
            back to zero.
        compiled: run the hash grid's kernels compiled by ``torch.compile``
            (:mod:`~nerf_lightning.nn.hash_kernels`): the same results up to float rounding, after a
            compile on first use that later runs load from Inductor's cache. Off by default: on a
            CPU the fused kernels leave the training step about as long as it was (the gathers and
            the scatter-add, which compiling cannot fuse away, dominate); on a GPU, where every eager
            operation is a kernel launch of its own, fusing them is what compiling is for.
    """

    def __init__(self, num_levels: int = 16, features_per_level: int = 2, log2_hashmap_size: int = 17,
                 base_resolution: int = 16, max_resolution: int = 1024, hidden_dim: int = 64,
                 geometry_features: int = 15, color_layers: int = 2, appearance_dim: int = 0,
                 contraction: str = "none", grid_decay: float = 0.0, compiled: bool = False) -> None:
        super().__init__(contraction)
        if appearance_dim < 0:
            raise ValueError(f"appearance_dim must be >= 0, got {appearance_dim}")
        if not grid_decay >= 0.0:
            raise ValueError(f"grid_decay must be >= 0, got {grid_decay}")
        self.grid_decay = grid_decay
        self.encoding = HashGridEncoding(num_levels, features_per_level, log2_hashmap_size,
                                         base_resolution, max_resolution, compiled)
        self.density_mlp = _mlp(self.encoding.output_dim, hidden_dim, 1 + geometry_features, 1)
        self.color_mlp = _mlp(geometry_features + 16 + appearance_dim, hidden_dim, 3, color_layers)
        self.appearance = AppearanceEmbedding(appearance_dim) if appearance_dim > 0 else None
        if grid_decay > 0.0:
            self.encoding.table.register_hook(self._decayed_table_gradient)

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

    def _geometry(self, positions: Tensor) -> Tensor:
        return self.density_mlp(self.encoding(self.normalize_positions(positions)))

    def density(self, positions: Tensor) -> Tensor:
        # exp in float32 also under autocast: in fp16 it overflows above ~11, in bf16 it is coarse.
        return trunc_exp(self._geometry(positions)[:, 0].float() - 1.0)

    def forward(self, positions: Tensor, directions: Tensor,
                image_indices: Tensor | None = None) -> tuple[Tensor, Tensor]:
        geometry = self._geometry(positions)
        density = trunc_exp(geometry[:, 0].float() - 1.0)
        color_in = [geometry[:, 1:], spherical_harmonics_deg4(directions).to(geometry)]
        if self.appearance is not None:
            color_in.append(self.appearance(image_indices, positions.shape[0]).to(geometry))
        rgb = self.color_mlp(torch.cat(color_in, dim=-1)).float().sigmoid()
        return density, rgb

    def standalone(self) -> HashGridRadiance:
        """The torch-only twin for export (:class:`~nerf_lightning.fields.standalone.HashGridRadiance`)."""
        appearance = (self.appearance.mean_code().detach().float().cpu() if self.appearance is not None
                      else torch.zeros(0))
        return HashGridRadiance(self.encoding.standalone(), frozen_copy(self.density_mlp),
                                frozen_copy(self.color_mlp), self.scene_bounds.detach().float().cpu(),
                                contraction=self.contraction, appearance=appearance)
