"""``data.normalise``, ``data.inner_region_cameras`` and ``data.target_pixels`` on the real data module, with
the scene suite's generated scenes (``offcentre`` is ``demo`` moved and scaled; ``360`` and ``360-small``
are one canonical rig at two scales, places and yaws; ``forward`` is LLFF)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from torch import Tensor

from nerf_lightning.cameras import CameraRefinement
from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.core.errors import FrameMismatchError
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.datasets.scene_suite import SUITE, make_suite_scene
from nerf_lightning.export.transforms import dataset_world_poses, refined_frames
from nerf_lightning.fields import HashGridField
from nerf_lightning.runs.trained import TrainedRunError, load_trained
from nerf_lightning.scenes.bounds import (
    box_around_cameras,
    min_near_from_cameras,
    scene_box_from_cameras,
    scene_box_from_frustums,
)
from nerf_lightning.scenes.loading import load_split
from nerf_lightning.system.module import NerfModule
from tests.helpers.runs import short_run_args

# Every test here renders or loads procedural scenes (seconds in all): outside `make test-fast`.
pytestmark = pytest.mark.slow

SCENES = ("demo", "offcentre", "360", "360-small", "forward")


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The scenes of :data:`SCENES` at 24 px, each in ``suite/<name>``."""
    root = tmp_path_factory.mktemp("suite")
    for name in SCENES:
        make_suite_scene(name, root / name, resolution=24)
    return root


def set_up(root: Path, stage: str = "fit", **options: object) -> NerfDataModule:
    datamodule = NerfDataModule(root=str(root), cache=False, **options)  # type: ignore[arg-type]
    datamodule.setup(stage)
    return datamodule


def yaw(degrees: float) -> Tensor:
    """``[3, 3]`` float64 rotation about ``+z``."""
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)


def turned(poses: Tensor, rotation: Tensor) -> Tensor:
    """``[N, 3, 4]`` float64 poses turned about the origin (axes and centres)."""
    poses = poses.double()
    return torch.cat([rotation @ poses[:, :, :3], (poses[:, :, 3] @ rotation.T)[:, :, None]], dim=-1)


# ------------------------------------------------------------------------------- none: exactly as before


@pytest.mark.parametrize("unbounded", [False, True])
@pytest.mark.parametrize("name", SCENES)
def test_normalise_none_derives_cameras_box_near_and_far_exactly_as_before(suite: Path, name: str,
                                                                          unbounded: bool) -> None:
    """The derivation the data module made before ``normalise`` existed, step by step, against the data
    module with the default and with ``normalise="none"`` spelled out: bitwise equal."""
    train = load_split(suite / name, "train")
    if train.depth_range is not None:
        box = scene_box_from_frustums(train.cameras, *train.depth_range, scale=1.0)
    else:
        box = scene_box_from_cameras(train.cameras, 1.0)
    if unbounded:
        box = box_around_cameras(box, train.cameras)
    near = min_near_from_cameras(train.cameras, box)
    far = float((box.upper - box.lower).norm()) * 1000.0 if unbounded else None
    for datamodule in (set_up(suite / name, unbounded=unbounded),
                       set_up(suite / name, unbounded=unbounded, normalise="none")):
        assert datamodule.scene_box is not None
        assert torch.equal(datamodule.scene_box.lower, box.lower)
        assert torch.equal(datamodule.scene_box.upper, box.upper)
        assert datamodule.min_near == near and datamodule.far == far
        for split in ("train", "val"):
            loaded, kept = load_split(suite / name, split), datamodule.splits[split]
            assert torch.equal(kept.cameras.camera_to_world, loaded.cameras.camera_to_world)
            assert kept.depth_range == loaded.depth_range and kept.world_scale == loaded.world_scale
            assert (kept.world_transform is None) == (loaded.world_transform is None)
            if loaded.world_transform is not None:
                assert torch.equal(kept.world_transform, loaded.world_transform)
        assert datamodule.frame_transform.is_identity and datamodule.training_frame is None
        assert datamodule.state_dict() == {} and datamodule.frame_record() is None


# ------------------------------------------------------------------------------------ auto: fixed points


