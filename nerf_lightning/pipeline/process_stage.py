"""The ``process`` stage: a folder of photos or a video as ``data.root`` becomes a dataset first.

When ``data.root`` holds no dataset but photos, or is a video (:func:`~nerf_lightning.datasets.process.
needs_processing`), ``data process ROOT WORK/process/dataset`` makes one, and every later stage reads
that dataset: the stage's result file, ``WORK/process/result.json``, names it (``outputs.dataset``), and
:func:`data_root` is where the stages get it from, so the hand-over is a file, never printed text. The
stage's inputs are the capture's content (sha256 of the video, or of the folder's files) and its
``data.process_args``; ``data process`` itself resumes by stage, so a changed option costs only the
stages it changes. Any other ``data.root`` (a dataset, or what ``convert`` will make) skips the stage.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nerf_lightning.datasets.convert import TRANSFORMS_FILE
from nerf_lightning.datasets.process.detect import needs_processing
from nerf_lightning.pipeline.config import PipelineConfig
from nerf_lightning.pipeline.plan import Collected, Plan
from nerf_lightning.pipeline.state import COMMAND_RESULT, State, read_json

DATASET = Path("process") / "dataset"
"""The processed dataset, relative to the work dir."""


def data_root(config: PipelineConfig, state: State, needed_by: str | None = None) -> Path:
    """The dataset the stages read: ``data.root``, or for photos or a video the dataset the process
    stage's result file names (``needed_by=None``, before it ran: where it will be, for resolving the
    fit config)."""
    if needs_processing(config.data.root) is None:
        return config.data.root
    if needed_by is None:
        return config.work_dir / DATASET
    return state.resolve(state.result("process", needed_by)["outputs"]["dataset"])


def plan_process(config: PipelineConfig, state: State, result_file: Callable[[str], Path]) -> Plan | str:
    """The process stage's :class:`Plan`, or why it is skipped. ``result_file(stage)`` gives the
    ``--result_file`` of an attempt (``Stages.result_file``: called right before each attempt)."""
    root = config.data.root
    kind = needs_processing(root)
    if kind is None:
        return "data.root is not a folder of photos or a video"
    dataset = config.work_dir / DATASET
    args = list(config.data.process_args)
    inputs = {"source": str(root), "content": state.digest(root), "args": args}

    def command() -> tuple[list[str], dict[str, Any]]:
        return ["data", "process", str(root), str(dataset), "--result_file",
                str(result_file("process")), *args], {}

    def collect() -> Collected:
        written = read_json(state.stage_dir("process") / COMMAND_RESULT)
        folder = Path(written.get("dataset") or dataset)
        numbers = {k: written.get(k) for k in ("registered", "total", "mean_reprojection_error")}
        summary = (f"{kind}: {numbers['registered']}/{numbers['total']} registered, reprojection "
                   f"{numbers['mean_reprojection_error']:.2f} px -> {state.store(folder)}")
        files = {"transforms": state.file(folder / TRANSFORMS_FILE)}
        return {"dataset": state.store(folder), "files": files}, numbers, summary

    return Plan(inputs, command, collect)
