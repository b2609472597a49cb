"""NeRF-W's appearance evaluation: a code fitted to a test view's left half, scored on its right half."""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from PIL import Image

from nerf_lightning.callbacks import AppearanceHalfFit, EvalReport
from nerf_lightning.cli import main
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.evaluation.appearance_fit import HalfFitOptions, fit_left_render_right, right_half
from nerf_lightning.fields import HashGridField
from nerf_lightning.fields.appearance import AppearanceEmbedding
from nerf_lightning.samplers import OccupancyGrid, Uniform
from nerf_lightning.system.module import NerfModule
from tests.helpers.numerics import owned_numerics
from tests.helpers.runs import RUN, short_run_args

NUM_TRAIN = 12
TRAIN_EXPOSURES = np.random.default_rng(0).permutation(np.linspace(0.4, 1.0, NUM_TRAIN))
"""Per-training-photo exposure (RGB scale): photos of one scene taken at different exposures."""

TYPICAL, DARK = 0.7, 0.4  # the training exposures' mean, and their darkest


def _small_field() -> HashGridField:
    return HashGridField(num_levels=8, log2_hashmap_size=14, max_resolution=128, hidden_dim=32,
                         appearance_dim=8)


def _expose(folder: Path, factors: np.ndarray | list[float]) -> None:
    """Scale the straight RGB of ``folder/r_<i>.png`` by ``factors[i]`` (the alpha, so the white
    background the loader composites over, stays: only the scene's colours change)."""
    for i, factor in enumerate(factors):
        path = folder / f"r_{i}.png"
        rgba = np.asarray(Image.open(path)).astype(np.float64)
        rgba[..., :3] = np.round(rgba[..., :3] * factor)
        Image.fromarray(rgba.astype(np.uint8)).save(path)


