"""A peer baseline for the benchmark: the NeRF of kornia 0.8.2 (``kornia.nerf``) at equal training time.

    python -m benchmarks.peer_kornia --scene demo --wall-s 60 --out bench_out/peer [--threads N]

``kornia.nerf`` was removed after kornia 0.8.2 while this project uses kornia 0.9, so the peer runs
in a virtual environment of its own (``bench_out/peer-venv`` unless told otherwise): created once
with ``python -m venv``, then ``torch==2.13.0`` (the local CPU build, the same as the project's;
every later install is constrained to it) and ``kornia==0.8.2`` plus numpy (:mod:`benchmarks.peer_venv`).
A marker file written after a successful import check makes later calls reuse it; an environment
without the marker is a half-built one and is built again.

What one :func:`run_peer` call does:

1. Loads the scene with the project's own loader (:func:`nerf_lightning.scenes.loading.load_split`,
   the dataset format, background and downscale of the scene's config, so the images are the ones
   our runs train and test on) and writes a neutral ``scene.npz`` (:func:`export_scene`, layout and
   conventions in :data:`SCENE_CONVENTION`), with a few *probe* rays computed by our own
   :func:`~nerf_lightning.cameras.geometry.generate_rays`.
2. Runs ``benchmarks/peer/kornia_nerf_train.py`` in the peer environment: it checks that kornia's
   rays of the probe pixels are our rays (a camera-convention bug stops it there), trains
   ``kornia.nerf`` for ``wall_s`` seconds of training time and renders the test views into
   ``predictions.npz`` and ``peer.json``.
3. Scores the predictions with the metric objects of our trainer's test loop
   (``nerf_lightning.system.module.image_metrics``: torchmetrics PSNR with ``data_range=1.0``, per image,
   averaged over the test images; SSIM likewise) against the same uint8 targets.

The end-to-end run (builds the environment, trains) is a script check, not a unit test; the
command above with a short ``--wall-s`` is that check. ``tests/benchmarks/test_peer_kornia.py`` covers the
export and the camera conversion without it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.peer_venv import DEFAULT_VENV, clean_env, ensure_peer_venv
from benchmarks.samplers import SCENES as BENCH_SCENES

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "benchmarks" / "peer" / "kornia_nerf_train.py"
PEER_NAME = "kornia 0.8.2 kornia.nerf"

SCENES: dict[str, dict[str, Any]] = {
    name: {"config": spec["config"], "root": spec["root"], "data": spec.get("data", {})}
    for name, spec in BENCH_SCENES.items()
}
"""Scene name -> the config whose ``data`` settings load it (with the bench's ``data`` overrides),
and its folder (``None``: the demo scene). The same scenes as ``benchmarks.samplers``."""

SCENE_FORMAT_VERSION = 1
SCENE_CONVENTION = """\
scene.npz (format_version 1), for each split S in (train, test):
  S_images             [N, H, W, 3] uint8, RGB already composited over `background`
  S_camera_to_world    [N, 4, 4] float64, OpenCV camera frame: x right, y down, z forward (the
                       viewing direction); world frame as the project's loader left it
  S_intrinsics         [N, 4] float64 fx, fy, cx, cy in pixels; pixel (col, row) covers
                       [col, col+1) x [row, row+1), its ray goes through the pixel centre
                       (col + 0.5, row + 0.5): direction_cam = ((col+0.5-cx)/fx, (row+0.5-cy)/fy, 1)
  probe_S_pixels       [K, 3] int64 (camera, col, row)
  probe_S_origins      [K, 3] float64 and probe_S_directions [K, 3] float64 (unit): the project's
                       rays of those pixels (nerf_lightning.cameras.geometry.generate_rays)
near, far              float64: depths along the optical axis (camera z) between which all content lies
background             [3] float64 in [0, 1]
scene                  str; convention: this text"""


# ----------------------------------------------------------------------- scene
def scene_root(scene: str, out_dir: Path) -> Path | None:
    """The dataset folder of ``scene``; ``None`` when its data is absent.

    The demo scene is ``data/demo`` when complete (what ``make demo`` generates), else it is
    generated into ``out_dir/demo-scene``.
    """
    from nerf_lightning.datasets.demo_scene import is_demo_scene_complete, make_demo_scene

    if scene not in SCENES:
        raise ValueError(f"unknown scene {scene!r}; expected one of: {', '.join(SCENES)}")
    root = SCENES[scene]["root"]
    if root is not None:
        return root if Path(root).is_dir() else None
    if is_demo_scene_complete(REPO / "data" / "demo"):
        return REPO / "data" / "demo"
    generated = Path(out_dir) / "demo-scene"
    if not is_demo_scene_complete(generated):
        make_demo_scene(generated)
    return generated


def data_settings(config: Path) -> dict[str, Any]:
    """The loader settings of a config's ``data`` section, with the datamodule's defaults."""
    import yaml

    data = yaml.safe_load(Path(config).read_text()).get("data") or {}
    return {
        "dataset_format": data.get("dataset_format", "auto"),
        "background": tuple(float(c) for c in data.get("background", (1.0, 1.0, 1.0))),
        "downscale": int(data.get("downscale", 1)),
        "scene_box": data.get("scene_box"),
        "scene_box_scale": float(data.get("scene_box_scale", 1.0)),
    }


def opencv_camera_to_world(cameras) -> np.ndarray:
    """``[N, 4, 4]`` float64 OpenCV camera-to-world matrices of our (OpenGL) :class:`Cameras`."""
    c2w = cameras.camera_to_world.double().numpy()  # [N, 3, 4], camera looks along -z, y up
    out = np.tile(np.eye(4), (c2w.shape[0], 1, 1))
    out[:, :3, :] = c2w
    out[:, :3, 1:3] *= -1.0  # flip the camera's y and z axes: y down, z forward
    return out


def split_arrays(prefix: str, split, *, num_probes: int = 16, seed: int = 0) -> dict[str, np.ndarray]:
    """The ``scene.npz`` arrays of one loaded split (:class:`~nerf_lightning.scenes.scene.SceneSplit`).

    Raises:
        ValueError: the images differ in size, or a camera has lens distortion (kornia.nerf's
            pinhole cameras cannot model it).
    """
    from nerf_lightning.cameras.geometry import generate_rays
    from nerf_lightning.core.types import SceneBox

    cameras = split.cameras
    if cameras.lens_models():  # distortion coefficients, or a fisheye lens
        raise ValueError(f"{split.source}: cameras with lens distortion cannot be exported "
                         "(kornia.nerf is pinhole)")
    shapes = {tuple(image.shape) for image in split.images}
    if len(shapes) != 1:
        raise ValueError(f"{split.source}: images of different sizes {sorted(shapes)}; expected one size")
    images = np.stack([split.images.uint8(i).numpy() for i in range(len(split))])
    height, width = images.shape[1:3]
    intrinsics = torch.stack([cameras.fx, cameras.fy, cameras.cx, cameras.cy], dim=-1).double().numpy()

    generator = torch.Generator().manual_seed(seed)
    camera = torch.randint(0, len(split), (num_probes,), generator=generator)
    cols = torch.randint(0, width, (num_probes,), generator=generator)
    rows = torch.randint(0, height, (num_probes,), generator=generator)
    # Include the image corners of the first camera: an off-by-half-pixel or a flipped axis shows most there.
    camera = torch.cat([torch.zeros(4, dtype=torch.int64), camera])
    cols = torch.cat([torch.tensor([0, width - 1, 0, width - 1]), cols])
    rows = torch.cat([torch.tensor([0, 0, height - 1, height - 1]), rows])
    box = SceneBox(torch.full((3,), -1.0e6), torch.full((3,), 1.0e6))  # only origins and directions are used
    rays = generate_rays(cameras.to("cpu"), camera, cols, rows, box)
    return {
        f"{prefix}_images": images,
        f"{prefix}_camera_to_world": opencv_camera_to_world(cameras),
        f"{prefix}_intrinsics": intrinsics,
        f"probe_{prefix}_pixels": torch.stack([camera, cols, rows], dim=-1).numpy(),
        f"probe_{prefix}_origins": rays.origins.double().numpy(),
        f"probe_{prefix}_directions": rays.directions.double().numpy(),
    }


def depth_range(train, settings: dict[str, Any]) -> tuple[float, float]:
    """``(near, far)`` depths along the optical axis holding the scene, from what our trainer uses.

    The loader's ``depth_range`` when it has one (forward-facing captures such as LLFF); otherwise
    the depths of our scene box's corners over all training cameras (the same box the datamodule
    derives: the config's ``scene_box``, or :func:`scene_box_from_cameras`), with ``near`` no closer
    than the datamodule's ``min_near``.
    """
    from nerf_lightning.core.types import SceneBox
    from nerf_lightning.scenes.bounds import min_near_from_cameras, scene_box_from_cameras

    if train.depth_range is not None:
        return float(train.depth_range[0]), float(train.depth_range[1])
    if settings["scene_box"] is not None:
        bounds = torch.tensor(settings["scene_box"], dtype=torch.float32)
        box = SceneBox(bounds[:3], bounds[3:])
    else:
        box = scene_box_from_cameras(train.cameras, settings["scene_box_scale"])
    lower, upper = box.lower.double(), box.upper.double()
    corners = torch.stack([torch.where(torch.tensor([(k >> i) & 1 for i in range(3)], dtype=torch.bool),
                                       upper, lower) for k in range(8)])  # [8, 3]
    c2w = train.cameras.camera_to_world.double()
    forward = -c2w[:, :, 2]  # [N, 3]
    depths = torch.einsum("nkj,nj->nk", corners[None] - c2w[:, None, :, 3], forward)  # [N, 8]
    near = max(float(depths.min()), min_near_from_cameras(train.cameras, box))
    return near, float(depths.max())


def export_scene(scene: str, root: Path, out_path: Path, *, num_probes: int = 16) -> dict[str, Any]:
    """Load ``scene`` (its config's data settings) from ``root`` and write ``out_path`` (``scene.npz``).

    Returns the arrays written (as numpy arrays).
    """
    from nerf_lightning.scenes.loading import load_split

    settings = {**data_settings(SCENES[scene]["config"]), **SCENES[scene]["data"]}
    options = {k: settings[k] for k in ("dataset_format", "background", "downscale")}
    train = load_split(root, "train", **options)
    test = load_split(root, "test", **options)
    near, far = depth_range(train, settings)
    arrays: dict[str, Any] = {
        **split_arrays("train", train, num_probes=num_probes, seed=0),
        **split_arrays("test", test, num_probes=num_probes, seed=1),
        "near": np.float64(near),
        "far": np.float64(far),
        "background": np.asarray(settings["background"], dtype=np.float64),
        "scene": np.str_(scene),
        "convention": np.str_(SCENE_CONVENTION),
        "format_version": np.int64(SCENE_FORMAT_VERSION),
    }
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(out_path.name + ".tmp.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, out_path)
    return arrays


# --------------------------------------------------------------------- scoring
def score_predictions(predictions: np.ndarray, targets: np.ndarray) -> dict[str, float]:
    """Test PSNR and SSIM exactly as our trainer's test loop computes them.

    Args:
        predictions: ``[M, H, W, 3]`` float in ``[0, 1]`` (clamped like our renders).
        targets: ``[M, H, W, 3]`` uint8 (the test images as stored, read as ``q / 255``).
    """
    from nerf_lightning.system.module import image_metrics

    metrics = image_metrics("test/")
    for pred, target in zip(predictions, targets, strict=True):
        pred_t = torch.tensor(np.asarray(pred), dtype=torch.float32).clamp(0, 1).permute(2, 0, 1)[None]
        target_t = (torch.tensor(np.asarray(target)).to(torch.float32) / 255.0).permute(2, 0, 1)[None]
        metrics.update(pred_t, target_t)
    values = metrics.compute()
    return {"psnr": float(values["test/psnr"]), "ssim": float(values["test/ssim"])}


# ------------------------------------------------------------------------- run
def run_peer(scene: str, out_dir: Path, wall_s: float, *, venv: Path = DEFAULT_VENV,
             threads: int | None = None, batch_size: int | None = None, num_ray_points: int | None = None,
             lr: float | None = None, seed: int = 0, verbose: bool = True) -> dict[str, Any] | None:
    """Train and test the kornia 0.8.2 NeRF on ``scene`` for ``wall_s`` training seconds.

    Args:
        scene: ``demo`` or ``fern`` (a key of :data:`SCENES`).
        out_dir: where ``scene.npz``, ``predictions.npz``, ``peer.json``, ``worker.log`` and
            ``result.json`` go (created).
        wall_s: training seconds (training clock only: scene loading and test renders excluded).
        venv: the peer environment, built on first use (:func:`ensure_peer_venv`).
        threads: torch threads of the worker; ``None`` keeps torch's default (all cores, unless
            ``OMP_NUM_THREADS`` says otherwise).
        batch_size, num_ray_points, lr: override the worker's defaults (512 rays, 64 samples, 5e-4; its
            docstring says why).
        seed: the worker's torch seed.

    Returns:
        ``{"name", "scene", "wall_s", "steps", "rays", "rays_per_s", "psnr", "ssim",
        "background_psnr", "threads"}`` (``background_psnr``: the PSNR of rendering nothing but the
        background colour, the floor any model must beat), also written to ``out_dir/result.json``;
        ``None`` when the scene's data is absent (nothing is built then).
    """
    out_dir = Path(out_dir).absolute()
    if SCENES.get(scene, {}).get("root") is not None and not Path(SCENES[scene]["root"]).is_dir():
        if verbose:
            print(f"peer: skipping {scene}: {SCENES[scene]['root']} not found", flush=True)
        return None
    out_dir.mkdir(parents=True, exist_ok=True)
    root = scene_root(scene, out_dir)
    if root is None:
        return None
    python = ensure_peer_venv(Path(venv))
    scene_path = out_dir / "scene.npz"
    arrays = export_scene(scene, root, scene_path)
    for stale in ("predictions.npz", "peer.json", "result.json"):
        (out_dir / stale).unlink(missing_ok=True)
    command = [str(python), str(WORKER), "--scene", str(scene_path), "--out", str(out_dir),
               "--wall-s", str(wall_s), "--seed", str(seed)]
    if threads is not None:
        command += ["--threads", str(threads)]
    if batch_size is not None:
        command += ["--batch-size", str(batch_size)]
    if num_ray_points is not None:
        command += ["--num-ray-points", str(num_ray_points)]
    if lr is not None:
        command += ["--lr", str(lr)]
    if verbose:
        print(f"peer: {scene}: training {PEER_NAME} for {wall_s:g} s (log: {out_dir / 'worker.log'})",
              flush=True)
    with open(out_dir / "worker.log", "w") as log:
        done = subprocess.run(command, cwd=out_dir, stdout=log, stderr=subprocess.STDOUT, env=clean_env())
    if done.returncode != 0:
        tail = (out_dir / "worker.log").read_text().strip().splitlines()[-5:]
        raise RuntimeError(f"the peer worker failed (exit {done.returncode}): " + " | ".join(tail))
    peer = json.loads((out_dir / "peer.json").read_text())
    with np.load(out_dir / "predictions.npz") as saved:
        predictions = saved["predictions"]
    targets = arrays["test_images"]
    scores = score_predictions(predictions, targets)
    background = np.broadcast_to(arrays["background"].astype(np.float32), targets.shape)
    floor = score_predictions(background, targets)
    result = {
        "name": peer["name"], "scene": scene, "wall_s": round(float(peer["wall_s"]), 1),
        "steps": int(peer["steps"]), "rays": int(peer["rays"]),
        "rays_per_s": round(float(peer["rays_per_s"]), 1),
        "psnr": round(scores["psnr"], 3), "ssim": round(scores["ssim"], 4),
        "background_psnr": round(floor["psnr"], 3), "threads": peer.get("threads"),
    }
    (out_dir / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    if not math.isfinite(result["psnr"]) and verbose:
        print("peer: warning: non-finite PSNR", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", choices=list(SCENES), default="demo")
    parser.add_argument("--wall-s", type=float, default=180.0, help="training seconds")
    parser.add_argument("--out", type=Path, default=REPO / "bench_out" / "peer")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV,
                        help="the peer environment (built on first use)")
    parser.add_argument("--threads", type=int, default=None, help="worker torch threads (default: torch's)")
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--num-ray-points", type=int, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args(argv)
    result = run_peer(options.scene, options.out, options.wall_s, venv=options.venv, threads=options.threads,
                      batch_size=options.batch_size, num_ray_points=options.num_ray_points, lr=options.lr,
                      seed=options.seed)
    print(json.dumps(result, indent=2) if result is not None else f"{options.scene}: skipped (no data)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