@pytest.mark.parametrize("name", ["demo", "forward"])
def test_auto_leaves_a_blender_layout_scene_and_an_llff_capture_exactly_as_loaded(suite: Path,
                                                                                  name: str) -> None:
    plain, auto = set_up(suite / name), set_up(suite / name, normalise="auto")
    assert auto.frame_transform.is_identity
    assert auto.scene_box is not None and plain.scene_box is not None
    assert torch.equal(auto.scene_box.lower, plain.scene_box.lower)
    assert torch.equal(auto.scene_box.upper, plain.scene_box.upper)
    assert auto.min_near == plain.min_near and auto.far == plain.far
    for split in ("train", "val"):
        moved, kept = auto.splits[split].cameras, plain.splits[split].cameras
        assert torch.equal(moved.camera_to_world, kept.camera_to_world)
        assert auto.splits[split].world_scale == plain.splits[split].world_scale


# ------------------------------------------------------------------------- auto: one frame for one scene


def test_auto_puts_offcentre_where_demo_is(suite: Path) -> None:
    """``offcentre`` is ``demo`` scaled by 0.3, turned 30 degrees about ``z`` and moved 3.2 units: in the
    normalised frame it has the demo's box and near plane, and the demo's cameras turned by 30 degrees."""
    demo, offcentre = set_up(suite / "demo", normalise="auto"), set_up(suite / "offcentre", normalise="auto")
    assert demo.scene_box is not None and offcentre.scene_box is not None
    assert torch.allclose(offcentre.scene_box.lower, demo.scene_box.lower, atol=1e-5)
    assert torch.allclose(offcentre.scene_box.upper, demo.scene_box.upper, atol=1e-5)
    assert offcentre.min_near == pytest.approx(demo.min_near, rel=1e-5)
    assert not offcentre.frame_transform.is_identity
    placement = SUITE["offcentre"].placement
    for split in ("train", "val"):
        expected = turned(demo.splits[split].cameras.camera_to_world, yaw(placement.yaw_degrees))
        assert torch.allclose(offcentre.splits[split].cameras.camera_to_world.double(), expected, atol=1e-4)


def test_auto_gives_360_and_360_small_the_same_cameras_up_to_their_yaw(suite: Path) -> None:
    """One canonical ring, written at 7.5 and 0.3 units per canonical unit, far apart and turned 20 and
    -50 degrees: normalised, the cameras (and so the bounded box) are the same up to that yaw, which
    normalising keeps."""
    large, small = set_up(suite / "360", normalise="auto"), set_up(suite / "360-small", normalise="auto")
    difference = SUITE["360"].placement.yaw_degrees - SUITE["360-small"].placement.yaw_degrees
    large.setup("test")
    small.setup("test")
    for split in ("train", "val", "test"):
        expected = turned(small.splits[split].cameras.camera_to_world, yaw(difference))
        assert torch.allclose(large.splits[split].cameras.camera_to_world.double(), expected, atol=1e-4)
    assert large.scene_box is not None and small.scene_box is not None
    assert torch.allclose(large.scene_box.lower, small.scene_box.lower, atol=1e-4)
    assert torch.allclose(large.scene_box.upper, small.scene_box.upper, atol=1e-4)
    assert large.min_near == pytest.approx(small.min_near, rel=1e-4)
    centres = large.splits["train"].cameras.centers.double()
    assert float(centres.norm(dim=-1).median()) == pytest.approx(4.0, rel=1e-5)  # the target distance


# ----------------------------------------------------------------------------- auto: the unbounded region


def test_the_unbounded_inner_region_is_a_cube_about_the_content_reaching_the_farthest_camera(
        suite: Path) -> None:
    bounded = set_up(suite / "360", normalise="auto")
    assert bounded.scene_box is not None
    content_half = 0.5 * float((bounded.scene_box.upper - bounded.scene_box.lower).max())
    for share in (1.0, 0.5, 0.0):
        unbounded = set_up(suite / "360", normalise="auto", unbounded=True, inner_region_cameras=share)
        box, cameras = unbounded.scene_box, unbounded.splits["train"].cameras
        assert box is not None and unbounded.far is not None
        half = 0.5 * (box.upper - box.lower)
        assert torch.allclose(half, half[0].expand(3))  # a cube...
        assert torch.allclose(box.lower + box.upper, torch.zeros(3), atol=1e-5)  # ...about the content
        reach = float(cameras.centers.double().abs().amax())
        assert float(half[0]) == pytest.approx(max(share * reach, content_half), rel=1e-4, abs=2e-3)
        # near from the content cube, not the camera-grown box; far from the declared aabb_scale 16 box
        assert unbounded.min_near == pytest.approx(0.02 * 2 * math.sqrt(3) * content_half, rel=2e-3)
        assert unbounded.far < 1000.0 * float((box.upper - box.lower).norm())
        assert unbounded.declared is not None and unbounded.declared.aabb_scale == 16.0
    everything = set_up(suite / "360", normalise="auto", unbounded=True)
    cameras = everything.splits["train"].cameras
    box = everything.scene_box
    assert box is not None
    assert bool(((cameras.centers >= box.lower) & (cameras.centers <= box.upper)).all())


