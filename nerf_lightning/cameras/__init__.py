"""Layer ``cameras``: the camera model (perspective and fisheye lenses, ray generation: the one place the
conventions are defined) and the per-image camera refinement learned in training.

May import ``core``, ``nn``; nothing else of the package.
"""

from nerf_lightning.cameras.refinement import CameraRefinement, so3_exp

__all__ = ["CameraRefinement", "so3_exp"]
