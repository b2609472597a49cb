"""A run's training over time, from its TensorBoard event files: how long it trained and its validation
PSNR along the way (:func:`read_curve`), and the plot of such curves (:func:`plot_curves`, matplotlib).

Every fit writes event files, so every run has a curve; the run record does not hold one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from nerf_lightning.files import atomic_path

BENCH_EXTRA = "pip install 'nerf-lightning[bench]'"
"""How to get matplotlib, which ``--plot`` needs and the default install leaves out (it slows the start of
every command that imports Lightning, as torchmetrics imports it whenever it is installed)."""

EVENT_FILES = "events.out.tfevents.*"
VAL_PSNR = "val/psnr"


class MissingExtraError(ValueError):
    """An option needs a package of an extra this installation lacks. A ``ValueError``, so that the
    command layer reports it as one line with exit code 2."""


@dataclass(frozen=True)
class Curve:
    """What a run's TensorBoard event files say about its training over time.

    Attributes:
        train_seconds: the training time the event files span: per file (one per session of a run
            resumed later), from its first event (Lightning creates the writer when it logs the
            hyperparameters, after the data is set up, just before training) to its last scalar, summed
            over the files. Validation within a fit counts, as ``trainer.max_time`` counts it; the time
            between a stopped session and its resume does not. ``None`` when no file holds a scalar
            (a run stopped before its first logged step): the end is then unknown.
        val_psnr: ``(training seconds, step, val/psnr)`` of each validation, in order.
    """

    train_seconds: float | None
    val_psnr: tuple[tuple[float, int, float], ...]


@dataclass(frozen=True)
class CurveLine:
    """One line of a plot: its label, its style (an index into the line styles: a group's number, say)
    and the curve, ``None`` for a run without event files."""

    label: str
    style: int
    curve: Curve | None


def _event_files(folder: Path) -> list[Path]:
    """The run's own event files, oldest first (the name holds the second the writer was created)."""

    def created(path: Path) -> tuple[int, str]:
        stamp = path.name.split(".")[3] if path.name.count(".") >= 3 else ""
        return (int(stamp) if stamp.isdigit() else 0, path.name)

    return sorted((path for path in folder.glob(EVENT_FILES) if path.is_file()), key=created)


def read_curve(folder: Path) -> Curve | None:
    """The run's training time and validation PSNR over it, from its own event files (not its
    evaluations'), read with TensorBoard's ``EventAccumulator``; ``None`` without event files.

    Each file is one session (a resumed run writes a new one beside the old): training time is counted
    from the file's first event to each event and summed over the earlier files (:class:`Curve`).

    Raises:
        ValueError: an event file cannot be read; the message names it.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # Every scalar (the default keeps a sample of 10000); of the other kinds one, never looked at.
    guidance = {"scalars": 0, "images": 1, "histograms": 1, "compressedHistograms": 1, "tensors": 1,
                "audio": 1}
    files = _event_files(folder)
    if not files:
        return None
    before = 0.0
    spanned = False
    points: list[tuple[float, int, float]] = []
    for path in files:
        events = EventAccumulator(str(path), size_guidance=guidance)
        try:
            events.Reload()
            start = events.FirstEventTimestamp()
        except ValueError:  # no event at all: a writer created and never used
            continue
        except Exception as error:  # tensorboard's own errors for a corrupt record (DataLossError...)
            raise ValueError(f"{path}: not a readable TensorBoard event file ({type(error).__name__}: "
                             f"{error}); expected the events of a run") from None
        tags = events.Tags().get("scalars", [])
        ends = [events.Scalars(tag)[-1].wall_time for tag in tags if events.Scalars(tag)]
        if VAL_PSNR in tags:
            points += [(before + event.wall_time - start, event.step, event.value)
                       for event in events.Scalars(VAL_PSNR)]
        if ends:
            before += max(ends) - start
            spanned = True
    return Curve(before if spanned else None, tuple(points))


def check_plotting() -> None:
    """Raise :class:`MissingExtraError` when matplotlib, which ``--plot`` needs, is not installed."""
    try:
        import matplotlib  # noqa: F401  (only whether it imports)
    except ImportError:
        raise MissingExtraError(f"--plot needs matplotlib, which the default install leaves out: "
                                f"{BENCH_EXTRA}") from None


def plot_curves(lines: Sequence[CurveLine], path: str | Path) -> list[str]:
    """Draw each line's validation PSNR against training seconds (:class:`Curve`) into the PNG file
    ``path`` (atomically), in its style; the lines without a validation (no curve, or none in its event
    files) are left out and named in the returned warning lines.

    matplotlib is imported here, through its object interface (no pyplot, no backend chosen for the
    process).

    Raises:
        MissingExtraError: matplotlib is not installed.
        ValueError: no listed run has a validation PSNR in its event files.
    """
    check_plotting()
    from matplotlib.figure import Figure

    styles = ("-", "--", ":", "-.")
    figure = Figure(figsize=(8, 5), dpi=100)
    axes = figure.subplots()
    left_out = []
    drawn = 0
    for line in lines:
        points = line.curve.val_psnr if line.curve else ()
        if not points:
            left_out.append(line.label)
            continue
        axes.plot([point[0] for point in points], [point[2] for point in points],
                  linestyle=styles[line.style % len(styles)], marker="o", markersize=3, label=line.label)
        drawn += 1
    if not drawn:
        raise ValueError(f"--plot {path}: none of the listed runs has {VAL_PSNR} in its TensorBoard event "
                         f"files; expected runs that validated")
    axes.set_xlabel("training time (s)")
    axes.set_ylabel(f"{VAL_PSNR} (dB)")
    axes.set_title("validation PSNR against training time")
    axes.set_xlim(left=0)
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as temporary:
        figure.savefig(temporary, format="png")
    if left_out:
        return [f"--plot: no {VAL_PSNR} in the event files of {', '.join(left_out)}; left out"]
    return []
