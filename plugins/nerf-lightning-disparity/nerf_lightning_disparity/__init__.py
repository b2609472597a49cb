"""A nerf-lightning sampler plugin: intervals evenly spaced in disparity (``1/t``)."""

from nerf_lightning_disparity.sampler import Disparity

__all__ = ["Disparity"]
