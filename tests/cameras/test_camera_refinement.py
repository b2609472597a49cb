"""Camera refinement: the exp map, the ray correction, recovering a known pose error, checkpoints and the
transforms.json export of the refined poses."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import Callback, Trainer
from torch import Tensor

from nerf_lightning.cameras import CameraRefinement, so3_exp
from nerf_lightning.cameras.geometry import Cameras, generate_rays, pixel_grid
from nerf_lightning.cli import main, run_lightning_cli
from nerf_lightning.core.types import SceneBox
from nerf_lightning.data.batch import RayBatch
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.export.transforms import dataset_world_poses
from nerf_lightning.fields import HashGridField
from nerf_lightning.fields.base import RadianceField
from nerf_lightning.samplers import Uniform
from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio, scan_nerfstudio
from nerf_lightning.scenes.problems import Problems
from nerf_lightning.system.module import NerfModule
from tests.helpers.runs import RUN, short_run_args


def _hat(w: Tensor) -> Tensor:
    """``[3, 3]`` cross-product matrix of ``w [3]``."""
    zero = w.new_zeros(())
    return torch.stack([torch.stack([zero, -w[2], w[1]]), torch.stack([w[2], zero, -w[0]]),
                        torch.stack([-w[1], w[0], zero])])


def _look_at(eye: tuple[float, float, float]) -> Tensor:
    """``[3, 4]`` OpenGL camera-to-world at ``eye`` looking at the origin, world ``+z`` up."""
    position = torch.tensor(eye)
    back = position / position.norm()
    right = torch.linalg.cross(torch.tensor([0.0, 0.0, 1.0]), back)
    right = right / right.norm()
    up = torch.linalg.cross(back, right)
    return torch.cat([torch.stack([right, up, back], dim=1), position[:, None]], dim=1)


def _cameras(camera_to_world: Tensor, size: int, focal: float) -> Cameras:
    n = camera_to_world.shape[0]
    full = torch.full((n,), 1.0)
    return Cameras(camera_to_world, focal * full, focal * full, 0.5 * size * full, 0.5 * size * full,
                   torch.full((n,), size), torch.full((n,), size), torch.zeros(n, 4))


def _refinement(table: Tensor, **options: float) -> CameraRefinement:
    refinement = CameraRefinement(**options)
    refinement.set_num_cameras(table.shape[0])
    with torch.no_grad():
        refinement.corrections.copy_(table)
    return refinement


# --- the exp map ----------------------------------------------------------------------------------------


def test_exp_map_is_the_identity_at_zero_and_matches_known_rotations() -> None:
    assert torch.equal(so3_exp(torch.zeros(3)), torch.eye(3))
    quarter = so3_exp(torch.tensor([0.0, 0.0, math.pi / 2]))  # right-hand rule: +x turns into +y
    assert torch.allclose(quarter @ torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0.0, 1.0, 0.0]), atol=1e-6)
    generator = torch.Generator().manual_seed(0)
    # Both sides of the Taylor branch (|w| < 1e-3) and large angles, against the matrix exponential.
    for scale in (1e-6, 5e-4, 2e-3, 0.3, 2.5):
        w = torch.randn(3, generator=generator, dtype=torch.float64)
        w = scale * w / w.norm()
        expected = torch.linalg.matrix_exp(_hat(w))
        assert torch.allclose(so3_exp(w), expected, atol=1e-12, rtol=0), scale


def test_exp_map_gradient_at_zero_is_finite_and_the_generators() -> None:
    weights = torch.randn(3, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    w = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    (so3_exp(w) * weights).sum().backward()
    assert w.grad is not None and torch.isfinite(w.grad).all()
    # d exp(w) / d w_k at zero is hat(e_k).
    expected = torch.stack([(_hat(e) * weights).sum() for e in torch.eye(3, dtype=torch.float64)])
    assert torch.allclose(w.grad, expected, atol=1e-12)


# --- the correction of rays and poses --------------------------------------------------------------------


def test_corrected_rays_are_the_rays_of_the_corrected_poses() -> None:
    poses = torch.stack([_look_at((3.0, 0.5, 1.0)), _look_at((-1.0, 2.5, 0.3)), _look_at((0.2, -3.0, 2.0))])
    table = torch.tensor([[0.05, -0.02, 0.08, 0.1, -0.2, 0.05], [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                          [-0.3, 0.1, 0.02, -0.05, 0.0, 0.3]])
    refinement = _refinement(table)
    box = SceneBox.cube(1.5)
    cols, rows = pixel_grid(6, 5)
    indices = torch.arange(3).repeat_interleave(30)
    cols, rows = cols.repeat(3), rows.repeat(3)
    rays = generate_rays(_cameras(poses, 6, 5.0), indices, cols, rows, box)
    corrected = refinement.correct_rays(rays, indices)
    expected = generate_rays(_cameras(refinement.corrected_poses(poses), 6, 5.0), indices, cols, rows, box)
    assert torch.allclose(corrected.origins, expected.origins, atol=1e-6)
    assert torch.allclose(corrected.directions, expected.directions, atol=1e-6)
    assert torch.equal(corrected.near, rays.near) and torch.equal(corrected.far, rays.far)
    # Rotation about the camera centre: a pure rotation leaves the centre where it was.
    turned = _refinement(table * torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])).corrected_poses(poses)
    assert torch.allclose(turned[:, :, 3], poses[:, :, 3])


def test_constant_corrections_move_the_rays_without_asking_for_a_gradient() -> None:
    poses = torch.stack([_look_at((3.0, 0.5, 1.0)), _look_at((-1.0, 2.5, 0.3))])
    refinement = _refinement(torch.tensor([[0.05, -0.02, 0.08, 0.1, -0.2, 0.05],
                                           [0.1, 0.0, -0.1, 0.0, 0.3, 0.0]]))
    cols, rows = pixel_grid(4, 4)
    indices = torch.arange(2).repeat_interleave(16)
    rays = generate_rays(_cameras(poses, 4, 5.0), indices, cols.repeat(2), rows.repeat(2),
                         SceneBox.cube(1.5))
    learning = refinement.correct_rays(rays, indices)
    constant = refinement.correct_rays(rays, indices, learn=False)
    assert learning.origins.requires_grad and learning.directions.requires_grad
    assert not constant.origins.requires_grad and not constant.directions.requires_grad
    assert torch.equal(constant.origins, learning.origins.detach())
    assert torch.equal(constant.directions, learning.directions.detach())


def test_the_corrections_learn_from_start_step_on_every_nth_step() -> None:
    refinement = CameraRefinement(start_step=3, every=2)
    assert [step for step in range(10) if refinement.learns_at(step)] == [3, 5, 7, 9]
    assert all(CameraRefinement(start_step=0, every=1).learns_at(step) for step in range(5))
    for options, field in [({"start_step": -1}, "start_step"), ({"start_step": 1.5}, "start_step"),
                           ({"every": 0}, "every"), ({"every": True}, "every"),
                           ({"learning_rate": 0.0}, "learning_rate"), ({"penalty": -1.0}, "penalty")]:
        with pytest.raises(ValueError, match=f"^{field} must be"):
            CameraRefinement(**options)  # type: ignore[arg-type]


def test_table_is_sized_by_setup_and_by_the_checkpoint_it_loads() -> None:
    trained = _refinement(torch.arange(30.0).reshape(5, 6) / 100, penalty=0.5)
    fresh = CameraRefinement()
    assert fresh.num_cameras == 0 and float(fresh.penalty_loss()) == 0.0
    fresh.load_state_dict(trained.state_dict())  # an empty table takes the checkpoint's size
    assert torch.equal(fresh.corrections, trained.corrections)
    fresh.set_num_cameras(5)  # setup with the same size keeps what was loaded
    assert torch.equal(fresh.corrections, trained.corrections)
    fresh.set_num_cameras(7)
    assert fresh.num_cameras == 7 and not fresh.corrections.any()
    penalty = trained.penalty_loss()
    assert penalty.dim() == 0
    assert math.isclose(float(penalty), 0.5 * float(trained.corrections.square().sum()) / 5, rel_tol=1e-6)
    degrees, translation = trained.correction_sizes()
    assert math.isclose(float(degrees), math.degrees(float(trained.corrections[:, :3].norm(dim=-1).mean())),
                        rel_tol=1e-6)
    assert math.isclose(float(translation), float(trained.corrections[:, 3:].norm(dim=-1).mean()),
                        rel_tol=1e-6)


def test_hash_grid_positions_get_gradients_only_when_they_ask() -> None:
    """Refined rays move sample positions: the hash encoding must pass their gradient on."""
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16)
    positions = (torch.rand(64, 3, generator=torch.Generator().manual_seed(2)) - 0.5).requires_grad_()
    directions = torch.nn.functional.normalize(torch.randn(64, 3), dim=-1)
    density, rgb = field(positions, directions)
    (density.sum() + rgb.sum()).backward()
    assert positions.grad is not None and positions.grad.abs().sum() > 0


# --- it fixes poses ----------------------------------------------------------------------------------------

_BLOBS = torch.tensor([[0.5, 0.2, 0.0], [-0.6, 0.4, 0.5], [0.1, -0.7, -0.4], [-0.3, -0.2, 0.6],
                       [0.6, 0.6, -0.6]])


class StripedBlobs(RadianceField):
    """Five soft, striped balls spread through the box, at different depths from every camera (the
    parallax is what tells a camera's rotation from its translation)."""

    def __init__(self) -> None:
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(()))  # a field parameter, for the optimizer

    def density(self, positions: Tensor) -> Tensor:
        distance = (positions[:, None, :] - _BLOBS.to(positions)).norm(dim=-1)  # [S, 5]
        return 60.0 * torch.sigmoid((0.3 - distance) / 0.03).sum(-1)

    def forward(self, positions: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
        frequencies = torch.tensor([9.0, 11.0, 13.0]).to(positions)
        rgb = 0.5 + 0.5 * torch.sin(frequencies * positions + 5.0 * positions.roll(1, dims=-1))
        return self.density(positions), rgb + 0.0 * self.anchor


@pytest.mark.slow  # seconds of optimizer steps on 4 rendered views
def test_training_steps_recover_a_known_pose_error() -> None:
    """Targets rendered at the true poses, rays made at perturbed ones: fitting the corrections through
    ``training_step`` (and the optimizer ``configure_optimizers`` builds) must bring the corrected poses
    back towards the true ones. A sign or convention error in the correction, or between the rays it
    moves and the poses it reports, moves them away instead."""
    true = torch.stack([_look_at(eye) for eye in
                        [(3.0, 0.3, 0.6), (0.4, 3.0, 1.0), (-3.0, -0.5, 0.9), (0.2, -2.9, 1.4)]])
    perturbation = torch.tensor([[0.04, -0.03, 0.02, 0.06, -0.04, 0.05],
                                 [-0.03, 0.04, 0.03, -0.05, 0.06, 0.03],
                                 [0.02, 0.03, -0.04, 0.04, 0.05, -0.06],
                                 [-0.04, -0.02, -0.03, -0.06, -0.03, 0.04]])
    given = _refinement(perturbation).corrected_poses(true)  # ~3 deg and ~0.08 world units off
    # 16x16 views (the field of view of 32x32 ones at focal 28): as close a recovery as at 32x32
    size, focal, box, background = 16, 14.0, SceneBox.cube(1.5), torch.ones(3)
    cols, rows = pixel_grid(size, size)
    indices = torch.arange(4).repeat_interleave(size * size)
    cols, rows = cols.repeat(4), rows.repeat(4)
    model = NerfModule(field=StripedBlobs(), sampler=Uniform(num_samples=48),
                       camera_refinement=CameraRefinement(learning_rate=3e-3, penalty=1e-3, start_step=0,
                                                          every=1))
    model.set_scene_box(box)
    model.camera_refinement.set_num_cameras(4)
    with torch.no_grad():
        target = model.render_rays(generate_rays(_cameras(true, size, focal), indices, cols, rows, box),
                                   background)[0].rgb
    rays = generate_rays(_cameras(given, size, focal), indices, cols, rows, box)
    batch = RayBatch(rays=rays, rgb=target, background=background, sampler_seed=0, camera_indices=indices)
    optimizer = model.configure_optimizers()
    assert [group["lr"] for group in optimizer.param_groups] == [model.learning_rate, 3e-3]

    def pose_errors(poses: Tensor) -> tuple[float, float]:
        rotation = torch.linalg.matrix_norm(poses[:, :, :3] - true[:, :, :3]).mean()
        return float(rotation), float((poses[:, :, 3] - true[:, :, 3]).norm(dim=-1).mean())

    losses = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*self.log.*")  # no Trainer to log to
        for step in range(150):
            optimizer.zero_grad()
            loss = model.training_step(batch, step)["loss"]
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
    rotation_before, translation_before = pose_errors(given)
    rotation_after, translation_after = pose_errors(model.camera_refinement.corrected_poses(given))
    assert losses[-1] < 0.02 * losses[0], losses[::25]
    assert rotation_after < 0.35 * rotation_before, (rotation_before, rotation_after)
    assert translation_after < 0.6 * translation_before, (translation_before, translation_after)


# --- the default is unchanged --------------------------------------------------------------------------


def _small_field() -> HashGridField:
    return HashGridField(num_levels=2, log2_hashmap_size=10, max_resolution=32, hidden_dim=8)


def test_without_refinement_the_model_keeps_its_hyperparameters_parameters_and_optimizer() -> None:
    model = NerfModule(field=_small_field())
    assert model.camera_refinement is None and "camera_refinement" not in model.hparams
    assert not any(key.startswith("camera_refinement") for key in model.state_dict())
    optimizer = model.configure_optimizers()
    assert len(optimizer.param_groups) == 1 and optimizer.param_groups[0]["lr"] == model.learning_rate
    refinement = CameraRefinement(learning_rate=5e-4, penalty=0.1)
    refined = NerfModule(field=_small_field(), camera_refinement=refinement)
    assert refined.hparams["camera_refinement"] == {
        "class_path": "nerf_lightning.cameras.refinement.CameraRefinement",
        "init_args": {"learning_rate": 5e-4, "penalty": 0.1, "start_step": 300, "every": 4}}
    assert refined.apply(lambda module: None) is refined  # nn.Module.apply still reaches every submodule


def test_dataset_world_poses_undo_a_loaders_normalisation() -> None:
    poses = torch.stack([_look_at((3.0, 0.5, 1.0)), _look_at((-1.0, 2.5, 0.3))]).double()
    scale, turn = 0.25, so3_exp(torch.tensor([0.3, -0.2, 0.5], dtype=torch.float64))
    transform = torch.cat([turn, torch.tensor([[0.1], [-0.4], [0.7]], dtype=torch.float64)], dim=1)
    centres = torch.einsum("ij,nj->ni", turn, scale * poses[:, :, 3]) + transform[:, 3]
    normalised = torch.cat([turn @ poses[:, :, :3], centres[:, :, None]], dim=-1)
    restored = dataset_world_poses(normalised, scale, transform)
    assert restored.shape == (2, 4, 4)
    assert torch.allclose(torch.from_numpy(restored[:, :3]), poses, atol=1e-12)
    assert (restored[:, 3] == [0.0, 0.0, 0.0, 1.0]).all()
    assert torch.allclose(torch.from_numpy(dataset_world_poses(poses)[:, :3]), poses)


# --- a real run: checkpoint, load, export ------------------------------------------------------------------


class CorrectionSteps(Callback):
    """The training steps after which the camera corrections had changed."""

    def __init__(self) -> None:
        self.changed: list[int] = []
        self._before = torch.zeros(0)

    def on_train_batch_start(self, trainer: Trainer, pl_module: NerfModule, batch: Any,
                             batch_idx: int) -> None:
        assert pl_module.camera_refinement is not None
        self._before = pl_module.camera_refinement.corrections.detach().clone()

    def on_train_batch_end(self, trainer: Trainer, pl_module: NerfModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        assert pl_module.camera_refinement is not None
        if not torch.equal(pl_module.camera_refinement.corrections.detach(), self._before):
            self.changed.append(trainer.global_step - 1)  # the step that just ran


@pytest.mark.slow
def test_a_run_moves_the_corrections_on_their_steps_only(tiny_scene: Path, tmp_path: Path) -> None:
    """In a real run the optimizer changes the corrections on the steps ``start_step`` and ``every``
    name and on no other (a constant step must leave Adam nothing to apply to them)."""
    cli = run_lightning_cli(["fit", *short_run_args(
        tiny_scene, tmp_path, "--model.camera_refinement=CameraRefinement",
        "--model.camera_refinement.start_step=3", "--model.camera_refinement.every=2",
        "--trainer.callbacks+=tests.cameras.test_camera_refinement.CorrectionSteps", steps=9)])
    recorder = next(c for c in cli.trainer.callbacks if isinstance(c, CorrectionSteps))
    assert recorder.changed == [3, 5, 7]


@pytest.mark.slow
def test_fit_checkpoint_reloads_the_table_and_export_writes_the_refined_poses(
    tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = run_lightning_cli(["fit", *short_run_args(tiny_scene, tmp_path / "fit",
                                                    "--model.camera_refinement=CameraRefinement",
                                                    "--model.camera_refinement.learning_rate=0.01",
                                                    "--model.camera_refinement.start_step=0",
                                                    "--model.camera_refinement.every=1")])
    logged = cli.trainer.logged_metrics
    assert {"train/camera_correction_deg", "train/camera_correction_translation"} <= set(logged)
    groups = cli.trainer.optimizers[0].param_groups
    assert groups[1]["name"] == "camera_refinement" and groups[1]["lr"] == 0.01
    ckpt = tmp_path / "fit" / RUN / "checkpoints" / "last.ckpt"
    loaded = NerfModule.load_from_checkpoint(ckpt, weights_only=True)
    assert loaded.camera_refinement is not None and loaded.camera_refinement.num_cameras == 8
    assert torch.equal(loaded.camera_refinement.corrections, cli.model.camera_refinement.corrections.cpu())
    assert float(loaded.camera_refinement.corrections.abs().max()) > 1e-3  # six steps moved them

    out = tmp_path / "refined" / "transforms.json"
    capsys.readouterr()
    assert main(["export", "--ckpt_path", str(ckpt), "--format", "transforms", "--out", str(out)]) == 0
    assert "8 training frames with refined poses" in capsys.readouterr().out
    meta = json.loads(out.read_text())
    assert meta["export"]["split"] == "train" and meta["export"]["image_placement"]["count"] == 8
    assert (meta["w"], meta["h"]) == (24, 24) and len(meta["frames"]) == 8
    scan = scan_nerfstudio(out.parent, Problems())
    assert scan is not None
    read = {scan.refs[i].name: torch.from_numpy(pose) for i, pose in scan.poses.items()}
    datamodule = cli.datamodule
    train = datamodule.splits["train"]
    expected = loaded.camera_refinement.corrected_poses(train.cameras.camera_to_world.double())
    for index, name in enumerate(train.names):
        written = read[f"{tiny_scene.name}/{name}"]
        assert torch.allclose(written, expected[index], atol=1e-6), name
        assert not torch.allclose(written, train.cameras.camera_to_world[index].double(), atol=1e-4)
    assert torch.allclose(torch.tensor(scan.cameras[0][0][:4], dtype=torch.float32),
                          torch.stack([train.cameras.fx[0], train.cameras.fy[0], train.cameras.cx[0],
                                       train.cameras.cy[0]]))
    split = load_nerfstudio(out.parent, "train")  # a dataset the loader trains on
    assert len(split) == 6 and split.images[0].shape == (24, 24, 3)


    # Resuming on data with another number of training images: one line, not a silently detached table.
    other = make_demo_scene(tmp_path / "other", num_train=5, num_val=1, num_test=1, resolution=24)
    capsys.readouterr()
    saved = ckpt.read_bytes()
    resume = short_run_args(other, tmp_path / "resume", "--model.camera_refinement=CameraRefinement", steps=9)
    code = main(["fit", *resume, "--ckpt_path", str(ckpt)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and f"{ckpt}: the checkpoint's camera refinement holds 8 corrections" in err[-1], err
    assert "5 training images" in err[-1]
    assert ckpt.read_bytes() == saved  # the refused resume (it goes on in the run's folder) wrote nothing


@pytest.mark.slow
def test_export_of_a_checkpoint_without_refinement_is_one_line(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tiny_run / "checkpoints" / "last.ckpt"
    out = tmp_path / "out" / "transforms.json"
    assert main(["export", "--ckpt_path", str(ckpt), "--format", "transforms", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert str(ckpt) in err and "no camera refinement" in err and "--model.camera_refinement" in err
    assert not out.parent.exists()
