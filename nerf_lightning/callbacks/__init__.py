"""Layer ``callbacks``: Lightning callbacks that observe training from the side (sample budget, telemetry,
previews, reports, the live viewer); state lives in each callback's ``state_dict``.

May import ``core``, ``files``, ``cameras``, ``rendering``, ``fields``, ``samplers``, ``scenes``,
``data``, ``evaluation``, ``system``, ``viewer``; nothing else of the package.
"""

from nerf_lightning.callbacks.appearance_fit import AppearanceHalfFit
from nerf_lightning.callbacks.error_feedback import ErrorFeedback
from nerf_lightning.callbacks.eval_report import EvalReport
from nerf_lightning.callbacks.prediction_writer import PredictionWriter
from nerf_lightning.callbacks.preemption import Preemption
from nerf_lightning.callbacks.preview import PreviewImages
from nerf_lightning.callbacks.run_progress_bar import RunProgressBar
from nerf_lightning.callbacks.run_summary import RunSummary
from nerf_lightning.callbacks.sample_budget import SampleBudget
from nerf_lightning.callbacks.telemetry import Telemetry
from nerf_lightning.callbacks.throughput import RaysPerSecond
from nerf_lightning.callbacks.time_budget import ResumeTimeNotice
from nerf_lightning.callbacks.timed_validation import TimedValidation
from nerf_lightning.callbacks.validation_curve import ValidationCurve
from nerf_lightning.callbacks.viewer import Viewer

__all__ = ["AppearanceHalfFit", "ErrorFeedback", "EvalReport", "PredictionWriter", "Preemption",
           "PreviewImages", "RaysPerSecond", "ResumeTimeNotice", "RunProgressBar", "RunSummary",
           "SampleBudget", "Telemetry", "TimedValidation", "ValidationCurve", "Viewer"]
