"""Exports of a trained model: mesh and point cloud (PLY), field grid (.npz), standalone TorchScript.

One module per format (``mesh``, ``pointcloud``, ``grid``, ``torchscript``), the torch-only
renderer the TorchScript export is made of (``standalone``), its check in a fresh process
(``verify``) and the ``nerf-lightning export`` command (``cli``).
"""

from nerf_lightning.export.common import ExportError
from nerf_lightning.export.verify import VerifyError

__all__ = ["ExportError", "VerifyError"]
