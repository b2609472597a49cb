"""``nerf-lightning data process SRC DST``: a folder of photos -> a validated dataset (structure-from-motion).

Modules: :mod:`.photos` (which files are photos, checked up front), :mod:`.sfm` (the pycolmap steps and
the model's summary), :mod:`.state` (``process.json``: stage keys for resuming), :mod:`.run` (the
stages, in a work folder moved into place on success) and :mod:`.align` (similarity alignment and pose
errors against known cameras, for measuring accuracy). pycolmap, the optional extra ``sfm``, is
imported only when structure-from-motion runs.
"""

from nerf_lightning.data.process.run import ProcessResult, process_photos
from nerf_lightning.data.process.sfm import CAMERA_MODELS, MATCHERS, ProcessError

__all__ = ["CAMERA_MODELS", "MATCHERS", "ProcessError", "ProcessResult", "process_photos"]