def test_a_declared_aabb_scale_that_holds_nothing_is_ignored_with_one_warning(tmp_path: Path) -> None:
    root = make_suite_scene("360-small", tmp_path / "declared", resolution=24)
    meta = json.loads((root / "transforms.json").read_text())
    meta["aabb_scale"] = 0.25  # a quarter of instant-ngp's unit cube: neither cameras nor content fit
    (root / "transforms.json").write_text(json.dumps(meta))
    with pytest.warns(UserWarning, match="aabb_scale 0.25 box .* does not hold every camera and the content"):
        datamodule = set_up(root, normalise="auto", unbounded=True)
    assert datamodule.declared is None and datamodule.scene_box is not None
    assert datamodule.far == pytest.approx(1000.0 * float((datamodule.scene_box.upper
                                                           - datamodule.scene_box.lower).norm()))


# ------------------------------------------------------------------------- file coordinates, checkpoints


@pytest.mark.parametrize("name", ["offcentre", "360", "forward"])
def test_exported_poses_and_camera_paths_are_in_the_files_coordinates(suite: Path, name: str) -> None:
    """The transforms export of a model whose camera corrections are zero writes the file's own poses (LLFF:
    of ``poses_bounds.npy``, the loader's normalisation undone too), and a camera path in the loader's
    coordinates lands on the training cameras."""
    datamodule = set_up(suite / name, normalise="auto")
    refinement = CameraRefinement()
    refinement.set_num_cameras(datamodule.num_train_images)
    field = HashGridField(num_levels=2, log2_hashmap_size=10, max_resolution=32, hidden_dim=8)
    model = NerfModule(field=field, camera_refinement=refinement)
    frames = refined_frames(model, datamodule, "checkpoint.ckpt")
    written = torch.stack([torch.from_numpy(frame.camera_to_world[:3]) for frame in frames])
    loaded = load_split(suite / name, "train")
    file_poses = torch.from_numpy(dataset_world_poses(loaded.cameras.camera_to_world, loaded.world_scale,
                                                      loaded.world_transform)[:, :3])
    scale = float(file_poses[:, :, 3].norm(dim=-1).max())
    assert torch.allclose(written, file_poses, atol=1e-5 * max(1.0, scale))
    loader_poses = loaded.cameras.camera_to_world.double()
    path = datamodule.frame_transform.apply_poses(loader_poses)
    assert torch.allclose(path, datamodule.splits["train"].cameras.camera_to_world.double(), atol=1e-5)
    training = datamodule.splits["train"].cameras.camera_to_world
    back = datamodule.frame_transform.inverse().apply_poses(training)
    assert torch.allclose(back.double(), loader_poses, atol=1e-5 * max(1.0, scale))


def test_the_frame_is_kept_in_the_state_and_a_checkpoint_of_another_frame_is_refused(suite: Path) -> None:
    auto = set_up(suite / "offcentre", normalise="auto")
    state = auto.state_dict()
    record = json.loads(json.dumps(state["frame"]))  # JSON-ready
    assert record["normalise"] == "auto" and record["inner_region_cameras"] == 1.0
    assert torch.allclose(torch.tensor(record["frame"]["matrix"], dtype=torch.float64),
                          auto.frame_transform.matrix())
    assert record["frame"]["rules"]["centre"] == "focus" and record["frame"]["camera_distance"] > 0
    set_up(suite / "offcentre", normalise="auto").load_state_dict(state)  # the same frame: accepted
    with pytest.raises(ValueError, match=r"^normalise: the checkpoint was trained in a normalised frame"):
        set_up(suite / "offcentre").load_state_dict(state)
    with pytest.raises(ValueError, match=r"^normalise: the checkpoint was trained in the file's frame"):
        set_up(suite / "offcentre", normalise="auto").load_state_dict({"error_map": None})
    pending = NerfDataModule(root=str(suite / "offcentre"), cache=False, normalise="auto")
    pending.load_state_dict(set_up(suite / "360", normalise="auto").state_dict())  # checked in setup
    with pytest.raises(ValueError, match="another frame"):
        pending.setup("fit")
    demo = set_up(suite / "demo", normalise="auto")  # a fixed point: its frame is the file's, so either loads
    demo.load_state_dict({"error_map": None})
    demo.load_state_dict(demo.state_dict())


