"""Train kornia 0.8.2's NeRF (``kornia.nerf``) for a fixed training time, then render the test views.

Runs inside the peer environment (torch 2.13.0 + kornia 0.8.2, built by ``benchmarks/peer_kornia.py``)
and imports nothing of nerf_lightning; it reads the neutral ``scene.npz`` the driver exports (layout
and conventions: ``SCENE_CONVENTION`` in ``benchmarks/peer_kornia.py``) and writes
``predictions.npz`` (``predictions`` ``[M, H, W, 3]`` float32 in ``[0, 1]``, test order) and
``peer.json`` into ``--out``.

    <peer-venv>/bin/python kornia_nerf_train.py --scene scene.npz --out DIR --wall-s 60 [--threads N]

What runs is kornia's own code wherever kornia has it:

* Cameras: ``kornia.geometry.camera.PinholeCamera`` with world-to-camera extrinsics (OpenCV frame)
  and a 4x4 intrinsic matrix. kornia.nerf casts the ray of pixel ``(col, row)`` through the integer
  position ``(col, row)`` (``RandomRaySampler`` truncates, ``UniformRaySampler`` uses ``arange``),
  while the scene's rays go through pixel centres ``(col + 0.5, row + 0.5)``; so ``cx`` and ``cy``
  are passed half a pixel lower (:func:`kornia_camera_matrices`). Before training, kornia's rays
  of the scene's probe pixels are checked against the project's rays (:func:`check_probe_rays`).
* Model and optimiser: ``NerfSolver.setup_solver`` builds kornia's ``NerfModel`` (8x128 MLP with a
  skip, 10/4 positional/directional frequencies, log-spaced; stratified ("irregular") samples along
  each ray between ``min_depth`` and ``max_depth``) and Adam, all kornia's defaults except the
  learning rate (below).
* Rays: each "epoch" (as in ``NerfSolver._train_one_epoch``) builds a ``RayDataset`` of
  ``--rays-per-camera`` random pixels of every training camera and iterates it with
  ``instantiate_ray_dataloader`` in shuffled batches. The training loop is
  ``NerfSolver._train_one_epoch``'s (forward, MSE, backward, Adam step) with a clock check after
  every step, because ``NerfSolver.run`` only counts epochs.
* ``ndc=False``: kornia's NDC conversion (``transform_ray_params_world_to_ndc``) divides *world*
  coordinates by the world ``z``, valid only for a world frame that is a forward-looking camera
  frame; sampling between the scene's near and far depths in world space is what our own Uniform
  sampler does, and works for the 360-degree demo scene and for LLFF alike.
* Test renders: the rays of every test pixel come from kornia's ``UniformRaySampler`` (the same ray
  code as training), rendered by the trained ``NerfModel`` in chunks. kornia's
  ``NerfModelRenderer`` is *not* used: in 0.8.2 it starts rays at ``extrinsics[:3, 3]`` (the
  world-to-camera translation, not the camera centre) with unit directions, so its samples span 1
  world unit from the wrong point, unlike training's ``min_depth``-to-``max_depth`` segments. The
  model keeps its training-time behaviour at render time (random stratified samples, density noise
  of std 0.1): ``NerfModel.forward`` has no evaluation mode, and that is kornia's renderer too.

Choices, and why:

* ``--num-ray-points 64``: the original NeRF's coarse sample count (kornia has no default).
* ``--batch-size 512`` rays: 512 x 64 = 32768 samples per step, the per-step sample budget of the
  project's demo config (``SampleBudget(target_samples=32768)``), so a step costs a CPU about the
  same field evaluations on both sides; larger batches mean fewer Adam steps in a short budget.
* ``--rays-per-camera 256``: a new random draw every ``256 * cameras / 512`` steps (50 steps on the
  100-view demo scene); the value only sets how often kornia redraws pixels.
* ``--lr 5e-4``, the original NeRF's rate, not kornia's default ``1e-3``: on the white-background
  demo scene ``1e-3`` collapses within ~30 steps (two seeds tried) into an opaque white fog:
  densities grow everywhere, so rays end in the empty space near the camera, the colour logits run
  past ~17 where float32's sigmoid is exactly 1.0 and their gradients become exactly 0, and the model
  renders the background colour forever (test PSNR equal to the all-background PSNR). ``5e-4``
  keeps learning (train loss below the all-white loss after ~60 steps, both seeds).
* ``--threads``: ``torch.set_num_threads``; default torch's own (all cores unless ``OMP_NUM_THREADS``).
* ``--eval-chunk 512`` rays per render call. Measured on CPU (one thread): chunks of 512 rays
  render ~1.6x faster than 4096 (bigger activations are fresh memory maps each call, and the
  page faults dominate); training steps of 1024 rays cost 3x those of 512 for the same reason.

``peer.json``: ``{"name", "wall_s", "steps", "rays", "rays_per_s", ...}`` where ``wall_s`` is the
training clock (from the first batch to the last step; scene loading and test renders excluded) and
``rays`` the number of training rays (pixels) processed.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

NAME = "kornia 0.8.2 kornia.nerf"


def kornia_camera_matrices(camera_to_world: np.ndarray,
                           intrinsics: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """kornia ``PinholeCamera`` matrices of the scene's cameras.

    Args:
        camera_to_world: ``[N, 4, 4]`` OpenCV camera-to-world (x right, y down, z forward).
        intrinsics: ``[N, 4]`` ``fx, fy, cx, cy`` with pixel centres at ``+0.5``.

    Returns:
        ``(K, E)``: ``[N, 4, 4]`` float64 intrinsics with ``cx - 0.5, cy - 0.5`` (kornia.nerf casts
        the ray of pixel ``(col, row)`` through ``(col, row)``), and ``[N, 4, 4]`` world-to-camera
        extrinsics (kornia unprojects with ``inverse(K @ E)``).
    """
    camera_to_world = np.asarray(camera_to_world, dtype=np.float64)
    intrinsics = np.asarray(intrinsics, dtype=np.float64)
    k = np.tile(np.eye(4), (intrinsics.shape[0], 1, 1))
    k[:, 0, 0] = intrinsics[:, 0]
    k[:, 1, 1] = intrinsics[:, 1]
    k[:, 0, 2] = intrinsics[:, 2] - 0.5
    k[:, 1, 2] = intrinsics[:, 3] - 0.5
    return k, np.linalg.inv(camera_to_world)


def ray_mismatch(origins: np.ndarray, directions: np.ndarray, ref_origins: np.ndarray,
                 ref_directions: np.ndarray) -> tuple[float, float]:
    """How far rays ``(origins, directions)`` are from reference rays (unit ``ref_directions``).

    Returns:
        ``(distance, angle)``: the largest distance of an origin from its reference ray's line
        (in front of the reference origin; behind it counts as a miss) and the largest angle
        (radians) between directions; both 0 for the same rays up to where they start.
    """
    d = directions / np.linalg.norm(directions, axis=-1, keepdims=True)
    offset = origins - ref_origins
    along = np.einsum("ij,ij->i", offset, ref_directions)
    across = np.linalg.norm(offset - along[:, None] * ref_directions, axis=-1)
    across = np.where(along >= -1e-6, across, np.inf)
    # From the chord, not arccos of a dot product (which loses half the digits near 0).
    chord = np.linalg.norm(d - ref_directions, axis=-1)
    angle = 2.0 * np.arcsin(np.clip(0.5 * chord, 0.0, 1.0))
    return float(across.max(initial=0.0)), float(angle.max(initial=0.0))


def make_cameras(scene, split: str, dtype: torch.dtype):
    from kornia.geometry.camera import PinholeCamera

    k, e = kornia_camera_matrices(scene[f"{split}_camera_to_world"], scene[f"{split}_intrinsics"])
    count, height, width = scene[f"{split}_images"].shape[:3]
    return PinholeCamera(torch.from_numpy(k).to(dtype), torch.from_numpy(e).to(dtype),
                         torch.full((count,), height, dtype=torch.int64),
                         torch.full((count,), width, dtype=torch.int64))


def image_rays(cameras, index: int, near: float, far: float,
               dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """kornia.nerf's rays of every pixel of camera ``index``, row-major: origins, directions ``[H*W, 3]``."""
    from kornia.nerf.camera_utils import cameras_for_ids
    from kornia.nerf.samplers import UniformRaySampler

    sampler = UniformRaySampler(near, far, False, device=torch.device("cpu"), dtype=dtype)
    sampler.calc_ray_params(cameras_for_ids(cameras, [index]))
    return sampler.origins, sampler.directions


