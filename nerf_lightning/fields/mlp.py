"""The classic NeRF field: positional encoding and a deep MLP with a skip connection."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.fields.base import RadianceField
from nerf_lightning.fields.standalone import FrequencyRadiance, frozen_copy
from nerf_lightning.nn.encodings import FrequencyEncoding


class PositionalEncodingField(RadianceField):
    """Mildenhall et al. (2020): ``depth`` ReLU layers of ``width`` on encoded positions, a skip
    connection re-injecting the encoding, density from the trunk, colour from the trunk's
    features and the encoded view direction.

    Args:
        position_frequencies: octaves of the position encoding (positions in ``[-1, 1]`` over the box).
        direction_frequencies: octaves of the direction encoding.
        depth: trunk layers.
        width: trunk width.
        skip_layer: trunk layer whose input is concatenated with the encoding.
        contraction: ``none``, ``l2`` or ``linf`` (:class:`~nerf_lightning.fields.RadianceField`).
    """

    def __init__(self, position_frequencies: int = 10, direction_frequencies: int = 4, depth: int = 8,
                 width: int = 256, skip_layer: int = 4, contraction: str = "none") -> None:
        super().__init__(contraction)
        self.position_encoding = FrequencyEncoding(position_frequencies)
        self.direction_encoding = FrequencyEncoding(direction_frequencies)
        pos_dim = self.position_encoding.output_dim(3)
        dir_dim = self.direction_encoding.output_dim(3)
        self.skip_layer = skip_layer
        self.trunk = nn.ModuleList()
        for layer in range(depth):
            in_dim = pos_dim if layer == 0 else width
            if layer == skip_layer and layer > 0:
                in_dim += pos_dim
            self.trunk.append(nn.Linear(in_dim, width))
        self.density_head = nn.Linear(width, 1)
        self.feature_head = nn.Linear(width, width)
        self.color_head = nn.Sequential(nn.Linear(width + dir_dim, width // 2), nn.ReLU(inplace=True),
                                        nn.Linear(width // 2, 3))

    def _trunk(self, positions: Tensor) -> Tensor:
        encoded = self.position_encoding(self.normalize_positions(positions) * 2.0 - 1.0)
        h = encoded
        for layer, linear in enumerate(self.trunk):
            if layer == self.skip_layer and layer > 0:
                h = torch.cat([h, encoded], dim=-1)
            h = torch.relu(linear(h))
        return h

    def density(self, positions: Tensor) -> Tensor:
        return nn.functional.softplus(self.density_head(self._trunk(positions))[:, 0].float())

    def forward(self, positions: Tensor, directions: Tensor,
                image_indices: Tensor | None = None) -> tuple[Tensor, Tensor]:
        h = self._trunk(positions)
        density = nn.functional.softplus(self.density_head(h)[:, 0].float())  # fp32 under autocast
        color_in = torch.cat([self.feature_head(h), self.direction_encoding(directions)], dim=-1)
        return density, torch.sigmoid(self.color_head(color_in).float())

    def standalone(self) -> FrequencyRadiance | None:
        """The torch-only twin for export (:class:`~nerf_lightning.fields.standalone.FrequencyRadiance`);
        ``None`` for encodings without their input, which the twin does not reproduce."""
        if not (self.position_encoding.include_input and self.direction_encoding.include_input):
            return None
        trunk = frozen_copy(self.trunk)
        assert isinstance(trunk, nn.ModuleList)
        return FrequencyRadiance(
            self.position_encoding.scales.cpu(), self.direction_encoding.scales.cpu(), trunk, self.skip_layer,
            frozen_copy(self.density_head), frozen_copy(self.feature_head), frozen_copy(self.color_head),
            self.scene_bounds.detach().float().cpu(), contraction=self.contraction,
        )
