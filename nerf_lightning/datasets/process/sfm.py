"""Structure-from-motion with pycolmap, one step per function: features, matches, the sparse model.

Each step reads and writes files only (a COLMAP database and model folders), so :mod:`.run` can skip
a step whose inputs did not change. All steps run on the CPU (a pycolmap wheel has no CUDA), with
pycolmap's defaults except where noted:

* **one shared camera** (``CameraMode.SINGLE``): the photos of one capture come from one camera, and a
  shared camera constrains the intrinsics far better than one per photo;
* features are found on each photo scaled down to at most ``max_image_size`` pixels on its longer side
  (COLMAP scales the keypoints back, so the model is at the photos' full size): the cost of finding
  features grows with the pixel count, and full-size phone photos would gain little accuracy for it;
* fixed random seeds and, with ``deterministic`` (the default of ``data process``), one thread for
  every step, so that a rerun on the same photos gives the same model: with several threads the
  photos' ids follow the order in which their features finish, and RANSAC draws and bundle
  adjustment's sums depend on timing, so the model of a small or weak capture can differ between
  runs by several registered photos;
* only the largest model is kept when the mapper splits the photos into several.

pycolmap is imported only here and only when needed: it is the optional extra ``sfm``.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

CAMERA_MODELS = ("OPENCV", "PINHOLE", "SIMPLE_RADIAL")
"""Camera models offered; the converter reads each (:mod:`nerf_lightning.datasets.sources.colmap`)."""
MATCHERS = ("auto", "exhaustive", "sequential")
EXHAUSTIVE_BELOW = 100
"""``auto`` matches every pair below this many photos, else each photo with its neighbours in name
order (exhaustive matching grows with the square of the count)."""
SEED = 0


class ProcessError(ValueError):
    """``data process`` cannot go on; the message is one line (the command prints it, exit code 2)."""


def import_pycolmap() -> ModuleType:
    """pycolmap, silenced (its progress lines would bury the command's own; failures show in the model).

    Raises:
        ProcessError: pycolmap is not installed (says how to install it).
    """
    try:
        import pycolmap
    except ImportError:
        raise ProcessError(
            "structure-from-motion needs pycolmap, the 'sfm' extra: pip install -c constraints.txt "
            "'.[sfm]' in the project folder ('make install' installs it)"
        ) from None
    # glog levels: 0 info, 1 warning, 2 error, 3 fatal. Even its errors ("Failed to create any sparse
    # model") only restate what the command says in one line from the model it finds (or not).
    pycolmap.logging.minloglevel = 3
    return pycolmap


def resolve_matcher(matcher: str, count: int, *, video: bool = False) -> str:
    """``exhaustive`` or ``sequential`` for ``matcher``. ``auto``: ``sequential`` for a video's frames
    (in name order they are in time order, and a frame overlaps mostly its neighbours in time), else by
    :data:`EXHAUSTIVE_BELOW`."""
    if matcher not in MATCHERS:
        raise ProcessError(f"--matcher: expected one of {', '.join(MATCHERS)}, got {matcher!r}")
    if matcher == "auto":
        return "sequential" if video or count >= EXHAUSTIVE_BELOW else "exhaustive"
    return matcher


def check_camera_model(camera_model: str) -> None:
    """Raises :class:`ProcessError` unless ``camera_model`` is one of :data:`CAMERA_MODELS`."""
    if camera_model not in CAMERA_MODELS:
        raise ProcessError(f"--camera_model: expected one of {', '.join(CAMERA_MODELS)}, "
                           f"got {camera_model!r}")


def _threads(deterministic: bool) -> int:
    """pycolmap's ``num_threads``: one, or ``-1`` (every core)."""
    return 1 if deterministic else -1


def extract_features(database: Path, images: Path, names: list[str], camera_model: str,
                     max_image_size: int, deterministic: bool = True) -> None:
    """SIFT features of the photos ``names`` in ``images`` into a new ``database``, with one shared
    ``camera_model`` camera. ``deterministic``: on one thread (with several, the photos' ids in the
    database follow the order in which their features were done)."""
    pycolmap = import_pycolmap()
    check_camera_model(camera_model)
    database.unlink(missing_ok=True)  # COLMAP skips photos already in a database, changed or not
    database.parent.mkdir(parents=True, exist_ok=True)
    reader = pycolmap.ImageReaderOptions()
    reader.camera_model = camera_model
    extraction = pycolmap.FeatureExtractionOptions()
    extraction.max_image_size = max_image_size
    extraction.num_threads = _threads(deterministic)
    pycolmap.extract_features(database, images, image_names=names, camera_mode=pycolmap.CameraMode.SINGLE,
                              reader_options=reader, extraction_options=extraction,
                              device=pycolmap.Device.cpu)


def match_features(database: Path, matcher: str, deterministic: bool = True) -> None:
    """Match and geometrically verify photo pairs of ``database`` (earlier matches are cleared):
    every pair (``exhaustive``) or each photo with its next ones in name order (``sequential``; no loop
    detection, which needs a vocabulary tree file). ``deterministic``: one thread and seeded RANSAC."""
    pycolmap = import_pycolmap()
    db = pycolmap.Database.open(database)
    try:
        db.clear_matches()
        db.clear_two_view_geometries()
    finally:
        db.close()
    matching = pycolmap.FeatureMatchingOptions()
    matching.num_threads = _threads(deterministic)
    verification = pycolmap.TwoViewGeometryOptions()
    verification.ransac.random_seed = SEED
    match = pycolmap.match_sequential if matcher == "sequential" else pycolmap.match_exhaustive
    match(database, matching_options=matching, verification_options=verification, device=pycolmap.Device.cpu)


def map_photos(database: Path, images: Path, sparse: Path,
               on_registered: Callable[[int], None] = lambda count: None, deterministic: bool = True) -> None:
    """Incremental mapping with bundle adjustment; the largest model is written to ``sparse/0``
    (``sparse`` is replaced). ``on_registered(count)`` is called as photos are added (progress).
    ``deterministic``: on one thread."""
    pycolmap = import_pycolmap()
    shutil.rmtree(sparse, ignore_errors=True)
    models_folder = sparse.with_name(sparse.name + "-models")
    shutil.rmtree(models_folder, ignore_errors=True)
    models_folder.mkdir(parents=True)
    options = pycolmap.IncrementalPipelineOptions()
    options.random_seed = SEED
    options.num_threads = _threads(deterministic)
    options.min_model_size = 3  # the default 10 would drop every model of a small capture
    try:
        models = pycolmap.incremental_mapping(database, images, models_folder, options=options,
                                              initial_image_pair_callback=lambda: on_registered(2),
                                              next_image_callback=lambda: on_registered(1))
        (sparse / "0").mkdir(parents=True)
        if models:
            largest = max(models.values(), key=lambda model: model.num_reg_images())
            largest.write(sparse / "0")
    finally:
        shutil.rmtree(models_folder, ignore_errors=True)


@dataclass(frozen=True)
class SfmSummary:
    """What the model says: ``registered`` of ``total`` photos, their mean reprojection error in
    pixels, the number of 3D points and the shared camera."""

    registered: int
    total: int
    mean_reprojection_error: float
    points: int
    camera: dict[str, Any]

    def line(self, unit: str = "photos") -> str:
        """One line for the user; ``unit`` names what was registered (``photos``, ``video frames``)."""
        return (f"registered {self.registered}/{self.total} {unit}, mean reprojection error "
                f"{self.mean_reprojection_error:.2f} px, {self.points} points")

    def as_dict(self) -> dict[str, Any]:
        return {"registered": self.registered, "total": self.total, "points": self.points,
                "mean_reprojection_error": self.mean_reprojection_error, "camera": self.camera}


def summarise(model: Path, total: int) -> SfmSummary:
    """The :class:`SfmSummary` of the model folder ``model`` (an empty folder: nothing registered)."""
    if not (model / "images.bin").is_file():
        return SfmSummary(0, total, float("nan"), 0, {})
    pycolmap = import_pycolmap()
    reconstruction = pycolmap.Reconstruction(model)
    cameras = list(reconstruction.cameras.values())
    camera = {} if not cameras else {"model": cameras[0].model.name, "width": cameras[0].width,
                                     "height": cameras[0].height,
                                     "params": [float(p) for p in cameras[0].params]}
    return SfmSummary(reconstruction.num_reg_images(), total,
                      float(reconstruction.compute_mean_reprojection_error()),
                      reconstruction.num_points3D(), camera)