@pytest.fixture(scope="module")
def exposure_scenes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two copies of one 32x32 demo scene whose training photos have exposures 0.4 to 1.0; their two
    test views are at the typical exposure (0.7) in one, at the darkest (0.4) in the other."""
    base = tmp_path_factory.mktemp("exposure")
    typical = make_demo_scene(base / "typical", num_train=NUM_TRAIN, num_val=1, num_test=2, resolution=32)
    _expose(typical / "train", TRAIN_EXPOSURES)
    dark = Path(shutil.copytree(typical, base / "dark"))
    _expose(typical / "test", [TYPICAL, TYPICAL])
    _expose(dark / "test", [DARK, DARK])
    return {"typical": typical, "dark": dark}


def _trainer(*callbacks: pl.Callback, steps: int = 0) -> pl.Trainer:
    return pl.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      limit_val_batches=0, enable_model_summary=False, callbacks=list(callbacks))


@pytest.fixture(scope="module", autouse=True)
def owned_numerics_state() -> Iterator[None]:
    """How much the fit gains is a property of one seeded training, not a law: it moves with the
    seed, the thread count and the processor's floating-point kernels (the same seed gained 1.59 dB
    on the dark view on one processor and 0.77 dB on another). So this module trains and evaluates
    with its own threads, seeds and kernel flags, whatever ran before it in the process
    (``tests/helpers/numerics.py``), and the test asks for what holds across them: the fit gains
    clearly on the dark view and clearly more there than on the typical one. One thread: the training
    below is hundreds of small steps, which two threads sharing their cores with other work slow down
    many times over."""
    with owned_numerics(seed=0, threads=1):
        yield


@pytest.fixture(scope="module")
def trained(exposure_scenes: dict[str, Path]) -> NerfModule:
    """300 steps with an 8-wide appearance code per training photo (fewer steps at a higher rate left some
    seeds with codes that had not yet told the exposures apart)."""
    pl.seed_everything(0)
    module = NerfModule(field=_small_field(), sampler=OccupancyGrid(resolution=32))
    datamodule = NerfDataModule(root=str(exposure_scenes["typical"]), rays_per_batch=1024,
                                steps_per_epoch=1000, cache=False, seed=0)
    _trainer(steps=300).fit(module, datamodule)
    return module


def _half_fit() -> AppearanceHalfFit:
    """The fit of the gain checks: fewer steps and rays per step than the default, at a higher rate; a
    code of 8 numbers fitted to a 32x16-pixel half needs no more (it gains as much as the default fit)."""
    return AppearanceHalfFit(steps=32, rays_per_step=512, learning_rate=0.1)


FEW_STEPS = 4
"""Adam steps of the short fits that check what does not need a converged code (the headline, the seeding):
past the first step (whose update is the gradient's sign alone), the code depends on the pixels drawn."""


def _test(module: NerfModule, scene: Path, callback: AppearanceHalfFit) -> dict[str, float]:
    datamodule = NerfDataModule(root=str(scene), cache=False, seed=0)
    results = _trainer(callback).test(module, datamodule, verbose=False)
    return {name: float(value) for name, value in results[0].items()}


# ---------------------------------------------------------------------------- with a Trainer
@pytest.mark.slow
def test_fitted_code_beats_the_mean_code_on_a_differently_exposed_view(
        trained: NerfModule, exposure_scenes: dict[str, Path]) -> None:
    codes = trained.field.appearance.codes.detach()
    assert codes.shape[0] == NUM_TRAIN and float(codes.std(0).mean()) > 0.05  # the photos' codes differ
    state = {name: value.clone() for name, value in trained.state_dict().items()}
    callback = _half_fit()
    few_steps = _test(trained, exposure_scenes["dark"], AppearanceHalfFit(steps=FEW_STEPS))  # (other options)
    dark = _test(trained, exposure_scenes["dark"], callback)
    typical = _test(trained, exposure_scenes["typical"], callback)
    print(f"\ndark test views:    {dark}\ntypical test views: {typical}")
    for results in (dark, typical):
        assert set(results) >= {"test/psnr", "test/ssim", "test/psnr_right_half_fit",
                                "test/ssim_right_half_fit", "test/psnr_right_half_mean",
                                "test/ssim_right_half_mean"}
    # The headline is the mean-code render, whatever the fit does.
    assert dark["test/psnr"] == few_steps["test/psnr"] and dark["test/ssim"] == few_steps["test/ssim"]
    # A darker photo than the typical one: its own code explains the exposure, the mean code cannot.
    gain = {name: results["test/psnr_right_half_fit"] - results["test/psnr_right_half_mean"]
            for name, results in (("dark", dark), ("typical", typical))}
    assert gain["dark"] > 0.5 and gain["dark"] > gain["typical"] + 0.5, gain
    assert dark["test/ssim_right_half_fit"] > dark["test/ssim_right_half_mean"]
    # A photo at the typical exposure: the fit does no worse than the mean code on unseen pixels.
    assert gain["typical"] >= -0.3, gain
    # Fields, sampler and their training state are exactly as before; nothing was left frozen.
    after = trained.state_dict()
    assert all(torch.equal(state[name], after[name]) for name in state)
    assert all(p.requires_grad and p.grad is None for p in trained.parameters())
    # Seeded per view: the same figures again, from a fresh callback after the runs above. A short fit
    # shows it as well as a full one: its figures already depend on which pixels were drawn (another
    # seed gives others).
    assert _test(trained, exposure_scenes["dark"], AppearanceHalfFit(steps=FEW_STEPS)) == few_steps
    other_draws = _test(trained, exposure_scenes["dark"], AppearanceHalfFit(steps=FEW_STEPS, seed=1))
    assert other_draws["test/psnr_right_half_fit"] != few_steps["test/psnr_right_half_fit"]


@pytest.mark.slow
def test_the_report_scores_training_photos_with_their_own_codes(
        trained: NerfModule, exposure_scenes: dict[str, Path], tmp_path: Path) -> None:
    """EvalReport's training views are the photos as fitted: each with its own code, which explains its
    exposure (and whatever else the code fitted of that photo). The same photos rendered as new views
    (the mean code) score lower, so a capture whose photos vary in exposure no longer shows a gap
    below zero that hides how well its photos were fitted."""
    datamodule = NerfDataModule(root=str(exposure_scenes["typical"]), cache=False, seed=0)
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path,
                         callbacks=[EvalReport(worst_k=0, lpips=False, train_views=NUM_TRAIN)])
    trainer.test(trained, datamodule, verbose=False)
    fitted = {view["index"]: view["psnr"] for view in json.loads((tmp_path / "eval.json").read_text())
              ["train"]["views"]}
    assert sorted(fitted) == list(range(NUM_TRAIN))
    gain = {}
    for index, psnr in fitted.items():
        image = trained.render_image(datamodule.image_batch("train", index, trained.device))
        as_new = -10.0 * math.log10(float((image.rgb - image.target).square().mean()))
        gain[index] = psnr - as_new
    print(f"\nown code minus mean code, dB, by exposure: "
          f"{ {round(float(TRAIN_EXPOSURES[i]), 2): round(gain[i], 2) for i in sorted(gain)} }")
    assert sum(gain.values()) / NUM_TRAIN > 1.0, gain


