"""Torch-only twins of the built-in fields, returned by their ``standalone()`` hooks for export.

Each reproduces its field in evaluation mode operation for operation (same dtypes, same order),
holds its weights as copies (buffers and frozen submodules, on the CPU), and compiles with both
``torch.export`` and ``torch.jit.script``:

- :class:`HashGridRadiance` ≙ ``HashGridField`` (hash encoding + MLPs + spherical harmonics);
- :class:`FrequencyRadiance` ≙ ``PositionalEncodingField``.

Both have ``density(positions [S, 3]) -> [S]`` and ``forward(positions [S, 3], directions [S, 3])
-> (density [S], rgb [S, 3])``, the signature every field's ``standalone()`` module has
(:meth:`nerf_lightning.fields.RadianceField.standalone`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from nerf_lightning.fields.appearance import COLOR_CORRECTION_DIM
from nerf_lightning.nn.contraction import positions_to_unit_cube  # compiled in
from nerf_lightning.nn.encodings import MAX_SH_DEGREE, HashGridLookup, spherical_harmonics  # compiled in
from nerf_lightning.nn.frozen import frozen_copy

__all__ = ["FrequencyRadiance", "HashGridRadiance", "frozen_copy"]


class HashGridRadiance(nn.Module):
    """Hash grid → density MLP (density ``exp(g_0 - 1)``) → colour MLP on SH of the view direction.

    Args:
        encoder: the hash encoding.
        density_mlp: ``[S, L F] → [S, 1 + G]`` (raw density, geometry features).
        color_mlp: ``[S, G + D**2 + A] → [S, 3]`` (before the sigmoid).
        bounds: ``[2, 3]`` scene box (lower, upper corners).
        contraction: how positions reach the grid (``positions_to_unit_cube``).
        appearance: ``[A]`` the appearance code every sample gets (the mean training code; ``[0]``
            for a field without appearance codes).
        direction_degree: ``D``, the degree of the view's spherical harmonics
            (:func:`~nerf_lightning.nn.encodings.spherical_harmonics`).
        color_correction: ``[12]`` the affine map of colour every sample gets (the mean training
            correction, :func:`~nerf_lightning.fields.appearance.correct_colors`, then clamped to
            ``[0, 1]``), or ``None``: none.
    """

    def __init__(self, encoder: HashGridLookup, density_mlp: nn.Module, color_mlp: nn.Module,
                 bounds: Tensor, contraction: str = "none", appearance: Tensor | None = None,
                 direction_degree: int = MAX_SH_DEGREE, color_correction: Tensor | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.density_mlp = density_mlp
        self.color_mlp = color_mlp
        self.register_buffer("bounds", bounds.detach().clone().float())
        self.contraction = contraction
        self.direction_degree = int(direction_degree)
        code = appearance if appearance is not None else torch.zeros(0)
        self.register_buffer("appearance", code.detach().clone().float())
        if color_correction is not None and color_correction.shape != (COLOR_CORRECTION_DIM,):
            raise ValueError(f"color_correction must have shape [{COLOR_CORRECTION_DIM}], "
                             f"got {list(color_correction.shape)}")
        self.corrects_colors = color_correction is not None
        correction = color_correction if color_correction is not None else torch.zeros(COLOR_CORRECTION_DIM)
        self.register_buffer("color_matrix", correction[:9].detach().float().view(3, 3).clone())
        self.register_buffer("color_offset", correction[9:].detach().clone().float())

    def _geometry(self, positions: Tensor) -> Tensor:
        unit = positions_to_unit_cube(positions, self.bounds, self.contraction)
        return self.density_mlp(self.encoder(unit))

    def density(self, positions: Tensor) -> Tensor:
        """``[S]`` density at world positions ``[S, 3]``."""
        return torch.exp(self._geometry(positions)[:, 0] - 1.0)

    def forward(self, positions: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        """Density ``[S]`` and colour ``[S, 3]`` at ``positions [S, 3]`` seen along ``directions [S, 3]``."""
        geometry = self._geometry(positions)
        density = torch.exp(geometry[:, 0] - 1.0)
        sh = spherical_harmonics(directions, self.direction_degree).to(geometry)
        code = self.appearance.expand(positions.shape[0], self.appearance.shape[0])
        rgb = torch.sigmoid(self.color_mlp(torch.cat([geometry[:, 1:], sh, code], dim=-1)))
        if self.corrects_colors:
            rgb = (rgb + rgb @ self.color_matrix.T + self.color_offset).clamp(0.0, 1.0)
        return density, rgb


class FrequencyRadiance(nn.Module):
    """NeRF's positional-encoding MLP with a skip connection (density ``softplus``, colour ``sigmoid``).

    Args:
        position_scales, direction_scales: ``[K]`` frequencies ``2^k pi`` of the two encodings
            (inputs included before the sines and cosines).
        trunk: the trunk's linear layers (ReLU after each).
        skip_layer: trunk layer whose input is concatenated with the position encoding.
        density_head, feature_head, color_head: the heads.
        bounds: ``[2, 3]`` scene box.
        contraction: how positions reach the encoding (``positions_to_unit_cube``).
    """

    def __init__(self, position_scales: Tensor, direction_scales: Tensor, trunk: nn.ModuleList,
                 skip_layer: int, density_head: nn.Module, feature_head: nn.Module, color_head: nn.Module,
                 bounds: Tensor, contraction: str = "none") -> None:
        super().__init__()
        self.register_buffer("position_scales", position_scales.detach().clone())
        self.register_buffer("direction_scales", direction_scales.detach().clone())
        self.trunk = trunk
        self.skip_layer = int(skip_layer)
        self.density_head = density_head
        self.feature_head = feature_head
        self.color_head = color_head
        self.register_buffer("bounds", bounds.detach().clone().float())
        self.contraction = contraction

    @staticmethod
    def _encode(x: Tensor, scales: Tensor) -> Tensor:
        angles = (x[..., None] * scales).flatten(-2)
        return torch.cat([x, torch.sin(angles), torch.cos(angles)], dim=-1)

    def _trunk(self, positions: Tensor) -> Tensor:
        unit = positions_to_unit_cube(positions, self.bounds, self.contraction)
        encoded = self._encode(unit * 2.0 - 1.0, self.position_scales)
        h = encoded
        for layer, linear in enumerate(self.trunk):
            if layer == self.skip_layer and layer > 0:
                h = torch.cat([h, encoded], dim=-1)
            h = torch.relu(linear(h))
        return h

    def density(self, positions: Tensor) -> Tensor:
        """``[S]`` density at world positions ``[S, 3]``."""
        return nn.functional.softplus(self.density_head(self._trunk(positions))[:, 0])

    def forward(self, positions: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        """Density ``[S]`` and colour ``[S, 3]``."""
        h = self._trunk(positions)
        density = nn.functional.softplus(self.density_head(h)[:, 0])
        color_in = torch.cat([self.feature_head(h), self._encode(directions, self.direction_scales)], dim=-1)
        return density, torch.sigmoid(self.color_head(color_in))