def check_probe_rays(scene, cameras: dict, near: float, far: float, dtype: torch.dtype) -> dict[str, float]:
    """Check that kornia's rays of the probe pixels are the project's rays; raise if not."""
    worst = {"distance": 0.0, "angle": 0.0}
    for split, cams in cameras.items():
        pixels = scene[f"probe_{split}_pixels"]
        width = scene[f"{split}_images"].shape[2]
        rays = {int(c): image_rays(cams, int(c), near, far, dtype) for c in np.unique(pixels[:, 0])}
        origins, directions = [], []
        for camera, col, row in pixels:
            o, d = rays[int(camera)]
            origins.append(o[int(row) * width + int(col)].double().numpy())
            directions.append(d[int(row) * width + int(col)].double().numpy())
        distance, angle = ray_mismatch(np.stack(origins), np.stack(directions),
                                       scene[f"probe_{split}_origins"], scene[f"probe_{split}_directions"])
        scale = max(abs(far), 1.0)
        if not (distance <= 1e-4 * scale and angle <= 1e-4):
            raise RuntimeError(f"kornia's rays differ from the scene's probe rays ({split}): origin off the "
                               f"ray "
                               f"by {distance:.3g}, direction off by {angle:.3g} rad; camera conversion bug")
        worst = {"distance": max(worst["distance"], distance), "angle": max(worst["angle"], angle)}
    return worst


