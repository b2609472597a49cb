"""Real-scene building blocks: scene contraction, spacing functions, appearance codes, unbounded rays."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from nerf_lightning.cli import main
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.export.pt2 import export_pt2, load_pt2
from nerf_lightning.export.torchscript import build_standalone, script_standalone
from nerf_lightning.fields import HashGridField
from nerf_lightning.nn.contraction import contract, positions_to_unit_cube
from nerf_lightning.samplers import Proposal
from nerf_lightning.samplers.pdf import distortion_loss
from nerf_lightning.samplers.spacing import box_exit_distance, spaced_distances
from nerf_lightning.system.module import NerfModule
from nerf_lightning.testing import check_sampler
from tests.helpers.runs import RUN

BOUNDS = torch.tensor([[-1.0, -2.0, -1.0], [3.0, 2.0, 1.0]])  # centre (1, 0, 0), half-sizes (2, 2, 1)


# ------------------------------------------------------------------------------ contraction
@pytest.mark.parametrize("kind", ["l2", "linf"])
def test_contraction_is_the_identity_inside_and_bounded_outside(kind: str) -> None:
    inside = torch.tensor([[0.3, -0.5, 0.2], [0.0, 0.0, 0.0], [0.5, 0.5, 0.5]])
    torch.testing.assert_close(contract(inside, kind), inside)
    far = torch.tensor([[1e6, 0.0, 0.0], [3.0, 4.0, 0.0], [-1e4, 2e4, 5e3]])
    out = contract(far, kind)
    norm = out.norm(dim=-1) if kind == "l2" else out.abs().amax(dim=-1)
    assert bool((norm < 2.0).all()) and bool((norm > 1.0).all())
    # Monotone along a ray from the centre: further points land further out.
    line = torch.linspace(0.5, 50.0, 200)[:, None] * torch.tensor([[0.6, -0.8, 0.3]])
    radii = contract(line, kind).norm(dim=-1)
    assert bool((radii[1:] > radii[:-1]).all())


def test_contraction_gradient_is_finite_at_the_origin() -> None:
    x = torch.zeros(1, 3, requires_grad=True)
    contract(x, "l2").sum().backward()
    assert x.grad is not None and torch.equal(x.grad, torch.ones(1, 3))


def test_unit_cube_mapping_keeps_the_box_in_the_middle_half() -> None:
    corners = torch.stack([BOUNDS[0], BOUNDS[1]])
    torch.testing.assert_close(positions_to_unit_cube(corners, BOUNDS, "none"),
                               torch.tensor([[0.0] * 3, [1.0] * 3]))
    torch.testing.assert_close(positions_to_unit_cube(corners, BOUNDS, "linf"),
                               torch.tensor([[0.25] * 3, [0.75] * 3]))
    # Without contraction, what lies outside is clamped onto the faces; with it, it stays distinct.
    outside = torch.tensor([[10.0, 0.0, 0.0], [100.0, 0.0, 0.0]])
    clamped = positions_to_unit_cube(outside, BOUNDS, "none")
    assert torch.equal(clamped[0], clamped[1])
    contracted = positions_to_unit_cube(outside, BOUNDS, "linf")
    assert 0.75 < float(contracted[0, 0]) < float(contracted[1, 0]) < 1.0


# -------------------------------------------------------------------------------- spacing
def test_spacings_run_from_near_to_far_and_follow_their_rule() -> None:
    near, far, pivot = torch.tensor([0.5, 2.0]), torch.tensor([100.0, 50.0]), torch.tensor([4.0, 10.0])
    fractions = torch.linspace(0.0, 1.0, 9).expand(2, -1)
    for spacing in ("linear", "disparity", "linear_disparity"):
        t = spaced_distances(fractions, near, far, pivot, spacing)
        assert torch.equal(t[:, 0], near) and torch.equal(t[:, -1], far)
        assert bool((t[:, 1:] > t[:, :-1]).all())
    disparity = 1.0 / spaced_distances(fractions, near, far, pivot, "disparity")
    steps = disparity[:, 1:] - disparity[:, :-1]
    torch.testing.assert_close(steps, steps[:, :1].expand_as(steps))  # even in 1 / t
    # Linear up to the pivot (where half the fractions end), disparity beyond it.
    t = spaced_distances(torch.linspace(0.0, 1.0, 101).expand(2, -1), near, far, pivot, "linear_disparity")
    for ray in range(2):
        inner = t[ray][t[ray] <= pivot[ray]]
        gaps = inner[1:] - inner[:-1]
        torch.testing.assert_close(gaps, gaps[:1].expand_as(gaps), rtol=1e-4, atol=1e-5)
        outer = 1.0 / t[ray][t[ray] > pivot[ray] * 1.01]
        gaps = outer[:-1] - outer[1:]
        torch.testing.assert_close(gaps, gaps[:1].expand_as(gaps), rtol=1e-3, atol=1e-6)
        assert 40 <= len(inner) <= 60  # about half the samples inside the pivot


def test_box_exit_distance() -> None:
    origins = torch.tensor([[1.0, 0.0, 0.0], [-5.0, 0.0, 0.0]])
    directions = torch.tensor([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(box_exit_distance(origins, directions, BOUNDS), torch.tensor([2.0, 8.0]))


@pytest.mark.parametrize("spacing", ["disparity", "linear_disparity"])
def test_spaced_proposal_passes_the_kit(spacing: str) -> None:
    check_sampler(Proposal(proposal_samples=(16, 8), num_samples=8, proposal_max_resolution=(32, 32),
                           spacing=spacing, contraction="linf"))


def test_bad_spacing_and_contraction_are_named() -> None:
    with pytest.raises(ValueError, match=r"^spacing must be one of linear, disparity"):
        Proposal(spacing="log")
    with pytest.raises(ValueError, match=r"^contraction must be one of none, l2, linf, got 'sphere'$"):
        HashGridField(contraction="sphere")


# -------------------------------------------------------------------------- appearance codes
def _small_field(**options) -> HashGridField:
    return HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16, **options)


def test_appearance_codes_change_colour_per_image_and_evaluate_with_their_mean() -> None:
    torch.manual_seed(0)
    field = _small_field(appearance_dim=4)
    field.set_num_images(3)
    with torch.no_grad():
        field.appearance.codes.copy_(torch.randn(3, 4))
    positions, directions = torch.rand(5, 3), torch.nn.functional.normalize(torch.randn(5, 3), dim=-1)
    density0, rgb0 = field(positions, directions, torch.zeros(5, dtype=torch.long))
    density1, rgb1 = field(positions, directions, torch.ones(5, dtype=torch.long))
    assert torch.equal(density0, density1) and not torch.allclose(rgb0, rgb1)  # colour only
    mean_code = field.appearance.codes.mean(0)
    with torch.no_grad():
        field.appearance.codes.copy_(mean_code.expand(3, 4))
    torch.testing.assert_close(field(positions, directions, torch.zeros(5, dtype=torch.long))[1],
                               field(positions, directions)[1])
    # A model built without the table loads one of any size from a checkpoint's state.
    fresh = _small_field(appearance_dim=4)
    fresh.load_state_dict(field.state_dict())
    assert fresh.appearance.num_images == 3


def test_color_corrections_are_one_affine_map_per_image_and_evaluate_with_their_mean() -> None:
    """A field with ``color_correction`` gives image ``k``'s samples the colours of its MLP through
    ``(I + M_k) rgb + b_k`` (its 12 numbers times ``color_correction_rate``), its density untouched;
    views without an image get the mean map; zero corrections (the start) change nothing."""
    torch.manual_seed(0)
    field = _small_field(color_correction=True, color_correction_rate=0.5)
    field.set_num_images(3)
    positions, directions = torch.rand(5, 3), torch.nn.functional.normalize(torch.randn(5, 3), dim=-1)
    density, plain = field(positions, directions, torch.zeros(5, dtype=torch.long))
    torch.testing.assert_close(field(positions, directions)[1], plain)
    with torch.no_grad():
        field.appearance.codes.copy_(0.2 * torch.randn(3, 12))
    codes = 0.5 * field.appearance.codes.detach()
    for k in range(3):
        density_k, rgb_k = field(positions, directions, torch.full((5,), k, dtype=torch.long))
        matrix = torch.eye(3) + codes[k, :9].view(3, 3)
        assert torch.equal(density_k, density)
        torch.testing.assert_close(rgb_k, plain @ matrix.T + codes[k, 9:])
    mean = codes.mean(0)
    torch.testing.assert_close(field(positions, directions)[1],
                               plain @ (torch.eye(3) + mean[:9].view(3, 3)).T + mean[9:])
    # The optimizer's numbers get the rate's share of the gradient: at zero corrections, half the rate,
    # half the gradient, in the rows of the images the samples came from only.
    grads = []
    for rate in (0.5, 0.25):
        field.color_correction_rate = rate
        with torch.no_grad():
            field.appearance.codes.zero_()
        field.appearance.codes.grad = None
        field(positions, directions, torch.tensor([0, 0, 2, 2, 2]))[1].sum().backward()
        grads.append(field.appearance.codes.grad.clone())
    assert bool(grads[0][0].abs().sum() > 0) and bool((grads[0][1] == 0).all())
    torch.testing.assert_close(grads[1], 0.5 * grads[0])
    with pytest.raises(ValueError, match="color_correction replaces the appearance codes"):
        _small_field(color_correction=True, appearance_dim=4)
    with pytest.raises(ValueError, match=r"color_correction_rate must be > 0, got 0\.0"):
        _small_field(color_correction=True, color_correction_rate=0.0)


def test_unbounded_rays_run_past_the_box(tiny_scene: Path) -> None:
    bounded = NerfDataModule(root=str(tiny_scene), cache=False)
    unbounded = NerfDataModule(root=str(tiny_scene), cache=False, unbounded=True, far_scale=100.0)
    for datamodule in (bounded, unbounded):
        datamodule.setup("fit")
    assert bounded.scene_box is not None and unbounded.scene_box is not None
    box = unbounded.scene_box
    centres = unbounded.splits["train"].cameras.camera_to_world[:, :, 3]
    assert bool(((centres >= box.lower) & (centres <= box.upper)).all())  # the cameras are inside
    rays = unbounded.train_batch(0, torch.device("cpu")).rays
    diagonal = float((box.upper - box.lower).norm())
    torch.testing.assert_close(rays.far, torch.full_like(rays.far, 100.0 * diagonal))
    assert bool((rays.near == unbounded.min_near).all())
    clipped = bounded.train_batch(0, torch.device("cpu")).rays
    assert float(clipped.far.max()) < diagonal


@pytest.mark.slow  # scripting and tracing the contracted model: seconds
@pytest.mark.parametrize("per_image", [{"appearance_dim": 4}, {"color_correction": True}],
                         ids=["codes", "color-correction"])
def test_unbounded_model_exports_exactly(tiny_scene: Path, tmp_path: Path, per_image: dict[str, Any]) -> None:
    """Contraction, spacing and the mean appearance code (or the mean colour correction) go into the
    exported module alike.

    One proposal network: each adds seconds to the trace, and two in a row are exported by
    ``tests/export/test_export.py`` (``test_density_querying_samplers_are_reproduced_not_replaced``)."""
    torch.manual_seed(0)
    field = _small_field(**per_image, contraction="linf")
    sampler = Proposal(proposal_samples=(24,), num_samples=16, proposal_max_resolution=(32,),
                       spacing="linear_disparity", contraction="linf")
    model = NerfModule(field=field, sampler=sampler).eval()
    field.set_num_images(3)
    with torch.no_grad():
        field.encoding.table.uniform_(-1.0, 1.0)
        field.appearance.codes.copy_(0.3 * torch.randn_like(field.appearance.codes))
        for parameter in sampler.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False, unbounded=True)
    datamodule.setup("test")
    assert datamodule.scene_box is not None
    model.set_scene_box(datamodule.scene_box)
    batch = datamodule.image_batch("test", 0, torch.device("cpu"))
    image = model.render_image(batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = script_standalone(build_standalone(model, datamodule.background))
    export_pt2(model, datamodule.background, tmp_path / "m.pt2")
    program, _ = load_pt2(tmp_path / "m.pt2")
    rays = batch.rays
    height, width = batch.image_size
    for module in (scripted, program):
        with torch.no_grad():
            rgb, depth, _ = module(rays.origins, rays.directions, rays.near, rays.far, batch.background)
        assert float((rgb.reshape(height, width, 3) - image.rgb).abs().max()) < 1e-5
        torch.testing.assert_close(depth.reshape(height, width, 1), image.depth, rtol=1e-4, atol=1e-3)


def _small_recipe_args(config: str, scene: Path, out: Path, steps: int, *extra: str) -> list[str]:
    """``fit``/``test`` arguments for ``steps`` steps of a shipped recipe with a small field and sampler,
    into the run folder ``OUT/run`` (:data:`~tests.helpers.runs.RUN`)."""
    return ["--config", config, "--data.root", str(scene), "--data.downscale", "1",
            "--trainer.default_root_dir", str(out), "--run_name", RUN, "--trainer.max_time", "null",
            "--trainer.max_steps", str(steps),
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
            "--model.field.num_levels", "4", "--model.field.log2_hashmap_size", "12",
            "--model.field.max_resolution", "64", "--model.field.hidden_dim", "16",
            "--model.sampler.proposal_samples", "[16, 8]", "--model.sampler.num_samples", "8",
            "--model.sampler.proposal_max_resolution", "[32, 32]", *extra]


@pytest.mark.slow
def test_real_recipe_trains_and_reloads_with_its_colour_corrections(tiny_scene: Path, tmp_path: Path) -> None:
    """A short fit of configs/real.yaml's components (two epochs of one step: the recipe validates every
    second epoch): a colour correction per training image in the checkpoint, rebuilt by
    load_from_checkpoint, and the test view rendered with their mean."""
    out = tmp_path / "run"
    args = _small_recipe_args("real", tiny_scene, out, 2, "--data.steps_per_epoch", "1",
                              "--trainer.limit_val_batches", "1")
    assert main(["fit", *args]) == 0
    checkpoint = out / RUN / "checkpoints" / "last.ckpt"
    model = NerfModule.load_from_checkpoint(checkpoint)
    assert model.field.contraction == "linf" and model.sampler.spacing == "linear_disparity"
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False)
    datamodule.setup("fit")
    assert model.field.color_correction and model.field.appearance_codes is not None
    codes = model.field.appearance.codes  # [N, 12]: a 3 x 3 matrix and an offset per photo
    assert codes.shape == (datamodule.num_train_images, 12) and bool(codes.abs().sum() > 0)  # trained


@pytest.mark.slow
def test_real_recipe_with_camera_refinement_resumes_bitwise(tiny_scene: Path, tmp_path: Path) -> None:
    """configs/real.yaml plus camera refinement and the distortion loss, which the recipe leaves off
    (contraction, proposal networks in their annealing, distortion loss from step 3, colour
    corrections, pose corrections): 2 steps, then resumed from last.ckpt to 4, ends with exactly the
    weights, proposal networks, codes and corrections of 4 steps straight."""
    def fit(out: Path, steps: int, *extra: str) -> Path:
        args = _small_recipe_args("real", tiny_scene, out, steps, "--trainer.accelerator", "cpu",
                                  "--checkpoint.every_n_train_steps", "1", "--trainer.limit_val_batches", "0",
                                  "--model.camera_refinement", "CameraRefinement",
                                  # learning on steps 0 and 3 (a schedule counted from the resume
                                  # would learn on step 2 instead)
                                  "--model.camera_refinement.start_step", "0",
                                  "--model.camera_refinement.every", "3",
                                  "--model.sampler.distortion_loss_weight", "0.002",
                                  # counted from step 3, on the resumed side of the break
                                  "--model.sampler.distortion_loss_start", "3", *extra)
        assert main(["fit", *args]) == 0
        return out / RUN / "checkpoints" / "last.ckpt"

    def state(checkpoint: Path) -> dict[str, torch.Tensor]:
        return torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]

    straight = state(fit(tmp_path / "straight", 4))
    first = fit(tmp_path / "resumed", 2)
    sampler = NerfModule.load_from_checkpoint(first).sampler
    assert (sampler.distortion_loss_weight, sampler.distortion_loss_start) == (0.002, 3)
    last = fit(tmp_path / "resumed", 4, "--ckpt_path", str(first))
    assert [path.name for path in (tmp_path / "resumed").iterdir()] == [RUN]  # the same run went on
    assert torch.load(last, map_location="cpu", weights_only=True)["global_step"] == 4
    resumed = state(last)
    assert {"camera_refinement.corrections", "field.appearance.codes"} <= straight.keys()
    assert any(name.startswith("sampler.") for name in straight)
    assert straight.keys() == resumed.keys()
    assert [name for name in straight if not torch.equal(straight[name], resumed[name])] == []
    assert not torch.equal(straight["camera_refinement.corrections"],
                           torch.zeros_like(straight["camera_refinement.corrections"]))  # they trained


@pytest.mark.slow
def test_forward_recipe_trains_on_bounded_rays(tiny_scene: Path, tmp_path: Path) -> None:
    """configs/real-forward.yaml fits and tests; its rays end inside the scene box (nothing lies
    beyond it for a contraction to squeeze) and its samples stay between each ray's near and far."""
    out = tmp_path / "run"
    args = _small_recipe_args("real-forward", tiny_scene, out, 2, "--data.steps_per_epoch", "1",
                              "--trainer.limit_val_batches", "1")
    assert main(["fit", *args]) == 0
    checkpoint = out / RUN / "checkpoints" / "last.ckpt"
    assert main(["test", *args, "--ckpt_path", str(checkpoint)]) == 0
    model = NerfModule.load_from_checkpoint(checkpoint)
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False)
    datamodule.setup("test")
    rays = datamodule.image_batch("test", 0, torch.device("cpu")).rays
    box = datamodule.scene_box
    ends = rays.origins + rays.directions * rays.far[:, None]
    assert bool(((ends >= box.lower - 1e-3) & (ends <= box.upper + 1e-3)).all())  # bounded: no shell
    model.sampler.eval()
    with torch.no_grad():
        samples = model.sampler(rays, model.field.density)
    near, far = rays.near[samples.ray_indices], rays.far[samples.ray_indices]
    assert len(samples) > 0
    assert bool((samples.t_starts >= near - 1e-5).all() & (samples.t_ends <= far + 1e-5).all())


