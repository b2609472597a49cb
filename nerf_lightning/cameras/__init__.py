"""Per-image camera parameters learned during training (pose refinement)."""

from nerf_lightning.cameras.refinement import CameraRefinement, so3_exp

__all__ = ["CameraRefinement", "so3_exp"]