# -------------------------------------------------------------------------------------------- target_pixels


def test_target_pixels_picks_the_downscale_per_capture_and_overrides_downscale(suite: Path) -> None:
    demo = set_up(suite / "demo", target_pixels=144, downscale=3)  # 24x24: factor 2 gives 12x12 = 144
    assert demo.image_downscale == 2 and demo.splits["train"].images[0].shape == (12, 12, 3)
    assert int(demo.splits["train"].cameras.width[0]) == 12
    assert demo.state_dict()["frame"] == {"normalise": "none", "target_pixels": 144, "downscale": 2}
    ring = set_up(suite / "360", target_pixels=40, normalise="auto")  # 24x16: factor 3 gives 8x5 = 40
    assert ring.image_downscale == 3 and ring.splits["val"].images[0].shape == (5, 8, 3)
    assert ring.state_dict()["frame"]["downscale"] == 3
    assert set_up(suite / "demo", downscale=3).image_downscale == 3  # without a budget: data.downscale


# ------------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("options", "refusal"), [
    ({"normalise": "yes"}, r"^normalise must be 'none' or 'auto', got 'yes'$"),
    ({"normalise": "auto", "scene_box": [-1, -1, -1, 1, 1, 1]},
     r"^scene_box is in the loader's coordinates, which normalise 'auto' moves; expected one of "
     r"data\.scene_box and data\.normalise auto, not both$"),
    ({"inner_region_cameras": -0.5}, r"^inner_region_cameras must be a finite number >= 0, got -0\.5$"),
    ({"inner_region_cameras": math.nan}, r"^inner_region_cameras must be a finite number >= 0, got nan$"),
    ({"target_pixels": 0}, r"^target_pixels must be a positive number of pixels per image, got 0$"),
])
def test_bad_values_are_refused_in_one_line_naming_the_field(options: dict[str, object],
                                                             refusal: str) -> None:
    with pytest.raises(ValueError, match=refusal):
        NerfDataModule(root="anywhere", **options)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------- through the CLI


@pytest.mark.slow
def test_a_run_keeps_its_frame_in_the_checkpoint_and_testing_it_in_another_frame_is_refused(
        suite: Path, tmp_path: Path) -> None:
    scene = suite / "offcentre"
    cli = run_lightning_cli(["fit", *short_run_args(scene, tmp_path / "fit", "--data.normalise", "auto",
                                                    "--data.cache", "false")])
    ckpt = Path(cli.trainer.log_dir) / "checkpoints" / "last.ckpt"
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)["NerfDataModule"]["frame"]
    assert saved["normalise"] == "auto"
    assert torch.allclose(torch.tensor(saved["frame"]["matrix"], dtype=torch.float64),
                          cli.datamodule.frame_transform.matrix())
    recorded = json.loads((Path(cli.trainer.log_dir) / "run.json").read_text())["data"]["frame"]
    assert recorded["normalise"] == "auto" and recorded["frame"]["matrix"] == saved["frame"]["matrix"]
    with pytest.raises(FrameMismatchError, match=r"^normalise: .* trained in a normalised frame"):
        run_lightning_cli(["test", *short_run_args(scene, tmp_path / "test", "--data.cache", "false"),
                           "--ckpt_path", str(ckpt)])
    assert not list(ckpt.parent.parent.glob("test*"))  # the refused test leaves no RUN/test folder
    # render, export and view load a run through load_trained: the same refusal, naming the checkpoint.
    config = Path(cli.trainer.log_dir) / "config.yaml"
    refusal = rf"^{re.escape(str(ckpt))}: data\.normalise: .* normalised frame"
    with pytest.raises(TrainedRunError, match=refusal):
        load_trained(ckpt, config, ["--data.normalise", "none"])
    _, datamodule = load_trained(ckpt, config)
    assert torch.equal(datamodule.frame_transform.matrix(), cli.datamodule.frame_transform.matrix())
