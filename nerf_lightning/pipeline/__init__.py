"""Layer ``pipeline``: ``nerf-lightning pipeline --config PIPELINE.yaml``: from a dataset to a verified
export in one command.

Modules: :mod:`.config` (the file, parsed by jsonargparse, and its checks), :mod:`.state`
(``pipeline.json``, the stages' result files, fingerprints), :mod:`.stages` (each stage's inputs,
command and result), :mod:`.runner` (the chain, retries, the table), :mod:`.plan` and
:mod:`.process_stage`. The command is :mod:`nerf_lightning.commands.pipeline`.

The stages, always in this order (``stages:`` in the file picks a subset):

============  ==========================================================================================
``process``   ``data process`` of ``data.root`` into ``WORK/process/dataset`` when ``data.root`` is a
              folder of photos with no dataset, or a video (:mod:`.process_stage`); the stages after
              it read that dataset, named by its result file.
``convert``   ``data convert`` from ``data.convert_from`` into ``data.root`` (or ``data make-demo`` for
              ``data.make_demo: true`` when the scene is not complete); skipped when there is nothing to
              make. It comes before ``validate`` so that what is validated is what ``fit`` reads.
``validate``  ``data validate`` with the fit config's dataset format and downscale.
``cache``     ``data cache``: the image cache entries of the train, val and test splits, with the fit
              config's settings (skipped with ``data.cache: false``).
``fit``       ``fit --config ... --trainer.default_root_dir WORK/fit/KEY --run_name run``; a killed fit
              of the same inputs goes on from its ``last.ckpt`` in the same run folder.
``test``      ``test`` of the fit's ``last.ckpt`` with that run's ``config.yaml``: ``RUN/test*/eval.json``.
``render``    ``render`` of the fit's ``last.ckpt`` into ``WORK/<render.out>``.
``export``    ``export --format F --out WORK/<export.out> --force``.
``verify``    ``export ... --verify_only`` of the file the export stage wrote: that command exits 1 when
              the module's PSNR is not within 0.1 dB of the checkpoint's.
============  ==========================================================================================

Design: a linear chain of our own commands, skipped like make's file targets
-----------------------------------------------------------------------------

Each stage is exactly one subprocess of this package's command line (``python -m nerf_lightning ...``,
the interpreter running the pipeline), run in the current directory with its output appended to
``WORK/logs/STAGE.log``. Results travel in files, never in printed text: ``data ...``, ``render`` and
``export`` write ``--result_file WORK/<stage>/command.json``; ``fit`` and ``test`` are read from the
run folder (``run.json``, ``last.ckpt``; ``test``'s ``RUN/test*/eval.json``). Each stage then writes its own
result, ``WORK/<stage>/result.json`` (inputs key, output files with sha256, key numbers, summary),
which the stages after it and the end table read. Every stage depends on the ones before it, so the
order is fixed and nothing runs in parallel: there is no scheduler, DAG framework or daemon, just a
loop over :data:`STAGES`.

Skipping follows make's model of file targets with prerequisites, with content fingerprints where make
compares timestamps: a stage is skipped when the inputs recorded for its last successful run equal the
current ones *and* the outputs recorded then are still there with the same sha256. Inputs are the
dataset fingerprint (:func:`~nerf_lightning.scenes.fingerprint.dataset_fingerprint`), the resolved stage
config (for ``fit`` the whole config LightningCLI resolves from ``fit.config`` and ``fit.args``) and
the sha256 of the upstream outputs it reads (e.g. the checkpoint), so a changed fit config re-runs
``fit`` and, through the new checkpoint, everything after it, while ``validate`` and ``cache`` stay
skipped. make itself was considered and not used: timestamps cannot tell a changed config from a
touched file, the resolved LightningCLI config (defaults, config files and arguments together) is not a
file at all, and retries, resuming from ``last.ckpt`` and the summary table would be shell code in a
Makefile. A stage that fails is retried ``retries`` times; then the chain stops with one line naming
the stage and its log file, and the stages after it are not run.

State: ``WORK/pipeline.json``, rewritten atomically at every change (``running`` before each attempt,
``done`` or ``failed`` after it). Per stage: ``status``, ``inputs`` and their ``inputs_key``, the
``outputs`` (files with path, sha256 and size; paths inside the work dir are relative to it, so a work
dir can be moved), ``numbers`` (PSNRs, frames, sizes), ``summary``, the ``command`` of the last attempt,
``attempts``, ``log``, times and ``error``. ``last_run`` holds what the latest invocation did with each
stage (``done``, ``skipped``, ``failed``, ``not run``).

Resuming ``fit``: its root directory is named after the key of its inputs, ``WORK/fit/<key>``, so every
run in it trained with this config on this data. When the stage has to run and one of those runs left
a ``last.ckpt`` (a failed attempt, or a pipeline killed during training), the next attempt passes
``--ckpt_path`` to it and training continues where it stopped; a changed config gets a new directory
and starts from scratch.

Paths in the file: inputs (``data.root``, ``data.convert_from``, ``data.images``, ``fit.config``,
``work_dir``) are relative to the current directory, like on the command line (a bare ``fit.config``
name such as ``demo`` is a shipped config when no such file is there); outputs
(``render.out``, ``export.out``) are relative to ``work_dir``. A lock file keeps two pipelines out of
one work dir.

May import ``core``, ``files``, ``config``, ``rendering``, ``scenes``, ``datasets``, ``runs``; nothing
else of the package.
"""

from nerf_lightning.pipeline.config import (
    STAGES,
    PipelineConfig,
    PipelineConfigError,
    PipelineError,
    load_pipeline_config,
)
from nerf_lightning.pipeline.runner import Pipeline, run_pipeline
from nerf_lightning.pipeline.state import source_fingerprint

__all__ = ["STAGES", "Pipeline", "PipelineConfig", "PipelineConfigError", "PipelineError",
           "load_pipeline_config", "run_pipeline", "source_fingerprint"]
