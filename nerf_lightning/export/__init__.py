"""Layer ``export``: what is made from a trained model: mesh and point cloud (PLY), field grid (.npz),
standalone renderer, novel-view frames.

One module per format (``mesh``, ``pointcloud``, ``grid``, ``pt2`` (``torch.export``), ``torchscript``),
the renderer both of the last are made of (``standalone``) and its assembly from the field's and
sampler's ``standalone()`` hooks (``assemble``), and its check in a fresh process (``verify``). The
``nerf-lightning export`` command is :mod:`nerf_lightning.commands.export`.

May import ``core``, ``files``, ``nn``, ``cameras``, ``rendering``, ``fields``, ``samplers``,
``scenes``, ``datasets``, ``data``, ``system``; nothing else of the package.
"""

from nerf_lightning.export.common import ExportError
from nerf_lightning.export.verify import VerifyError

__all__ = ["ExportError", "VerifyError"]
