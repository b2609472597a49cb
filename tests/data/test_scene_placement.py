"""``place_scene``: the box, footprint, near and far of a training split, on the scene suite's generated
scenes (``NerfDataModule.setup`` stores what it returns; ``test_normalise_option.py`` checks it there)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

from nerf_lightning.data.scene_placement import place_scene
from nerf_lightning.datasets.scene_suite import make_suite_scene
from nerf_lightning.scenes.bounds import scene_box_from_cameras
from nerf_lightning.scenes.loading import load_split
from nerf_lightning.scenes.scene import SceneSplit
from nerf_lightning.scenes.training_frame import TrainingFrame, estimate_training_frame, moved_split

# Renders procedural scenes (seconds): outside `make test-fast`.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("placement")
    for name in ("demo", "360"):
        make_suite_scene(name, root / name, resolution=16)
    return root


def in_frame(root: Path) -> tuple[SceneSplit, TrainingFrame]:
    train = load_split(root, "train")
    frame = estimate_training_frame(train)
    return moved_split(train, frame.transform), frame


def inside(box_lower: torch.Tensor, box_upper: torch.Tensor, points: torch.Tensor) -> bool:
    return bool(((points >= box_lower) & (points <= box_upper)).all())


def test_an_unbounded_scene_grows_its_box_around_the_cameras_but_keeps_the_contents_footprint(
        suite: Path) -> None:
    train = load_split(suite / "demo", "train")
    bounded = place_scene(train)
    unbounded = place_scene(train, unbounded=True, far_scale=10.0)
    centres = train.cameras.centers
    assert bounded.far is None and not inside(bounded.scene_box.lower, bounded.scene_box.upper, centres)
    assert inside(unbounded.scene_box.lower, unbounded.scene_box.upper, centres)
    assert unbounded.pixel_footprint == bounded.pixel_footprint  # measured at the content
    diagonal = float((unbounded.scene_box.upper - unbounded.scene_box.lower).norm())
    assert unbounded.far == pytest.approx(10.0 * diagonal)
    # Without a training frame the near plane follows the grown box (with one, the content: below).
    assert unbounded.min_near == pytest.approx(0.02 * diagonal)


def test_an_explicit_box_is_kept_as_given_even_for_an_unbounded_scene(suite: Path) -> None:
    train = load_split(suite / "demo", "train")
    given = [-0.5, -0.25, -1.0, 0.5, 0.75, 1.0]
    placed = place_scene(train, explicit_box=given, box_scale=3.0, unbounded=True, far_scale=2.0)
    assert placed.scene_box.lower.tolist() == given[:3] and placed.scene_box.upper.tolist() == given[3:]
    assert placed.far == pytest.approx(2.0 * float(torch.tensor([1.0, 1.0, 2.0]).norm()))
    assert placed.declared is None
    derived = place_scene(train)
    assert torch.allclose(derived.scene_box.lower, scene_box_from_cameras(train.cameras, 1.0).lower)


def test_a_declared_aabb_scale_never_sets_the_box_and_only_shortens_the_far_plane(
        suite: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    train, frame = in_frame(suite / "360")
    with caplog.at_level(logging.INFO):
        bounded = place_scene(train, frame=frame)
    assert bounded.declared is not None and bounded.declared.aabb_scale == 16.0
    assert bounded.far is None
    assert "declares aabb_scale 16, content far beyond the box" in caplog.text
    unbounded = place_scene(train, frame=frame, unbounded=True)

    # The same capture without the declaration: the same box and near plane, a farther far plane.
    undeclared_root = tmp_path / "undeclared"
    make_suite_scene("360", undeclared_root, resolution=16)
    meta = json.loads((undeclared_root / "transforms.json").read_text())
    del meta["aabb_scale"]
    (undeclared_root / "transforms.json").write_text(json.dumps(meta))
    plain_train, plain_frame = in_frame(undeclared_root)
    for unbounded_scene, ours in ((False, bounded), (True, unbounded)):
        plain = place_scene(plain_train, frame=plain_frame, unbounded=unbounded_scene)
        assert plain.declared is None
        assert torch.equal(plain.scene_box.lower, ours.scene_box.lower)
        assert torch.equal(plain.scene_box.upper, ours.scene_box.upper)
        assert plain.min_near == ours.min_near
    plain_unbounded = place_scene(plain_train, frame=plain_frame, unbounded=True)
    assert unbounded.far is not None and plain_unbounded.far is not None
    assert unbounded.far < plain_unbounded.far
