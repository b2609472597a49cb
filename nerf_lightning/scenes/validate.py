"""Check a whole dataset without training: ``nerf-lightning data validate DIR``.

:func:`validate_dataset` runs the loaders' own checks (see :mod:`nerf_lightning.scenes.problems`) in
collect mode, so it reports every problem the loaders would stop at, one :class:`DatasetError` each,
with the loader's message. A frame with a problem is reported and left out of the later checks
(its image is not opened); checking goes on with the next frame and the next split. Images are
decoded once each (:func:`~nerf_lightning.scenes.images.decoded_size`) and their pixels dropped.

Frames of a nerfstudio capture whose image is missing are warnings (the loader skips them), not
problems, unless no image exists at all; a frame's ``mask_path`` that is missing, unreadable or of
another size than its image is a problem.

:func:`require_valid_dataset` raises :class:`DatasetValidationError` with all problems; training
calls it before loading, so a broken dataset is refused before training starts.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nerf_lightning.scenes.errors import DatasetError, DatasetValidationError
from nerf_lightning.scenes.formats.blender import BlenderFrame, BlenderScan, require_image, scan_blender
from nerf_lightning.scenes.formats.common import check_downscalable, check_downscale
from nerf_lightning.scenes.formats.llff import LlffScan, check_image_aspect, scan_llff, split_images
from nerf_lightning.scenes.formats.nerfstudio import (
    NerfstudioScan,
    check_image_size,
    check_mask_size,
    scan_nerfstudio,
    split_frames,
)
from nerf_lightning.scenes.images import decoded_size
from nerf_lightning.scenes.loading import LOADERS, detect_format
from nerf_lightning.scenes.problems import Problems
from nerf_lightning.scenes.split_sizes import check_split_sizes

SPLITS = ("train", "val", "test")
STAGE_SPLITS: dict[str, tuple[str, ...]] = {
    "fit": ("train", "val"),
    "validate": ("train", "val"),
    "test": ("train", "test"),
    "predict": ("train", "test"),
}
"""Lightning stage -> the splits :class:`~nerf_lightning.data.datamodule.NerfDataModule` loads for it."""

Validator = Callable[[Path, int, Sequence[str], Problems], dict[str, int]]
"""``(root, downscale, splits, problems) -> {split: frames with no problem}``; reports to ``problems``."""


@dataclass
class ValidationReport:
    """What :func:`validate_dataset` found.

    Attributes:
        root: the dataset folder.
        dataset_format: the format checked (``None`` when it could not be detected).
        problems: everything that stops loading, one :class:`DatasetError` each, in the order found.
        warnings: frames loading skips (nerfstudio frames whose image is missing), one each.
        frames: split -> number of its frames with no problem.
    """

    root: Path
    dataset_format: str | None
    problems: list[DatasetError] = field(default_factory=list)
    warnings: list[DatasetError] = field(default_factory=list)
    frames: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the dataset can be loaded (warnings allowed)."""
        return not self.problems

    def summary(self) -> str:
        """``DIR: OK, train/val/test frames: a/b/c`` or ``DIR: N problems; train/val/test frames: ...``."""
        counts = f"{'/'.join(self.frames)} frames: {'/'.join(str(n) for n in self.frames.values())}"
        if self.ok:
            return f"{self.root}: OK, {counts}"
        count = len(self.problems)
        return f"{self.root}: {count} problem{'s' if count != 1 else ''}; {counts}"

    def lines(self) -> list[str]:
        """One line per warning (``warning: ...``), one per problem, then :meth:`summary`."""
        return [f"warning: {w}" for w in self.warnings] + [str(p) for p in self.problems] + [self.summary()]


# ------------------------------------------------------------------------------------- per format


def _count(checks: Sequence[object]) -> int:
    return sum(check is not None for check in checks)


def _blender_image(scan: BlenderScan, frame: BlenderFrame, factor: int) -> tuple[int, int]:
    """The image checks of :func:`~nerf_lightning.scenes.formats.blender.load_blender`, without pixels."""
    require_image(frame.ref, scan.source, frame.index)
    width, height = decoded_size(frame.ref.path, file_for_errors=str(scan.source), frame=frame.index)
    return check_downscalable(width, height, factor, scan.source, frame.index)


def validate_blender(root: Path, downscale: int, splits: Sequence[str], problems: Problems) -> dict[str, int]:
    counts: dict[str, int] = {}
    for split in splits:
        scan = scan_blender(root, split, problems)
        if scan is None:
            counts[split] = 0
            continue
        decoded = {f.index: problems.check(_blender_image, scan, f, downscale) for f in scan.frames}
        sizes = {i: size for i, size in decoded.items() if size is not None}
        names = {f.index: f.ref.name for f in scan.frames}
        counts[split] = len(check_split_sizes(scan.source, names, sizes, problems))
    return counts


def _nerfstudio_image(scan: NerfstudioScan, index: int, factor: int) -> tuple[int, int]:
    """The image checks of :func:`~nerf_lightning.scenes.formats.nerfstudio.load_nerfstudio`, without
    pixels."""
    width, height = decoded_size(scan.refs[index].path, file_for_errors=str(scan.source), frame=index)
    check_image_size(scan, index, width, height)
    check_mask_size(scan, index, width, height)
    return check_downscalable(width, height, factor, scan.source, index)


