"""The peer baseline's own virtual environment: kornia 0.8.2 (with ``kornia.nerf``) beside the pinned torch.

``kornia.nerf`` was removed after kornia 0.8.2 while this project uses kornia 0.9, so the peer
(:mod:`benchmarks.peer_kornia`) runs in an environment of its own, built once and reused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_VENV = REPO / "bench_out" / "peer-venv"
TORCH_REQUIREMENT = "torch==2.13.0"
"""The project's CPU torch; the peer environment gets exactly this one."""
PEER_REQUIREMENTS = ("kornia==0.8.2", "numpy")
READY_MARKER = ".peer-ready.json"
"""Written into the environment once every install and the import check succeeded."""


def venv_python(venv: Path) -> Path:
    """The environment's interpreter."""
    return venv / "bin" / "python"


def peer_venv_ready(venv: Path) -> bool:
    """True when ``venv`` was completely built (its marker exists) and its interpreter is there."""
    return (venv / READY_MARKER).is_file() and venv_python(venv).exists()


def ensure_peer_venv(venv: Path = DEFAULT_VENV) -> Path:
    """Build the peer environment at ``venv`` unless it is complete; return its python.

    A folder there without the marker is removed first when it is a virtual environment (has
    ``pyvenv.cfg``) or empty; anything else raises ``FileExistsError``. Install output goes to
    ``<venv>.install.log`` beside it.

    Raises:
        RuntimeError: an install failed, or the environment does not import ``kornia.nerf`` with the
            pinned torch.
    """
    venv = Path(venv).absolute()
    if peer_venv_ready(venv):
        return venv_python(venv)
    if venv.exists():
        if not (venv / "pyvenv.cfg").is_file() and any(venv.iterdir()):
            raise FileExistsError(f"{venv} exists and is not a virtual environment; "
                                  "remove it or pass another path")
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log_path = venv.parent / f"{venv.name}.install.log"
    python = venv_python(venv)
    constraints = venv.parent / f"{venv.name}.constraints.txt"
    constraints.write_text(TORCH_REQUIREMENT + "\n")
    base_python = getattr(sys, "_base_executable", sys.executable)
    steps = [
        [base_python, "-m", "venv", str(venv)],
        # The pinned CPU torch first (as `make install` does), then everything else constrained to it,
        # so nothing can pull another torch.
        [str(python), "-m", "pip", "install", "--quiet", TORCH_REQUIREMENT],
        [str(python), "-m", "pip", "install", "--quiet", "-c", str(constraints), *PEER_REQUIREMENTS],
    ]
    with open(log_path, "w") as log:
        for command in steps:
            log.write("$ " + " ".join(command) + "\n")
            log.flush()
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=clean_env())
            if done.returncode != 0:
                raise RuntimeError(f"building the peer environment failed at: {' '.join(command)} "
                                   f"(exit {done.returncode}); see {log_path}")
    probe = ("import json, kornia, kornia.nerf, numpy, torch; "
             "print(json.dumps({'torch': torch.__version__, 'kornia': kornia.__version__, "
             "'numpy': numpy.__version__}))")
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, env=clean_env())
    if done.returncode != 0:
        raise RuntimeError(f"the peer environment {venv} does not import kornia.nerf: {done.stderr.strip()}")
    versions = json.loads(done.stdout.strip().splitlines()[-1])
    if not versions["torch"].startswith(TORCH_REQUIREMENT.split("==")[1]) or versions["kornia"] != "0.8.2":
        raise RuntimeError(f"the peer environment {venv} has unexpected versions {versions}")
    (venv / READY_MARKER).write_text(json.dumps(versions) + "\n")
    return python


def clean_env() -> dict[str, str]:
    """The environment for peer processes: no PYTHONPATH (the worker must not see this project)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env
