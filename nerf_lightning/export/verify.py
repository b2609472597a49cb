"""``--verify``: the saved standalone module renders the test views as well as the checkpoint.

This process renders each test view with the checkpoint's own ``NerfModule.render_image`` and
writes the view's rays and target image to a tensor file. A fresh Python process
(``python -I``, run from an empty folder) that only has torch loads the saved module (a ``.pt2``
with ``torch.export.load(...).module()``, rendered ``chunk_rays`` rays at a time as its metadata
says; a TorchScript ``.pt`` with ``torch.jit.load``), renders the same rays and scores them; it
refuses any ``nerf_lightning`` import (an import hook) and reports the modules it ended up with,
so a module that silently needed the package fails.

Both sides score a view as the ``test/psnr`` metric does: ``-10 log10(mse)`` of the image
clamped to ``[0, 1]`` against its target (data range 1), averaged over the views. The module
passes when the two means are within ``tolerance_db``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.export.common import ExportError
from nerf_lightning.system.module import NerfModule

DEFAULT_TOLERANCE_DB = 0.1

# Runs in the fresh process. Only the standard library and torch; written to a temporary file.
VERIFY_SCRIPT = r'''
"""Render views with a standalone module (.pt2 or TorchScript); never imports nerf_lightning."""
import importlib.abc
import json
import sys
import time


class RefuseNerfLightning(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "nerf_lightning" or name.startswith("nerf_lightning."):
            raise ImportError(f"the standalone check refuses to import {name}")
        return None


sys.meta_path.insert(0, RefuseNerfLightning())

import torch  # noqa: E402


def load_renderer(module_path, device):
    """A function (origins, directions, near, far, background) -> (rgb, depth, opacity)."""
    if not module_path.endswith(".pt2"):
        return torch.jit.load(module_path, map_location=device)
    extra = {"metadata.json": ""}
    program = torch.export.load(module_path, extra_files=extra)
    if device != "cpu":  # traced on the CPU: its weights and constants move
        from torch.export.passes import move_to_device_pass

        program = move_to_device_pass(program, device)
    module = program.module()
    chunk = int(json.loads(extra["metadata.json"])["chunk_rays"])

    def render(origins, directions, near, far, background):  # the program renders what it is given
        parts = [module(origins[i:i + chunk], directions[i:i + chunk], near[i:i + chunk], far[i:i + chunk],
                        background) for i in range(0, max(origins.shape[0], 1), chunk)]
        return tuple(torch.cat(p) for p in zip(*parts))

    return render


def main(module_path, manifest_path, result_path, device):
    torch.set_grad_enabled(False)
    renderer = load_renderer(module_path, device)
    manifest = json.loads(open(manifest_path).read())
    psnrs = []
    start = time.perf_counter()
    for view_path in manifest["views"]:
        view = torch.load(view_path, map_location="cpu", weights_only=True)
        rgb, _, _ = renderer(view["origins"].to(device), view["directions"].to(device),
                             view["near"].to(device), view["far"].to(device), view["background"].to(device))
        error = (rgb.double().clamp(0.0, 1.0) - view["target"].to(device).double().reshape(-1, 3)).square()
        psnrs.append(float(-10.0 * torch.log10(error.mean())))
    seconds = time.perf_counter() - start
    modules = sorted(m for m in sys.modules if m.split(".")[0] == "nerf_lightning")
    result = {"psnr": psnrs, "seconds": seconds, "torch": torch.__version__, "isolated": sys.flags.isolated,
              "nerf_lightning_modules": modules}
    with open(result_path, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main(*sys.argv[1:5])
'''


class VerifyError(RuntimeError):
    """The standalone module does not reproduce the checkpoint (or could not be run standalone)."""


@dataclass(frozen=True)
class VerifyResult:
    """Scores of the checkpoint and of the standalone module on the same views.

    Attributes:
        checkpoint_psnr, module_psnr: per view, dB.
        views: number of views.
        checkpoint_seconds, module_seconds: rendering time of each.
        imported: ``nerf_lightning`` modules the fresh process had loaded (must be empty).
        isolated: whether the fresh process ran with ``python -I``.
    """

    checkpoint_psnr: list[float]
    module_psnr: list[float]
    checkpoint_seconds: float
    module_seconds: float
    imported: list[str]
    isolated: bool

    @property
    def views(self) -> int:
        return len(self.checkpoint_psnr)

    @property
    def checkpoint_mean(self) -> float:
        return math.fsum(self.checkpoint_psnr) / len(self.checkpoint_psnr)

    @property
    def module_mean(self) -> float:
        return math.fsum(self.module_psnr) / len(self.module_psnr)

    @property
    def difference(self) -> float:
        """Module minus checkpoint mean PSNR, dB."""
        return self.module_mean - self.checkpoint_mean

    def lines(self, tolerance_db: float = DEFAULT_TOLERANCE_DB) -> list[str]:
        return [
            f"verify: checkpoint (render_image, this process): {self.checkpoint_mean:.4f} dB mean PSNR "
            f"over {self.views} test view{'s' if self.views != 1 else ''} ({self.checkpoint_seconds:.1f} s)",
            f"verify: standalone module (fresh python -I process, torch only, no nerf_lightning "
            f"imported): {self.module_mean:.4f} dB ({self.module_seconds:.1f} s)",
            f"verify: difference {self.difference:+.4f} dB (allowed ±{tolerance_db:g} dB): OK",
        ]


def image_psnr(rgb: Tensor, target: Tensor) -> float:
    """PSNR (dB, data range 1) of ``rgb`` clamped to ``[0, 1]`` against ``target`` (same shapes)."""
    error = (rgb.double().clamp(0.0, 1.0) - target.double()).square().mean()
    return float(-10.0 * torch.log10(error))


def run_standalone(module_path: Path, manifest: Path, device: str, workdir: Path) -> dict:
    """Run :data:`VERIFY_SCRIPT` in a fresh ``python -I`` process; its result dictionary."""
    script = workdir / "standalone_verify.py"
    script.write_text(VERIFY_SCRIPT)
    result_path = workdir / "result.json"
    command = [sys.executable, "-I", str(script), str(module_path.resolve()), str(manifest), str(result_path),
               device]
    process = subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=False)
    if process.returncode != 0 or not result_path.is_file():
        lines = [line for line in process.stderr.strip().splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {process.returncode}"
        raise VerifyError(f"the standalone module failed in a fresh process: {reason}")
    return json.loads(result_path.read_text())


@torch.no_grad()
def verify_export(model: NerfModule, datamodule: NerfDataModule, module_path: Path,
                       tolerance_db: float = DEFAULT_TOLERANCE_DB, max_views: int | None = None,
                       split: str = "test") -> VerifyResult:
    """Compare ``module_path``'s renders of the ``split`` views with ``model``'s own.

    Raises:
        VerifyError: the mean PSNRs differ by more than ``tolerance_db``, the fresh process
            imported ``nerf_lightning`` or could not render.
    """
    if not module_path.is_file():
        raise FileNotFoundError(f"{module_path}: no such module")
    scene = datamodule.splits.get(split)
    count = len(scene) if scene is not None else 0
    if max_views is not None:
        count = min(count, max_views)
    if count == 0:
        raise ExportError(f"verify: no {split} views to render")
    device = model.device
    checkpoint_psnr: list[float] = []
    with tempfile.TemporaryDirectory(prefix="nerf-lightning-verify-") as tmp:
        workdir = Path(tmp)
        view_paths: list[str] = []
        checkpoint_seconds = 0.0
        for index in range(count):
            batch = datamodule.image_batch(split, index, device, centres=True)  # one ray per pixel
            start = time.perf_counter()
            image = model.render_image(batch)
            checkpoint_seconds += time.perf_counter() - start
            checkpoint_psnr.append(image_psnr(image.rgb, image.target))
            rays = batch.rays
            view = {"origins": rays.origins, "directions": rays.directions, "near": rays.near,
                    "far": rays.far, "background": batch.background, "target": image.target}
            path = workdir / f"view{index:05d}.pt"
            torch.save({k: v.detach().float().cpu().contiguous() for k, v in view.items()}, path)
            view_paths.append(str(path))
        manifest = workdir / "views.json"
        manifest.write_text(json.dumps({"views": view_paths}))
        report = run_standalone(module_path, manifest, str(device), workdir)
    result = VerifyResult(checkpoint_psnr=checkpoint_psnr, module_psnr=[float(p) for p in report["psnr"]],
                          checkpoint_seconds=checkpoint_seconds, module_seconds=float(report["seconds"]),
                          imported=list(report["nerf_lightning_modules"]), isolated=bool(report["isolated"]))
    if result.imported:
        raise VerifyError(
            f"the fresh process imported {', '.join(result.imported)}; the module is not standalone"
        )
    if not abs(result.difference) <= tolerance_db:
        raise VerifyError(
            f"standalone module {result.module_mean:.4f} dB vs checkpoint {result.checkpoint_mean:.4f} dB "
            f"mean PSNR on {result.views} {split} views (difference {result.difference:+.4f} dB, allowed "
            f"±{tolerance_db:g} dB)"
        )
    return result