def train(scene, cameras, args, dtype: torch.dtype) -> tuple[torch.nn.Module, dict]:
    import torch.nn.functional as F
    from kornia.nerf.data_utils import RayDataset, instantiate_ray_dataloader
    from kornia.nerf.nerf_solver import NerfSolver

    near, far = float(scene["near"]), float(scene["far"])
    device = torch.device("cpu")
    images = [torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))) for img in scene["train_images"]]
    solver = NerfSolver(device=device, dtype=dtype)
    solver.setup_solver(cameras, near, far, False, images, args.rays_per_camera, args.batch_size,
                        args.num_ray_points, lr=args.lr)
    model, optimizer = solver.nerf_model, solver._nerf_optimizer  # kornia exposes no optimizer property
    num_img_rays = solver._num_img_rays
    steps = rays = epochs = 0
    last_psnr = float("nan")
    start = time.perf_counter()
    elapsed = 0.0
    while elapsed < args.wall_s:
        # NerfSolver._train_one_epoch, with the clock checked after every step.
        dataset = RayDataset(cameras, near, far, False, device=device, dtype=dtype)
        dataset.init_ray_dataset(num_img_rays)
        dataset.init_images_for_training(images)
        for origins, directions, rgbs in instantiate_ray_dataloader(dataset, args.batch_size, shuffle=True):
            rgbs_model = model(origins, directions)
            loss = F.mse_loss(rgbs_model, rgbs)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            rays += origins.shape[0]
            elapsed = time.perf_counter() - start
            if steps % args.log_every == 0:
                value = loss.item()
                last_psnr = -10.0 * math.log10(max(value, 1e-10))
                print(f"step {steps} t {elapsed:.1f}s loss {value:.5f} psnr {last_psnr:.2f}", flush=True)
            if elapsed >= args.wall_s:
                break
        epochs += 1
    elapsed = time.perf_counter() - start
    return model, {"wall_s": elapsed, "steps": steps, "rays": rays, "epochs": epochs,
                   "rays_per_s": rays / elapsed if elapsed > 0 else 0.0, "last_train_psnr": last_psnr}


@torch.no_grad()
def render_test(model, scene, cameras, chunk: int, dtype: torch.dtype) -> np.ndarray:
    near, far = float(scene["near"]), float(scene["far"])
    count, height, width = scene["test_images"].shape[:3]
    out = np.zeros((count, height, width, 3), dtype=np.float32)
    for i in range(count):
        origins, directions = image_rays(cameras, i, near, far, dtype)
        parts = [model(origins[s:s + chunk], directions[s:s + chunk])
                 for s in range(0, origins.shape[0], chunk)]
        out[i] = torch.cat(parts).clamp(0, 1).reshape(height, width, 3).numpy()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scene", type=Path, required=True, help="scene.npz written by the driver")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--wall-s", type=float, required=True, help="training seconds")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--batch-size", type=int, default=512, help="rays per step")
    parser.add_argument("--num-ray-points", type=int, default=64, help="samples per ray")
    parser.add_argument("--rays-per-camera", type=int, default=256, help="random pixels per camera per epoch")
    parser.add_argument("--lr", type=float, default=5.0e-4, help="Adam's learning rate (kornia's: 1e-3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-chunk", type=int, default=512, help="rays rendered at once")
    parser.add_argument("--log-every", type=int, default=10)
    args = parser.parse_args(argv)

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    import kornia

    dtype = torch.float32
    with np.load(args.scene) as saved:
        scene = {key: saved[key] for key in saved.files}
    near, far = float(scene["near"]), float(scene["far"])
    cameras = {split: make_cameras(scene, split, dtype) for split in ("train", "test")}
    mismatch = check_probe_rays(scene, cameras, near, far, dtype)
    print(f"kornia {kornia.__version__}, torch {torch.__version__}, {torch.get_num_threads()} threads; "
          f"{len(scene['train_images'])} train / {len(scene['test_images'])} test views "
          f"{scene['train_images'].shape[2]}x{scene['train_images'].shape[1]}, "
          f"near {near:.3f} far {far:.3f}; "
          f"probe rays match (max offset {mismatch['distance']:.2g}, angle {mismatch['angle']:.2g} rad)",
          flush=True)

    model, stats = train(scene, cameras["train"], args, dtype)
    print(f"trained {stats['steps']} steps, {stats['rays']} rays in {stats['wall_s']:.1f} s "
          f"({stats['rays_per_s']:.0f} rays/s)", flush=True)
    start = time.perf_counter()
    predictions = render_test(model, scene, cameras["test"], args.eval_chunk, dtype)
    render_s = time.perf_counter() - start
    print(f"rendered {len(predictions)} test views in {render_s:.1f} s", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    np.savez(args.out / "predictions.npz", predictions=predictions)
    report = {
        "name": NAME, "wall_s": stats["wall_s"], "steps": stats["steps"], "rays": stats["rays"],
        "rays_per_s": stats["rays_per_s"], "epochs": stats["epochs"],
        "last_train_psnr": stats["last_train_psnr"],
        "render_s": render_s, "threads": torch.get_num_threads(), "batch_size": args.batch_size,
        "num_ray_points": args.num_ray_points, "rays_per_camera": args.rays_per_camera, "lr": args.lr,
        "near": near, "far": far, "kornia": kornia.__version__, "torch": torch.__version__,
    }
    (args.out / "peer.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
