"""A process whose children save a checkpoint over and over, for a test to kill in the middle of a write.

``python -m tests.helpers.process_saver PATH`` (``PYTHONPATH`` naming the repository) imports torch and
:func:`nerf_lightning.files.atomic_torch_save` once; then, for each line ``fork`` on its stdin, it forks a
child (a real process: its own pid, killed by a real signal) that prints ``child PID`` and saves
``{"value": torch.full((4_000_000,), float(i))}`` to ``PATH`` for ``i = 1, 2, ...``, printing ``i`` after
each complete save, until it is killed. ``reap`` waits for that child to end and prints ``ended CODE``
(``os.waitstatus_to_exitcode``: ``-9`` for a SIGKILL). End of stdin ends the process.

One interpreter start and one torch import (seconds each) serve every kill, where a fresh
``python -c`` per kill paid both each time; what is killed is still a separate process writing to disk.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from nerf_lightning.files import atomic_torch_save

VALUES = 4_000_000
"""Floats per save (16 MB): a write long enough to be interrupted."""


def _save_forever(path: Path) -> None:
    print(f"child {os.getpid()}", flush=True)
    i = 0
    while True:
        i += 1
        atomic_torch_save({"value": torch.full((VALUES,), float(i))}, path)
        print(i, flush=True)


def main(path: Path) -> None:
    child = None
    for line in sys.stdin:
        command = line.strip()
        if command == "fork":
            sys.stdout.flush()  # nothing buffered is printed twice
            child = os.fork()
            if child == 0:
                try:
                    _save_forever(path)
                finally:
                    os._exit(1)  # never back into the parent's loop
        elif command == "reap" and child is not None:
            _, status = os.waitpid(child, 0)
            child = None
            print(f"ended {os.waitstatus_to_exitcode(status)}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