@pytest.mark.slow
def test_training_photos_get_no_fit_and_one_warning(trained: NerfModule,
                                                    exposure_scenes: dict[str, Path]) -> None:
    """With ``test_split: train`` the tested views are training photos, rendered with their own codes."""
    datamodule = NerfDataModule(root=str(exposure_scenes["typical"]), cache=False, seed=0, test_split="train")
    with pytest.warns(UserWarning, match="AppearanceHalfFit: the tested views are training photos") as caught:
        results = _trainer(AppearanceHalfFit(steps=2)).test(trained, datamodule, verbose=False)[0]
    assert len([w for w in caught if "AppearanceHalfFit" in str(w.message)]) == 1  # once, not per view
    assert "test/psnr" in results and not any("right_half" in name for name in results)


@pytest.mark.slow
def test_a_field_without_appearance_codes_gets_a_warning_and_no_metrics(
        exposure_scenes: dict[str, Path]) -> None:
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16)
    module = NerfModule(field=field, sampler=Uniform(num_samples=8))
    expected = r"AppearanceHalfFit: the field \(HashGridField\) has no appearance codes"
    with pytest.warns(UserWarning, match=expected):
        results = _test(module, exposure_scenes["typical"], AppearanceHalfFit(steps=2))
    assert "test/psnr" in results and not any("right_half" in name for name in results)


@pytest.mark.slow
@pytest.mark.parametrize("per_image", [["--model.field.appearance_dim", "4"],
                                       ["--model.field.color_correction", "true"]],
                         ids=["codes", "color-correction"])
