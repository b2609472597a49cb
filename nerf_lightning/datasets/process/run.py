"""``data process SRC DST``, stage by stage, built beside ``DST`` and moved into place only on success.

``SRC`` is a folder of photos or a video file. Before anything is written, ``SRC`` is checked: it
exists, a folder's photos each decode and share one size (:mod:`.photos`; ``skip_unreadable`` leaves
out the ones that do not decode, with a warning each), a video decodes (:mod:`.video`), the options
and ``DST`` are usable. Each problem is one line, and nothing is written. Everything else is written
into a work folder next to ``DST`` (``.DST.process-work``, on DST's file system so the final rename is
atomic):

1. the photos, hard-linked (or copied) into ``work/images`` (:mod:`nerf_lightning.datasets.image_placement`);
   for a video, the ``extraction`` stage writes its chosen frames there instead (:mod:`.video`);
2. ``features``, ``matches``, ``mapping`` into ``work/colmap/database.db`` and ``work/colmap/sparse/0``
   (:mod:`.sfm`), each skipped when ``work/process.json`` records it done for the same inputs
   (:mod:`.state`);
3. fewer than half the photos registered: :class:`~.sfm.ProcessError`;
4. ``writing``: ``work/images_2|4|8`` (:mod:`.downscaled`), ``transforms.json`` by the converter of
   ``data convert`` (images in place), then the checks of ``data validate``;
5. ``DST`` replaced by the work folder: the old ``DST`` renamed aside, the work folder renamed to
   ``DST``, the old one deleted. A crash between the renames leaves the old ``DST`` aside; the next run
   puts it back first.

**A failed run** (any error or interrupt once the work folder exists) leaves ``DST`` as it was and
keeps its work folder exactly when a rerun can use it: when ``work/process.json`` records a finished
stage (:data:`~.state.STAGES`) and the error is not a photo that stopped decoding during the run
(:class:`~.photos.UnreadablePhotoError`: the rerun needs other photos, and other photos change every
stage's key). Otherwise the folder is removed. A rerun with the same photos resumes after the last
finished stage whose options did not change; one with other photos or first-stage options starts the
folder afresh (:func:`_start_work`). The one-line error says which (``... kept: a rerun skips ...`` or
``... removed (...)``); an error without a line of its own (an interrupt) gets a warning line saying it.

Each stage shows a progress bar on stderr when it is a terminal (:mod:`.progress`). A rerun whose keys
match ``DST/process.json`` does nothing but validate ``DST`` again (a ``DST`` that no longer validates,
a photo deleted from it or a downscaled copy missing, is built again). One that changes
only later stages (e.g. ``--matcher``) starts the work folder from ``DST``'s features. ``DST`` must be
new, empty or an earlier output of this command: any other folder is refused, never replaced.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nerf_lightning.datasets.convert import TRANSFORMS_FILE, convert_dataset
from nerf_lightning.datasets.image_placement import plan_placement
from nerf_lightning.datasets.process.downscaled import write_downscaled
from nerf_lightning.datasets.process.photos import PHOTO_SUFFIXES, UnreadablePhotoError, list_photos
from nerf_lightning.datasets.process.progress import stage_bar
from nerf_lightning.datasets.process.sfm import (
    ProcessError,
    SfmSummary,
    check_camera_model,
    extract_features,
    import_pycolmap,
    map_photos,
    match_features,
    resolve_matcher,
    summarise,
)
from nerf_lightning.datasets.process.state import STAGES, STATE_FILE, ProcessState, read_state, stage_keys
from nerf_lightning.datasets.process.video import (
    DEFAULT_NUM_FRAMES,
    MIN_FRAMES,
    VIDEO_SUFFIXES,
    count_frames,
    extract_frames,
)
from nerf_lightning.scenes.errors import DatasetError, DatasetValidationError
from nerf_lightning.scenes.validate import validate_dataset

DATABASE, SPARSE, IMAGES = Path("colmap/database.db"), Path("colmap/sparse"), "images"


@dataclass
class ProcessResult:
    """What :func:`process_photos` produced: the dataset folder, the model's summary, the stages run
    (the others were skipped) and lines for the user."""

    dst: Path
    summary: SfmSummary
    ran: list[str]
    lines: list[str]


def _aside(dst: Path, kind: str) -> Path:
    return dst.with_name(f".{dst.name}.process-{kind}")


def _check_destination(dst: Path) -> None:
    if dst.exists() and not dst.is_dir():
        raise DatasetError(dst, "is a file; expected the folder to write the dataset into")
    if dst.is_dir() and any(dst.iterdir()) and read_state(dst) is None:
        raise DatasetError(dst, f"holds files but no {STATE_FILE}; expected a new or empty folder, or an "
                                "earlier output of 'data process' (it is never replaced otherwise)")


def _recover(dst: Path) -> None:
    """Put back an earlier ``DST`` a crash left aside between the two renames of a publication."""
    old = _aside(dst, "old")
    if old.exists():
        if dst.exists():
            shutil.rmtree(old)
        else:
            os.rename(old, dst)


def _start_work(work: Path, dst: Path, keys: dict[str, str]) -> ProcessState:
    """The work folder's state: its own when its first stage is done for these inputs, else a fresh
    folder with what ``DST`` holds for these inputs (a video's frames, the features' database)."""
    first = "extraction" if "extraction" in keys else "features"
    state = read_state(work)
    if state is not None and state.done(first, keys):
        return state
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    state = ProcessState()
    earlier = read_state(dst)
    if earlier is None:
        return state
    if first == "extraction":
        frames = [dst / IMAGES / name for name in earlier.frames]
        if not (earlier.done("extraction", keys) and frames and all(f.is_file() for f in frames)):
            return state
        plan_placement(frames, dst / IMAGES, work, force=True, folder_name=IMAGES).run(copy=False)
        state.frames = list(earlier.frames)
        state.finish("extraction", keys["extraction"], earlier.seconds.get("extraction", 0.0))
    if earlier.done("features", keys) and (dst / DATABASE).is_file():
        (work / DATABASE).parent.mkdir(parents=True)
        shutil.copy2(dst / DATABASE, work / DATABASE)  # a copy: matching writes into the database
        for stage in ("features", "matches"):
            if earlier.done(stage, keys):
                state.finish(stage, keys[stage], earlier.seconds.get(stage, 0.0))
    return state


def _publish(work: Path, dst: Path) -> None:
    """Replace ``dst`` by ``work`` (module docstring, step 5)."""
    old = _aside(dst, "old")
    if dst.exists():
        os.rename(dst, old)
    os.rename(work, dst)
    shutil.rmtree(old, ignore_errors=True)


def _validate(dst: Path) -> None:
    report = validate_dataset(dst, dataset_format="nerfstudio")
    if not report.ok:
        raise DatasetValidationError(dst, report.problems, f"nerf-lightning data validate {dst}")


def _source(src: Path, num_frames: int, skip_unreadable: bool,
            warn: Callable[[str], None]) -> tuple[list[Path], Path | None, int]:
    """``(photos, video, total)`` of ``src``, checked before any work: a folder's photos, each decoded
    (:func:`~.photos.list_photos`), or a video that ffmpeg decodes (``total``: the photos, or the
    video's frames)."""
    if not src.exists():
        raise DatasetError(src, f"no such file or folder; expected a folder of photos "
                                f"({', '.join(PHOTO_SUFFIXES)}) or a video ({', '.join(VIDEO_SUFFIXES)})")
    if not src.is_file():
        photos = list_photos(src, skip_unreadable=skip_unreadable, warn=warn)
        return photos, None, len(photos)
    if src.suffix.lower() not in VIDEO_SUFFIXES:
        raise DatasetError(src, f"is a file but not a video ({', '.join(VIDEO_SUFFIXES)}); expected a "
                                "folder of photos or a video")
    if num_frames < MIN_FRAMES:
        raise ProcessError(f"--num_frames: expected at least {MIN_FRAMES}, got {num_frames}")
    return [], src, count_frames(src)


def _after_failure(work: Path, dst: Path, keys: dict[str, str], error: BaseException,
                   dst_existed: bool) -> str:
    """Keep or remove the work folder of a failed run (module docstring); what became of both, as a
    clause of the error line."""
    where = f"{dst} {'left as it was' if dst_existed else 'not written'}"
    if not work.exists():
        return where
    state = read_state(work)
    done = [stage for stage in STAGES if stage in keys and state is not None and state.done(stage, keys)]
    if done and not isinstance(error, UnreadablePhotoError):
        return (f"{where}; {work} kept: a rerun skips its finished stages ({', '.join(done)}) as long as "
                "their photos and options stay the same")
    shutil.rmtree(work, ignore_errors=True)
    why = "no stage had finished" if not done else "other photos redo every stage"
    return f"{where}; {work} removed ({why})"


def _with_note(error: BaseException, note: str, src: Path, images: Path) -> BaseException | None:
    """``error`` as a one-line error ending in ``note`` (a photo of ``images`` named by its file in
    ``src``), or ``None`` when it has no one-line form (an interrupt, a bug, a list of problems)."""
    if isinstance(error, ProcessError):
        return ProcessError(f"{error}; {note}")
    if isinstance(error, DatasetError) and not isinstance(error, DatasetValidationError):
        file = Path(error.file)
        if file.parent == images and (src / file.name).is_file():  # the work folder's link to a photo
            file = src / file.name
        return type(error)(file, f"{error.detail}; {note}", frame=error.frame, field=error.field)
    return None


def _warn(line: str) -> None:
    print(line, file=sys.stderr)


def _up_to_date(dst: Path, keys: dict[str, str], log: Callable[[str], None],
                unit: str) -> ProcessResult | None:
    """The result of an earlier run that is complete for ``keys`` and still intact, else ``None``."""
    earlier = read_state(dst)
    if earlier is None or not earlier.complete or not earlier.done("mapping", keys):
        return None
    report = validate_dataset(dst, dataset_format="nerfstudio")
    damage = [*report.problems, *report.warnings]  # a warning too: a frame's photo is gone
    damage += [f"images_{f}/ is missing" for f in earlier.downscaled if not (dst / f"images_{f}").is_dir()]
    if not earlier.downscaled:
        damage.append("it has no downscaled copies (images_2, images_4, images_8)")
    if damage:  # e.g. a photo deleted from DST/images: build it again rather than keep a broken DST
        log(f"{dst} no longer validates ({damage[0]}); building it again")
        return None
    summary = SfmSummary(**{k: earlier.summary[k] for k in ("registered", "total", "points",
                                                            "mean_reprojection_error", "camera")})
    lines = [f"{dst}: up to date (every stage done for these {unit} and options)", summary.line(unit)]
    return ProcessResult(dst, summary, [], lines)


def process_source(src: str | Path, dst: str | Path, *, camera_model: str = "OPENCV", matcher: str = "auto",
                   max_image_size: int = 1600, copy: bool = False, num_frames: int = DEFAULT_NUM_FRAMES,
                   deterministic: bool = True, skip_unreadable: bool = False, progress: bool | None = None,
                   log: Callable[[str], None] = print, warn: Callable[[str], None] = _warn) -> ProcessResult:
    """Photos in folder ``src``, or a video file ``src`` -> a validated nerfstudio dataset in ``dst``
    (see the module docstring).

    Args:
        src: the folder of photos or the video (only read).
        dst: the dataset folder: new, empty or an earlier output of this function.
        camera_model: the shared camera's model, one of :data:`~.sfm.CAMERA_MODELS`.
        matcher: ``auto``, ``exhaustive`` or ``sequential`` (:func:`~.sfm.resolve_matcher`).
        max_image_size: features are found on photos scaled to at most this many pixels wide and high.
        copy: copy the photos into ``dst`` instead of hard-linking them (a video's frames are written).
        num_frames: a video's frames to keep (:mod:`.video`).
        deterministic: find features, match and map on one thread, so that a rerun gives the same
            model (:mod:`.sfm`).
        skip_unreadable: leave out the photos that do not decode (a ``warn`` line each) instead of
            refusing ``src``; at least :data:`~.photos.MIN_PHOTOS` must remain.
        progress: progress bars on stderr (``None``: when stderr is a terminal).
        log: where progress lines go.
        warn: where warning lines go (stderr): each skipped photo, and what became of the work folder
            when the run stops on an error without a line of its own (an interrupt).

    Raises:
        DatasetError: a missing ``src``, bad photos, a photo that does not decode
            (:class:`~.photos.UnreadablePhotoError`), a video that cannot be decoded or an unusable
            ``dst`` (one line; once the work folder exists, the line ends with what became of it).
        ProcessError: pycolmap missing, a bad option, or fewer than half the photos registered.
    """
    src, dst = Path(src), Path(dst)
    photos, video, total = _source(src, num_frames, skip_unreadable, warn)
    pycolmap = import_pycolmap()
    resolved = resolve_matcher(matcher, min(total, num_frames) if video else total, video=video is not None)
    check_camera_model(camera_model)
    if max_image_size < 64:
        raise ProcessError(f"--max_image_size: expected at least 64 pixels, got {max_image_size}")
    _recover(dst)
    _check_destination(dst)
    options = {"camera_model": camera_model, "matcher": resolved, "max_image_size": max_image_size,
               "copy": copy, "deterministic": deterministic,
               **({"num_frames": num_frames} if video is not None else {})}
    keys = stage_keys(photos, options, pycolmap.__version__, video=video)
    done = _up_to_date(dst, keys, log, "video frames" if video is not None else "photos")
    if done is not None:
        return done

    work = _aside(dst, "work")
    dst_existed = dst.exists()
    try:
        return _build(src, dst, work, photos, video, total, keys, options, progress=progress, log=log)
    except BaseException as error:
        note = _after_failure(work, dst, keys, error, dst_existed)
        one_line = _with_note(error, note, src, work / IMAGES)
        if one_line is None:
            warn(f"nerf-lightning: warning: data process stopped ({type(error).__name__}): {note}")
            raise
        raise one_line from None


def _build(src: Path, dst: Path, work: Path, photos: list[Path], video: Path | None, total: int,
           keys: dict[str, str], options: dict[str, Any], *, progress: bool | None,
           log: Callable[[str], None]) -> ProcessResult:
    """The stages of :func:`process_source` in ``work`` (``options``: its options, ``matcher``
    resolved), then ``work`` published as ``dst``."""
    camera_model, resolved, copy = options["camera_model"], options["matcher"], options["copy"]
    max_image_size, deterministic = options["max_image_size"], options["deterministic"]
    state = _start_work(work, dst, keys)
    state.source, state.options = str(src.resolve()), options
    state.write(work)  # what a failed run leaves is resumable as soon as it exists (module docstring)
    placement = None
    if video is None:
        placement = plan_placement(photos, src, work, copy=copy, force=True, folder_name=IMAGES)
        placement.run(copy=copy)
        state.frames = [photo.name for photo in photos]

    def extraction() -> None:
        with stage_bar("extraction", total, unit="frame", enabled=progress) as bar:
            state.frames = extract_frames(video, work / IMAGES, options["num_frames"], total=total,
                                          on_frame=bar.advance)

    def features() -> None:
        with stage_bar("features", enabled=progress):
            extract_features(work / DATABASE, work / IMAGES, state.frames, camera_model, max_image_size,
                             deterministic)

    def matches() -> None:
        with stage_bar(f"matches ({resolved})", enabled=progress):
            match_features(work / DATABASE, resolved, deterministic)

    def mapping() -> None:
        with stage_bar("mapping", len(state.frames), enabled=progress) as bar:
            map_photos(work / DATABASE, work / IMAGES, work / SPARSE, on_registered=bar.advance,
                       deterministic=deterministic)

    steps: dict[str, Callable[[], None]] = {"extraction": extraction, "features": features,
                                            "matches": matches, "mapping": mapping}
    ran = []
    for stage in (s for s in STAGES if s in keys):
        if state.done(stage, keys):
            log(f"{stage}: done before, skipped")
            continue
        started = time.perf_counter()
        steps[stage]()
        state.finish(stage, keys[stage], time.perf_counter() - started)
        state.write(work)
        ran.append(stage)
        detail = {"matches": f" ({resolved})", "extraction": f" ({len(state.frames)} frames)"}.get(stage, "")
        log(f"{stage}{detail}: {state.seconds[stage]:.1f} s")

    summary = summarise(work / SPARSE / "0", len(state.frames))
    unit = "video frames" if video is not None else "photos"
    state.summary = summary.as_dict()
    state.write(work)
    if summary.registered * 2 < summary.total:
        what = "frames of the video" if video is not None else "photos"
        simpler = ("; with few photos, a camera with fewer parameters (--camera_model SIMPLE_RADIAL) may "
                   "map more of them") if camera_model == "OPENCV" else ""
        raise ProcessError(
            f"only {summary.registered} of {summary.total} {unit} registered (fewer than half): the {what} "
            f"likely overlap too little or show too little texture; take more photos with more overlap"
            f"{simpler}"
        )
    with stage_bar("writing", 3 * len(state.frames), enabled=progress) as bar:
        state.downscaled = [int(folder.name.rsplit("_", 1)[1]) for folder in write_downscaled(
            work, work / IMAGES, state.frames, on_image=bar.advance)]
        if (work / TRANSFORMS_FILE).exists():
            (work / TRANSFORMS_FILE).unlink()
        converted = convert_dataset(work / SPARSE / "0", work, images=work / IMAGES)
        _validate(work)
    state.complete = True
    state.write(work)
    _publish(work, dst)
    placed = placement.describe().replace(str(work), str(dst)) if placement is not None else (
        f"{len(state.frames)} frames of {src.name} in {dst / IMAGES}")
    copies = ", ".join(f"images_{f}" for f in state.downscaled)
    lines = [f"wrote {dst / TRANSFORMS_FILE}: {len(converted.transforms['frames'])} frames, {placed}"
             + (f"; downscaled copies in {copies}" if copies else ""), summary.line(unit)]
    return ProcessResult(dst, summary, ran, lines)


process_photos = process_source
"""Another name of :func:`process_source`, kept for callers that know it by this one."""
