"""``nerf-lightning fit ARGS`` and then ``nerf-lightning test`` of its checkpoint, in the same processes.

    THEN_TEST='["--config", ...]' python -m tests.helpers.dist_fit_then_test fit ARGS

A data-parallel fit that Lightning launches starts its other ranks by running this same command line
with this same environment (``LOCAL_RANK`` added), so every rank fits, then tests with the arguments
in the environment variable :data:`THEN_TEST` (a JSON list, after ``test``). The test reuses the fit's
process group, as ``trainer.fit`` followed by ``trainer.test`` in one script does: one launch, two
interpreters' start-up fewer than a second ``python -m nerf_lightning test`` (``tests/commands/
test_distributed.py``). Each command runs as ``python -m nerf_lightning`` runs it (``nerf_lightning.cli.
main``); the exit code is the fit's when it failed, else the test's. Between the two, rank 0 prints
:data:`FIT_DONE` on stderr: its fit is over, callbacks torn down (a browser watching its viewer may go).

The process ends as ``nerf_lightning.core.warm_start``'s children do: ``atexit`` handlers run (Lightning's
destroys the process group), output is flushed, and ``os._exit`` skips the interpreter's teardown of
every module, seconds of garbage collection after a fit and a test, in which nothing is written.
"""

from __future__ import annotations

import atexit
import json
import os
import sys

THEN_TEST = "THEN_TEST"
"""The environment variable holding the ``test`` arguments (a JSON list of strings)."""
FIT_DONE = "tests.helpers.dist_fit_then_test: fit done, testing"
"""The line rank 0 prints on stderr once its fit has ended well, before the test starts."""


def main() -> int:
    from nerf_lightning.cli import main as nerf_lightning

    then = json.loads(os.environ[THEN_TEST])  # before fitting: a bad value costs no training
    code = nerf_lightning()  # reads sys.argv, as python -m nerf_lightning does: Lightning launches from it
    if code:
        return code
    if os.environ.get("LOCAL_RANK", "0") == "0":
        print(FIT_DONE, file=sys.stderr, flush=True)
    return nerf_lightning(["test", *then])


if __name__ == "__main__":
    from nerf_lightning.core.subnormal import flush_subnormals

    flush_subnormals()  # before any thread starts, as the nerf-lightning script does
    try:
        code = main()
    finally:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)