# ----------------------------------------------------------------- distortion and annealing
def test_distortion_loss_matches_its_definition() -> None:
    torch.manual_seed(0)
    edges = torch.sort(torch.rand(4, 9), dim=-1)[0]
    weights = torch.rand(4, 8, requires_grad=True)
    mids, widths = 0.5 * (edges[:, 1:] + edges[:, :-1]), edges[:, 1:] - edges[:, :-1]
    gaps = (mids[:, :, None] - mids[:, None, :]).abs()
    pairs = (weights[:, :, None] * weights[:, None, :] * gaps).sum((1, 2))
    expected = (pairs + (weights.square() * widths).sum(-1) / 3.0).mean()
    torch.testing.assert_close(distortion_loss(edges, weights), expected)
    # Weight spread over the ray costs more than the same weight in one interval.
    flat = torch.full((1, 8), 1.0 / 8)
    peaked = torch.zeros(1, 8)
    peaked[0, 3] = 1.0
    even = torch.linspace(0.0, 1.0, 9)[None]
    assert float(distortion_loss(even, peaked)) < float(distortion_loss(even, flat))


def test_distortion_loss_counts_from_its_start_step() -> None:
    """Before ``distortion_loss_start`` a sampler's loss is the interlevel loss alone, the loss of the
    same sampler without the distortion loss; from that step on the distortion loss is added."""
    from nerf_lightning.testing import synthetic_density, synthetic_rays

    def loss(weight: float, start: int, step: int) -> float:
        torch.manual_seed(0)  # the same proposal network in every sampler
        sampler = Proposal(proposal_samples=(16,), num_samples=8, proposal_max_resolution=(32,),
                           distortion_loss_weight=weight, distortion_loss_start=start).train()
        rays = synthetic_rays()
        sampler.update(step, synthetic_density)
        samples = sampler(rays, synthetic_density, generator=torch.Generator().manual_seed(2))
        weights = torch.softmax(-samples.t_mids.view(len(rays), -1), dim=-1).reshape(-1)
        value = sampler.auxiliary_loss(samples, weights)
        assert value is not None
        return float(value)

    assert loss(0.1, 5, 4) == loss(0.0, 0, 4)
    assert loss(0.1, 5, 5) > loss(0.0, 0, 5) + 1e-3
    assert loss(0.1, 5, 9) == loss(0.1, 0, 9)  # the same loss once both count it
    with pytest.raises(ValueError, match="distortion_loss_start must be >= 0"):
        Proposal(distortion_loss_start=-1)


def test_annealing_spreads_early_proposal_samples() -> None:
    """Early in training (power near 0) resampling ignores the proposal weights; later it follows them."""
    from nerf_lightning.testing import synthetic_density, synthetic_rays

    def spread(step: int) -> float:
        torch.manual_seed(0)
        sampler = Proposal(proposal_samples=(32,), num_samples=16, proposal_max_resolution=(32,),
                           anneal_steps=100).train()
        with torch.no_grad():
            sampler.networks[0].mlp[-1].bias.fill_(3.0)  # a dense proposal: weight piles up at near
        rays = synthetic_rays()
        sampler.update(step, synthetic_density, generator=torch.Generator().manual_seed(1))
        samples = sampler(rays, synthetic_density, generator=torch.Generator().manual_seed(2))
        span = (rays.far - rays.near).clamp_min(1e-6)[samples.ray_indices]
        return float(((samples.t_mids - rays.near[samples.ray_indices]) / span).std())

    assert spread(0) > 1.5 * spread(100)
