"""``nerf-lightning pipeline --config PIPELINE.yaml``: the command of :mod:`nerf_lightning.pipeline`.

The pipeline file is this command's ``--config``: its fields are the options (declared by the
dataclasses of :mod:`nerf_lightning.pipeline.config`), so any of them can be overridden on the
command line (``--retries 2``, ``--render.frames 10``) and ``--print_config`` prints them all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nerf_lightning.commands.base import WARM_PRELOAD, Command, config_files
from nerf_lightning.core.warm_start import WarmStarter
from nerf_lightning.pipeline.config import check, declare_pipeline_arguments, read_file
from nerf_lightning.pipeline.runner import COMMAND_MODULE, run_pipeline


def _precheck(args: list[str]) -> None:
    """Unknown fields of the pipeline files, named with the file (the parser's message is vaguer)."""
    for path in config_files(args):
        read_file(path)


def pipeline(config_files: list[Path], **options: Any) -> int:
    """Take a dataset through process -> convert -> validate -> cache -> fit -> test -> render ->
    export -> verify, skipping the stages whose inputs did not change since their last successful run.

    Each stage is a 'nerf-lightning' subprocess (state in WORK_DIR/pipeline.json, logs in
    WORK_DIR/logs/, each stage's result in WORK_DIR/STAGE/result.json); process runs only for photos or
    a video as data.root, convert only with data.convert_from or data.make_demo. Exit code 0 when
    every stage is done or skipped, 1 when a stage failed, 2 when the file cannot be used, 130 when
    interrupted. See configs/pipeline-demo.yaml and docs/pipeline.md.
    """
    from nerf_lightning.commands.lightning import run_lightning_cli  # LightningCLI: a heavy import

    path = config_files[-1] if config_files else Path("pipeline.yaml")  # names messages and work_dir
    with WarmStarter(COMMAND_MODULE, preload=WARM_PRELOAD) as starter:
        return run_pipeline(check(options, path), run_lightning_cli, starter)


COMMAND = Command("pipeline", pipeline, declare=declare_pipeline_arguments, precheck=_precheck,
                  takes_config_files=True)
