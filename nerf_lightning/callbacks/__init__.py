"""Callbacks that observe training from the side."""

from nerf_lightning.callbacks.preview import PreviewImages
from nerf_lightning.callbacks.sample_budget import SampleBudget
from nerf_lightning.callbacks.throughput import RaysPerSecond

__all__ = ["PreviewImages", "RaysPerSecond", "SampleBudget"]