def validate_nerfstudio(
    root: Path, downscale: int, splits: Sequence[str], problems: Problems
) -> dict[str, int]:
    scan = scan_nerfstudio(root, problems)
    counts: dict[str, int] = {}
    checked: dict[int, tuple[int, int] | None] = {}  # frame -> size; splits may share frames
    for split in splits:
        frames = (problems.check(split_frames, scan, split) if scan is not None else None) or []
        for index in frames:
            if index not in checked:
                checked[index] = problems.check(_nerfstudio_image, scan, index, downscale)
        counts[split] = _count([checked[index] for index in frames])
    return counts


def _llff_image(scan: LlffScan, index: int) -> tuple[int, int]:
    """The image checks of :func:`~nerf_lightning.scenes.formats.llff.load_llff`, without keeping pixels."""
    width, height = decoded_size(scan.files[index], file_for_errors=str(scan.source), frame=index)
    check_image_aspect(scan, index, width, height)
    return check_downscalable(width, height, scan.remaining, scan.source, index)


def validate_llff(root: Path, downscale: int, splits: Sequence[str], problems: Problems) -> dict[str, int]:
    scan = scan_llff(root, downscale, problems)
    counts: dict[str, int] = {}
    for split in splits:
        frames = (problems.check(split_images, scan, split) if scan is not None else None) or []
        counts[split] = _count([problems.check(_llff_image, scan, index) for index in frames])
    return counts


VALIDATORS: dict[str, Validator] = {
    "blender": validate_blender,
    "nerfstudio": validate_nerfstudio,
    "llff": validate_llff,
}
"""Format name -> validator. A format of :data:`~nerf_lightning.scenes.loading.LOADERS` without one is
validated by loading each split (which reports the first problem of each split only)."""


def _validate_by_loading(dataset_format: str) -> Validator:
    def validate(root: Path, downscale: int, splits: Sequence[str], problems: Problems) -> dict[str, int]:
        counts: dict[str, int] = {}
        for split in splits:
            scene = problems.check(LOADERS[dataset_format], root, split, downscale=downscale)
            counts[split] = len(scene) if scene is not None else 0
        return counts

    return validate


# ------------------------------------------------------------------------------------------ entry points


def validate_dataset(
    root: str | Path, *, dataset_format: str = "auto", downscale: int = 1, splits: Sequence[str] = SPLITS
) -> ValidationReport:
    """Every problem of the dataset in ``root`` that would stop loading ``splits``.

    Args:
        root: the dataset folder.
        dataset_format: a key of :data:`~nerf_lightning.scenes.loading.LOADERS` or ``"auto"``.
        downscale: the integer downscale factor training would use.
        splits: the splits to check (a subset of ``train``, ``val``, ``test``).

    Raises:
        ValueError: an unknown ``dataset_format`` or split, or a bad ``downscale`` (configuration
            errors, as for the loaders); problems of the dataset itself are in the report.
    """
    check_downscale(downscale)
    unknown = [split for split in splits if split not in SPLITS]
    if unknown:
        raise ValueError(f"splits must be among {SPLITS}, got {unknown}")
    if dataset_format != "auto" and dataset_format not in LOADERS:
        known = ", ".join(["auto", *LOADERS])
        raise ValueError(f"unknown dataset_format {dataset_format!r}; expected one of: {known}")
    root = Path(root)
    problems = Problems(collect=True)
    name = problems.check(detect_format, root) if dataset_format == "auto" else dataset_format
    counts = dict.fromkeys(splits, 0)
    if name is not None:
        validator = VALIDATORS.get(name) or _validate_by_loading(name)
        counts.update(validator(root, downscale, splits, problems))
    return ValidationReport(
        root=root, dataset_format=name, problems=problems.errors, warnings=problems.warnings, frames=counts
    )


def validate_command(root: str | Path, *, dataset_format: str = "auto", downscale: int = 1) -> str:
    """The ``nerf-lightning data validate ...`` command line for these settings."""
    words = ["nerf-lightning", "data", "validate", str(root)]
    if dataset_format != "auto":
        words += ["--format", dataset_format]
    if downscale != 1:
        words += ["--downscale", str(downscale)]
    return shlex.join(words)


def require_valid_dataset(
    root: str | Path, *, dataset_format: str = "auto", downscale: int = 1, splits: Sequence[str] = SPLITS
) -> ValidationReport:
    """:func:`validate_dataset`, raising when the dataset cannot be loaded.

    Returns:
        The report (warnings only) of a dataset that can be loaded.

    Raises:
        DatasetValidationError: with every problem (:attr:`DatasetValidationError.problems`).
        ValueError: as :func:`validate_dataset`.
    """
    report = validate_dataset(root, dataset_format=dataset_format, downscale=downscale, splits=splits)
    if not report.ok:
        command = validate_command(root, dataset_format=dataset_format, downscale=downscale)
        raise DatasetValidationError(root, report.problems, command)
    return report
