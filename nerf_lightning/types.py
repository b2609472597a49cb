"""The shared types under their public name: what sampler and field plugins import
(``from nerf_lightning.types import PackedSamples, Rays, SceneBox``). Defined in
:mod:`nerf_lightning.core.types`; this module only re-exports them for plugin authors.
"""

from nerf_lightning.core.types import DensityFn, PackedSamples, Rays, SceneBox

__all__ = ["DensityFn", "PackedSamples", "Rays", "SceneBox"]