def test_the_command_line_turns_it_on_for_test(tiny_scene: Path, tmp_path: Path, per_image: list[str],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Without validation: the test command reads only the fit's last checkpoint (with colour
    # corrections: a table of 12 numbers per image, fitted as a code is).
    args = short_run_args(tiny_scene, tmp_path, *per_image, "--trainer.limit_val_batches", "0", steps=3)
    assert main(["fit", *args]) == 0
    checkpoint = tmp_path / RUN / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    assert main(["test", *args, "--ckpt_path", str(checkpoint), "--trainer.callbacks+=AppearanceHalfFit",
                 "--trainer.callbacks.steps", "4"]) == 0
    printed = capsys.readouterr().out
    assert "test/psnr_right_half_fit" in printed and "test/ssim_right_half_mean" in printed


# ------------------------------------------------------------------------------- the parts
@pytest.mark.parametrize("supersample", [1, 2])
def test_the_fit_recovers_a_known_code_from_the_left_half(tiny_scene: Path, device: torch.device,
                                                          supersample: int) -> None:
    """Target: a view rendered with a known code. From the mean code (zeros) the fit on the left half
    brings the unseen right half close to the target; the table is not touched. With several rays per
    pixel, a pixel is their mean, in the target and in the fit."""
    torch.manual_seed(0)
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16,
                          appearance_dim=4)
    module = NerfModule(field=field, sampler=Uniform(num_samples=16)).eval()
    field.set_num_images(3)
    with torch.no_grad():
        field.encoding.table.uniform_(-1.0, 1.0)
        field.density_mlp[-1].bias.fill_(3.0)  # dense enough that colour shows
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False, supersample=supersample)
    datamodule.setup("test")
    assert datamodule.scene_box is not None
    module.set_scene_box(datamodule.scene_box)
    module.to(device)
    batch = datamodule.image_batch("test", 0, device)
    per_pixel = batch.rays_per_pixel
    embedding = field.appearance_codes
    assert isinstance(embedding, AppearanceEmbedding)

    def render(rays, code):
        with embedding.evaluation_code(code):
            return module.render_rays(rays, batch.background)[0].rgb

    known = torch.tensor([6.0, -6.0, 4.0, -3.0], device=device)
    height, width = batch.image_size
    with torch.no_grad():
        target, start = (batch.pixel_means(render(batch.rays, code)).clamp(0, 1).reshape(height, width, 3)
                         for code in (known, embedding.mean_code()))
    table = embedding.codes.detach().clone()
    options = HalfFitOptions(steps=100, rays_per_step=256, learning_rate=0.2)
    fit = fit_left_render_right(render, batch.rays, target, None, embedding.mean_code(), options,
                                torch.Generator(device).manual_seed(7), per_pixel)
    assert fit is not None and fit.rgb.shape == (height, width - width // 2, 3)
    before = float((right_half(start, width) - right_half(target, width)).abs().mean())
    after = float((fit.rgb - right_half(target, width)).abs().mean())
    print(f"\nright-half mean absolute error: mean code {before:.4f}, fitted code {after:.4f}")
    assert after < 0.25 * before
    # Seeded by the generator: the same draws, the same code and render; other draws, another code. Shown
    # on short fits (FEW_STEPS), whose code already depends on the draws.
    short = replace(options, steps=FEW_STEPS)
    again = [fit_left_render_right(render, batch.rays, target, None, embedding.mean_code(), short,
                                   torch.Generator(device).manual_seed(seed), per_pixel)
             for seed in (7, 7, 8)]
    assert all(result is not None for result in again)
    assert torch.equal(again[1].code, again[0].code) and torch.equal(again[1].rgb, again[0].rgb)
    assert not torch.equal(again[2].code, again[0].code)
    assert torch.equal(embedding.codes, table) and embedding.codes.grad is None
    # A mask that keeps no left-half pixel leaves nothing to fit to.
    only_right = torch.zeros(height, width, dtype=torch.bool, device=device)
    only_right[:, width // 2:] = True
    assert fit_left_render_right(render, batch.rays, target, only_right, embedding.mean_code(), options,
                                 torch.Generator(device), per_pixel) is None


def test_evaluation_code_stands_in_for_the_mean_only_within_its_block() -> None:
    embedding = AppearanceEmbedding(3)
    embedding.resize(2)
    with torch.no_grad():
        embedding.codes.copy_(torch.tensor([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]]))
    code = torch.tensor([5.0, 6.0, 7.0])
    with embedding.evaluation_code(code):
        assert torch.equal(embedding(None, 2), code.expand(2, 3))
        assert torch.equal(embedding(torch.tensor([1]), 1), embedding.codes[1:])  # training images: theirs
    assert torch.equal(embedding(None, 1), torch.tensor([[2.0, 2.0, 2.0]]))
    with pytest.raises(RuntimeError), embedding.evaluation_code(code):
        raise RuntimeError("restored on an error too")
    assert torch.equal(embedding(None, 1), torch.tensor([[2.0, 2.0, 2.0]]))
    expected = r"evaluation_code: expected a code of shape \[3\], got \[2\]"
    with pytest.raises(ValueError, match=expected), embedding.evaluation_code(torch.zeros(2)):
        pass


def test_bad_fit_options_are_named() -> None:
    with pytest.raises(ValueError, match=r"^steps must be an integer >= 1, got 0$"):
        AppearanceHalfFit(steps=0)
    with pytest.raises(ValueError, match=r"^learning_rate must be a number > 0, got -1"):
        AppearanceHalfFit(learning_rate=-1.0)
