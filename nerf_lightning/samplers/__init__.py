"""Layer ``samplers``: the sampler contract, the built-in samplers, plugin discovery, and the functions
the built-ins are made of, public for plugins in :mod:`.toolkit`.

May import ``core``, ``nn``, ``rendering``; nothing else of the package.
"""

from nerf_lightning.samplers.base import Sampler
from nerf_lightning.samplers.hierarchical import Hierarchical
from nerf_lightning.samplers.occupancy.grid import OccupancyGrid
from nerf_lightning.samplers.proposal import Proposal
from nerf_lightning.samplers.registry import ENTRY_POINT_GROUP, SamplerPlugin, load_sampler_plugins
from nerf_lightning.samplers.uniform import Uniform

__all__ = [
    "ENTRY_POINT_GROUP",
    "Hierarchical",
    "OccupancyGrid",
    "Proposal",
    "Sampler",
    "SamplerPlugin",
    "Uniform",
    "load_sampler_plugins",
]
