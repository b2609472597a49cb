"""Layer ``fields``: radiance fields: the contract and the built-in fields.

May import ``core``, ``nn``; nothing else of the package.
"""

from nerf_lightning.fields.base import RadianceField
from nerf_lightning.fields.hash_grid import HashGridField
from nerf_lightning.fields.mlp import PositionalEncodingField

__all__ = ["HashGridField", "PositionalEncodingField", "RadianceField"]
