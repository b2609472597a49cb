"""Exports of a trained model: mesh and point cloud (PLY), field grid (.npz), standalone TorchScript.

One module per format (``mesh``, ``pointcloud``, ``grid``, ``torchscript``), the torch-only
renderer the TorchScript export is made of (``standalone``), its check in a fresh process
(``verify``). The ``nerf-lightning export`` command is :mod:`nerf_lightning.commands.export`.
"""

from nerf_lightning.export.common import ExportError
from nerf_lightning.export.verify import VerifyError

__all__ = ["ExportError", "VerifyError"]
