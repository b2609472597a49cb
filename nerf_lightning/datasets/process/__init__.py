"""``nerf-lightning data process SRC DST``: photos or a video -> a validated dataset (structure-from-motion).

Modules: :mod:`.photos` (which files are photos, each decoded up front), :mod:`.video` (a video's frames:
spread evenly, the sharpest of each neighbourhood), :mod:`.sfm` (the pycolmap steps and the model's
summary), :mod:`.downscaled` (``images_2|4|8``), :mod:`.progress` (a bar per stage), :mod:`.state`
(``process.json``: stage keys for resuming), :mod:`.run` (the stages, in a work folder moved into place
on success) and :mod:`.align` (similarity alignment and pose errors against known cameras, for
measuring accuracy). pycolmap, the optional extra ``sfm``, is imported only when structure-from-motion
runs.
"""

from nerf_lightning.datasets.process.detect import needs_processing
from nerf_lightning.datasets.process.run import ProcessResult, process_photos, process_source
from nerf_lightning.datasets.process.sfm import CAMERA_MODELS, MATCHERS, ProcessError
from nerf_lightning.datasets.process.video import DEFAULT_NUM_FRAMES, VIDEO_SUFFIXES

__all__ = ["CAMERA_MODELS", "DEFAULT_NUM_FRAMES", "MATCHERS", "VIDEO_SUFFIXES", "ProcessError",
           "ProcessResult", "needs_processing", "process_photos", "process_source"]
