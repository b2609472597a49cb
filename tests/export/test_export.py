"""``nerf-lightning export``: mesh, point cloud, grid and standalone TorchScript from real checkpoints.

The torch.export (``.pt2``) format and the standalone() hooks it is assembled from: test_export_pt2.py.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nerf_lightning.cli import main
from nerf_lightning.core.types import SceneBox
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.export import verify as verify_module
from nerf_lightning.export.common import ExportError, density_grid, grid_axes
from nerf_lightning.export.mesh import extract_mesh, few_triangles, surface_warning
from nerf_lightning.export.ply import read_ply, write_ply
from nerf_lightning.export.pointcloud import surface_points
from nerf_lightning.export.pt2 import export_pt2, load_pt2
from nerf_lightning.export.torchscript import build_standalone, export_torchscript, script_standalone
from nerf_lightning.export.verify import VERIFY_SCRIPT, image_psnr, run_standalone
from nerf_lightning.fields import HashGridField, PositionalEncodingField
from nerf_lightning.fields.base import RadianceField
from nerf_lightning.runs.trained import load_trained, run_config_path
from nerf_lightning.samplers import Hierarchical, OccupancyGrid, Proposal, Uniform
from nerf_lightning.samplers.toolkit import interval_edges, pack_dense_edges, stratified_fractions
from nerf_lightning.system.module import NerfModule, image_metrics
from tests.helpers.runs import ONE_THREAD, run_cli

REPO = Path(__file__).resolve().parents[2]


def _ckpt(run: Path) -> Path:
    return run / "checkpoints" / "last.ckpt"


def _trained(run: Path) -> tuple[NerfModule, NerfDataModule]:
    return load_trained(_ckpt(run), run_config_path(_ckpt(run)))


def _export(run: Path, *args: str) -> int:
    return main(["export", "--ckpt_path", str(_ckpt(run)), *args])


def _deprecated_jit() -> pytest.WarningsRecorder:
    """torch 2.13 deprecates TorchScript and says so: these tests expect the warning (nothing filters it)."""
    return pytest.warns(DeprecationWarning, match=r"`torch\.jit\.\w+` is deprecated")


def _saved_and_loaded(renderer: torch.nn.Module, path: Path) -> torch.jit.ScriptModule:
    with _deprecated_jit():
        script_standalone(renderer).save(str(path))
    with _deprecated_jit():
        return torch.jit.load(str(path))


def _compare_view(model: NerfModule, datamodule: NerfDataModule, module: torch.nn.Module,
                  index: int = 0) -> tuple[float, float, float]:
    """(max |rgb difference|, checkpoint PSNR, module PSNR) on test view ``index``."""
    batch = datamodule.image_batch("test", index, torch.device("cpu"))
    image = model.render_image(batch)
    rays = batch.rays
    with torch.no_grad():
        rgb, depth, opacity = module(rays.origins, rays.directions, rays.near, rays.far, batch.background)
    height, width = batch.image_size
    rgb = rgb.reshape(height, width, 3)
    assert torch.allclose(opacity.reshape(height, width, 1), image.opacity, atol=1e-5)
    assert torch.allclose(depth.reshape(height, width, 1), image.depth, atol=1e-4)
    max_diff = float((rgb - image.rgb).abs().max())
    return max_diff, image_psnr(image.rgb, image.target), image_psnr(rgb, image.target)


# --- TorchScript -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_standalone_module_renders_the_checkpoints_test_view(tiny_run: Path, tmp_path: Path) -> None:
    model, datamodule = _trained(tiny_run)
    renderer = build_standalone(model, datamodule.background)
    module = _saved_and_loaded(renderer, tmp_path / "m.pt")
    max_diff, checkpoint_psnr, module_psnr = _compare_view(model, datamodule, module)
    print(f"standalone vs render_image: max |rgb diff| {max_diff:.2e}, PSNR {module_psnr:.4f} vs "
          f"{checkpoint_psnr:.4f} dB")
    assert max_diff < 1e-5 and abs(module_psnr - checkpoint_psnr) < 0.1
    info = json.loads(module.metadata())
    assert info["field"] == "HashGridField" and info["sampler"] == "OccupancyGrid"
    assert torch.equal(module.scene_bounds, model.field.scene_bounds)


def test_standalone_reproduces_sparse_occupancy_early_termination_and_dense_hash_levels(
    tiny_scene: Path, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    field = HashGridField(num_levels=4, log2_hashmap_size=12, base_resolution=4, max_resolution=64,
                          hidden_dim=16, geometry_features=7, color_layers=1)  # 2 dense + 2 hashed levels
    with torch.no_grad():
        field.encoding.table.uniform_(-1.0, 1.0)
        field.density_mlp[-1].bias[0] += 3.0  # dense enough for rays to terminate early
    sampler = OccupancyGrid(resolution=16, steps_per_diagonal=128, early_stop_eps=1e-2, alpha_threshold=1e-3)
    model = NerfModule(field=field, sampler=sampler, eval_chunk_rays=100)
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False)
    datamodule.setup("test")
    assert datamodule.scene_box is not None
    model.set_scene_box(datamodule.scene_box)
    generator = torch.Generator().manual_seed(1)
    sampler.occupied.copy_(torch.rand(sampler.occupied.shape, generator=generator) < 0.3)
    sampler._coarse = None
    model.eval()
    renderer = build_standalone(model, datamodule.background)
    assert renderer.sampler.early_stop  # the density pass runs, as it does in evaluation
    module = _saved_and_loaded(renderer, tmp_path / "m.pt")
    max_diff, checkpoint_psnr, module_psnr = _compare_view(model, datamodule, module)
    assert max_diff < 1e-5 and abs(module_psnr - checkpoint_psnr) < 0.1
    # The sparse grid and the early termination really shaped the samples.
    rays = datamodule.image_batch("test", 0, torch.device("cpu")).rays
    with torch.no_grad():
        samples = sampler(rays, field.density)
        unpruned = sampler(rays, None)
    assert 0 < len(samples) < len(unpruned)


@pytest.mark.parametrize(("field", "sampler"), [
    (lambda: PositionalEncodingField(position_frequencies=4, direction_frequencies=2, depth=3, width=32,
                                     skip_layer=2), lambda: Uniform(num_samples=24)),
    (lambda: HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16,
                           direction_degree=2),  # a colour MLP on 4 terms of the view, not 16
     lambda: Uniform(num_samples=16)),
])
def test_standalone_uniform_sampler_and_positional_encoding_field(tiny_scene: Path, tmp_path: Path,
                                                                  field, sampler) -> None:
    torch.manual_seed(0)
    model = NerfModule(field=field(), sampler=sampler()).eval()
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False, background=(0.2, 0.4, 0.6))
    datamodule.setup("test")
    assert datamodule.scene_box is not None
    model.set_scene_box(datamodule.scene_box)
    renderer = build_standalone(model, datamodule.background)
    module = _saved_and_loaded(renderer, tmp_path / "m.pt")
    max_diff, checkpoint_psnr, module_psnr = _compare_view(model, datamodule, module)
    assert max_diff < 1e-5 and abs(module_psnr - checkpoint_psnr) < 0.1
    # Without a background argument the module composites over the training background.
    rays = datamodule.image_batch("test", 0, torch.device("cpu")).rays
    with torch.no_grad():
        default_bg, _, _ = module(rays.origins, rays.directions, rays.near, rays.far)
        given_bg, _, _ = module(rays.origins, rays.directions, rays.near, rays.far,
                                torch.tensor([0.2, 0.4, 0.6]))
    assert torch.equal(default_bg, given_bg)


@pytest.mark.slow  # TorchScript and torch.export of three samplers: seconds each
@pytest.mark.parametrize(("sampler", "traced"), [
    (lambda: Hierarchical(num_coarse=12, num_fine=20), False),
    (lambda: Hierarchical(num_coarse=8, num_fine=8, separate_coarse_network=True), True),
    (lambda: Proposal(proposal_samples=(24, 12), num_samples=16, proposal_max_resolution=(32, 64)), True),
], ids=["Hierarchical", "Hierarchical-coarse-network", "Proposal"])
def test_density_querying_samplers_are_reproduced_not_replaced(tiny_scene: Path, tmp_path: Path,
                                                               sampler, traced: bool) -> None:
    """Samplers that query densities while sampling export exactly (no uniform stand-in, no note).

    The torch.export program too (``traced``) where no other test traces the same module: the plain
    Hierarchical one (the coarse pass on the field itself) is traced from a checkpoint by
    ``test_export_pt2.py``, through the command line, and compared the same way; a trace takes seconds."""
    torch.manual_seed(0)
    field = HashGridField(num_levels=4, log2_hashmap_size=12, max_resolution=64, hidden_dim=16)
    with torch.no_grad():
        field.encoding.table.uniform_(-1.0, 1.0)  # a field with structure for the fine pass to follow
    model = NerfModule(field=field, sampler=sampler()).eval()
    for parameter in model.sampler.parameters():  # proposal and coarse networks: not at their init
        with torch.no_grad():
            parameter.add_(0.1 * torch.randn_like(parameter))
    datamodule = NerfDataModule(root=str(tiny_scene), cache=False)
    datamodule.setup("test")
    assert datamodule.scene_box is not None
    model.set_scene_box(datamodule.scene_box)
    module = _saved_and_loaded(build_standalone(model, datamodule.background), tmp_path / "m.pt")
    max_diff, checkpoint_psnr, module_psnr = _compare_view(model, datamodule, module)
    assert max_diff < 1e-5 and abs(module_psnr - checkpoint_psnr) < 0.1
    assert "approximation" not in json.loads(module.metadata())
    if traced:
        export_pt2(model, datamodule.background, tmp_path / "m.pt2")  # the torch.export program: the same
        program, _ = load_pt2(tmp_path / "m.pt2")
        max_diff, checkpoint_psnr, program_psnr = _compare_view(model, datamodule, program)
        assert max_diff < 1e-5 and abs(program_psnr - checkpoint_psnr) < 0.1
    origins = torch.tensor([[0.0, 0.0, -4.0], [0.0, 0.0, -4.0]])
    directions = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    rgb, depth, opacity = module(origins, directions, torch.tensor([2.5, 0.0]), torch.tensor([5.5, 0.0]))
    assert rgb.shape == (2, 3) and depth.shape == opacity.shape == (2,)
    assert float(opacity[1]) == 0.0 and torch.equal(rgb[1], torch.ones(3))  # a ray that misses: background


@pytest.mark.slow
def test_torchscript_export_says_torch_deprecates_it(tiny_run: Path, tmp_path: Path) -> None:
    """The deprecation is reported in one note, not filtered away."""
    model, datamodule = _trained(tiny_run)
    note = export_torchscript(model, datamodule.background, tmp_path / "m.pt")
    assert note is not None and "deprecates TorchScript" in note and "--format pt2" in note
    assert len(note.splitlines()) == 1


@pytest.mark.slow
def test_verify_psnr_is_the_test_psnr_metric(tiny_run: Path) -> None:
    model, datamodule = _trained(tiny_run)
    image = model.render_image(datamodule.image_batch("test", 0, torch.device("cpu")))
    metrics = image_metrics("test/")
    metrics.update(image.rgb.permute(2, 0, 1)[None], image.target.permute(2, 0, 1)[None])
    assert abs(float(metrics.compute()["test/psnr"]) - image_psnr(image.rgb, image.target)) < 1e-3


@pytest.mark.slow
def test_the_fresh_process_refuses_to_import_nerf_lightning(tmp_path: Path) -> None:
    """The guard: the package is installed in this environment, yet the script cannot import it."""
    code = VERIFY_SCRIPT.replace('if __name__ == "__main__":', "if False:") + "\nimport nerf_lightning\n"
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          check=False)
    assert done.returncode != 0 and "refuses to import nerf_lightning" in done.stderr
    plain = subprocess.run([sys.executable, "-I", "-c", "import nerf_lightning"], cwd=tmp_path, check=False)
    assert plain.returncode == 0  # so the guard, not a missing package, is what stops it


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``nerf-lightning export ARGS`` in a fresh interpreter; it and the process it starts get one thread, as
    ``run_cli``'s do (only the threads change, never the results)."""
    return subprocess.run([sys.executable, "-m", "nerf_lightning", "export", *args], cwd=REPO,
                          env={**os.environ, **ONE_THREAD}, capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_verify_passes_through_the_cli_and_fails_on_a_tampered_module(
    tiny_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``export --format torchscript --verify`` of ``tiny_run`` passes: its fresh ``python -I`` process
    (the real one; its report is kept on the way) imported no nerf_lightning and scored each test view
    as ``render_image`` does, to 1e-6 dB. The same module with its colour output layer scaled fails
    ``--verify-only`` with one line on stderr."""
    reports: list[dict[str, Any]] = []

    def reported(*args: Any, **kwargs: Any) -> dict[str, Any]:
        reports.append(run_standalone(*args, **kwargs))
        return reports[-1]

    monkeypatch.setattr(verify_module, "run_standalone", reported)
    out = tmp_path / "scene.pt"
    # The entry point in this process (the verify still renders in a fresh interpreter); the refusal
    # below runs in one of its own, where stderr also holds any warning a user would see.
    done = run_cli("export", "--ckpt_path", str(_ckpt(tiny_run)), "--format", "torchscript",
                   "--out", str(out), "--verify")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("verify:")]
    print("\n".join(lines))
    assert len(lines) == 3 and lines[-1].endswith("OK") and "no nerf_lightning imported" in lines[1]
    difference = float(lines[-1].split("difference ")[1].split(" dB")[0])
    assert abs(difference) <= 0.1
    # What the fresh process itself reported.
    [report] = reports
    assert report["nerf_lightning_modules"] == [] and report["isolated"] == 1
    model, datamodule = _trained(tiny_run)
    assert len(report["psnr"]) == len(datamodule.splits["test"]) == 2
    for index, module_psnr in enumerate(report["psnr"]):
        image = model.render_image(datamodule.image_batch("test", index, torch.device("cpu")))
        assert abs(module_psnr - image_psnr(image.rgb, image.target)) < 1e-6
    # The script itself names no import of the package (it only refuses one).
    assert "import nerf_lightning" not in VERIFY_SCRIPT and "from nerf_lightning" not in VERIFY_SCRIPT

    with _deprecated_jit():
        module = torch.jit.load(str(out))
    weight = dict(module.named_parameters()) | dict(module.named_buffers())
    with torch.no_grad():
        weight["field.color_mlp.4.weight"].mul_(20.0)  # the colour MLP's output layer
    module.save(str(out))
    done = _cli("--ckpt_path", str(_ckpt(tiny_run)), "--format", "torchscript", "--out", str(out),
                "--verify-only")
    err = done.stderr.strip()
    print(err)
    assert done.returncode == 1 and len(err.splitlines()) == 1, done.stderr
    assert err.startswith("nerf-lightning export: verify failed: standalone module ")
    assert "vs checkpoint" in err and "allowed ±0.1 dB" in err


# --- mesh, point cloud, grid -------------------------------------------------------------------------


class _Ball(RadianceField):
    """Density ``peak`` inside a ball (smooth edge), colour ``(1 + direction) / 2``."""

    def __init__(self, center: tuple[float, float, float], radius: float, peak: float = 100.0) -> None:
        super().__init__()
        self.center, self.radius, self.peak = torch.tensor(center), radius, peak

    def density(self, positions: torch.Tensor) -> torch.Tensor:
        distance = (positions - self.center).norm(dim=-1)
        return self.peak * torch.sigmoid((self.radius - distance) * 60.0)

    def forward(self, positions: torch.Tensor, directions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.density(positions), (1.0 + directions) / 2.0


def test_mesh_of_an_analytic_ball_has_its_shape_normals_and_inward_colours() -> None:
    center, radius = np.array([0.2, -0.1, 0.1]), 0.6
    field = _Ball(tuple(center), radius)
    field.set_scene_box(SceneBox.cube(1.0))
    mesh = extract_mesh(field, resolution=48, threshold=50.0)
    offsets = mesh.vertices - center
    distance = np.linalg.norm(offsets, axis=-1)
    assert np.abs(distance - radius).max() < 0.01
    outward = offsets / distance[:, None]
    assert (np.einsum("vi,vi->v", mesh.normals, outward) > 0.95).all()
    inward_colour = (1.0 - outward) / 2.0 * 255.0  # the ball's colour seen along the inward normal
    error = np.abs(mesh.colors.astype(float) - inward_colour)
    assert error.mean() < 0.02 * 255 and error.max() < 0.12 * 255  # normals from a 48^3 grid are a bit off
    assert np.abs(mesh.colors.astype(float) - (1.0 + outward) / 2.0 * 255.0).mean() > 0.2 * 255
    tri = mesh.vertices[mesh.faces]
    cross = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    assert (np.einsum("fi,fi->f", cross, tri.mean(axis=1) - center) > 0).all()  # counter-clockwise outside
    relative = tri - center
    volume = np.einsum("fi,fi->f", relative[:, 0], np.cross(relative[:, 1], relative[:, 2])).sum() / 6
    assert volume == pytest.approx(4.0 / 3.0 * math.pi * radius**3, rel=0.02)
    assert surface_warning(mesh) is None  # a ball across most of the box is a plausible scene


def test_a_mesh_far_smaller_than_the_box_is_warned_about_naming_the_options() -> None:
    field = _Ball((0.0, 0.0, 0.0), 0.1)  # spans a tenth of the box
    field.set_scene_box(SceneBox.cube(1.0))
    mesh = extract_mesh(field, resolution=32, threshold=50.0)
    warning = surface_warning(mesh)
    assert warning is not None and len(warning.splitlines()) == 1
    assert f"{len(mesh.faces)} triangles, under the {few_triangles(32)} of" in warning
    assert re.search(r"its \d+ vertices span at most \d\.\d% of the scene box along any axis\)", warning)
    dense = int((density_grid(field, 32)[0] > 50.0).sum())
    assert f"; {dense} of the grid's 32768 points are denser than 50 (densities 0 to 9" in warning, warning
    assert warning.endswith("try a lower --density_threshold or a higher --resolution")
    field.set_scene_box(SceneBox.cube(0.15))  # the same ball filling most of a smaller box: nothing to say
    assert surface_warning(extract_mesh(field, resolution=32, threshold=50.0)) is None


@pytest.mark.slow
def test_mesh_of_the_checkpoint_is_a_coloured_ply_inside_the_scene_box(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, _ = _trained(tiny_run)
    density, _ = density_grid(model.field, 24)
    threshold = float(np.median(density))  # 3 training steps: no real surface yet, so cut at the median
    out = tmp_path / "scene.ply"
    assert _export(tiny_run, "--format", "mesh", "--out", str(out), "--resolution", "24",
                   "--density-threshold", f"{threshold:.9g}") == 0
    captured = capsys.readouterr()
    print(captured.out.strip())
    assert "warning" not in captured.err  # half the grid above the threshold: a surface all over the box
    ply = read_ply(out)
    vertices, faces, colors = ply["vertices"], ply["faces"], ply["colors"]
    assert len(vertices) > 0 and len(faces) > 0
    assert colors.shape == vertices.shape and colors.dtype == np.uint8
    assert ply["normals"].shape == vertices.shape and faces.max() < len(vertices) and faces.min() >= 0
    bounds = model.field.scene_bounds.numpy()
    assert (vertices >= bounds[0] - 1e-5).all() and (vertices <= bounds[1] + 1e-5).all()
    assert [path.name for path in tmp_path.iterdir()] == ["scene.ply"]


@pytest.mark.slow
def test_mesh_whose_threshold_misses_the_surface_is_written_with_a_warning(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model, _ = _trained(tiny_run)
    density, _ = density_grid(model.field, 16)
    threshold = float(np.sort(density.reshape(-1))[-4])  # only the three densest of 4096 points above it
    out = tmp_path / "blobs.ply"
    assert _export(tiny_run, "--format", "mesh", "--out", str(out), "--resolution", "16",
                   "--density_threshold", f"{threshold:.9g}") == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("nerf-lightning export: warning: the mesh is implausibly small"), err
    assert "try a lower --density_threshold or a higher --resolution" in err, err
    assert 0 < len(read_ply(out)["faces"]) < few_triangles(16)


@pytest.mark.slow
def test_mesh_without_a_surface_is_a_one_line_error_and_writes_nothing(
    tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _export(tiny_run, "--format", "mesh", "--out", str(tmp_path / "m.ply"), "--resolution", "8") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no surface" in err and "--density_threshold" in err
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_grid_npz_holds_density_rgb_bounds_and_metadata(tiny_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "grid.npz"
    assert _export(tiny_run, "--format", "grid", "--out", str(out), "--resolution", "8") == 0
    model, _ = _trained(tiny_run)
    with np.load(out) as grid:
        arrays = {name: grid[name] for name in grid.files}
    assert arrays["density"].shape == (8, 8, 8) and arrays["density"].dtype == np.float32
    assert arrays["rgb"].shape == (8, 8, 8, 3) and arrays["rgb"].min() >= 0.0 and arrays["rgb"].max() <= 1.0
    bounds = model.field.scene_bounds.numpy()
    np.testing.assert_allclose(arrays["bounds"], bounds)
    assert arrays["x"][0] == pytest.approx(bounds[0, 0]) and arrays["z"][-1] == pytest.approx(bounds[1, 2])
    assert arrays["directions"].shape == (6, 3)
    metadata = json.loads(str(arrays["metadata"]))
    assert metadata["resolution"] == 8 and metadata["format"] == "nerf-lightning field grid"
    assert metadata["checkpoint"] == str(_ckpt(tiny_run)) and metadata["suggested_density_threshold"] > 0
    # Spot-check one cell against the field itself.
    point = torch.tensor([[arrays["x"][3], arrays["y"][5], arrays["z"][1]]])
    with torch.no_grad():
        density, _ = model.field(point, torch.tensor([[1.0, 0.0, 0.0]]))
    assert arrays["density"][3, 5, 1] == pytest.approx(float(density[0]), rel=1e-5)
    axes = grid_axes(model.field.scene_bounds, 8)
    np.testing.assert_allclose(arrays["y"], axes[1].numpy())


@pytest.mark.slow
def test_pointcloud_keeps_opaque_pixels_subsampled_to_max_points(tiny_run: Path, tmp_path: Path) -> None:
    model, datamodule = _trained(tiny_run)
    full = surface_points(model, datamodule, "train", max_points=10**9)
    assert full.candidates == len(full.points) > 50
    out = tmp_path / "cloud.ply"
    assert _export(tiny_run, "--format", "pointcloud", "--out", str(out), "--max-points", "50") == 0
    ply = read_ply(out)
    assert ply["vertices"].shape == (50, 3) and ply["colors"].shape == (50, 3) and "faces" not in ply
    bounds = model.field.scene_bounds.numpy()
    assert (ply["vertices"] >= bounds[0] - 1e-4).all() and (ply["vertices"] <= bounds[1] + 1e-4).all()
    # Each kept point is one of the full cloud's, with its colour.
    full_rows = {tuple(p) + tuple(c) for p, c in zip(full.points.tolist(), full.colors.tolist(), strict=True)}
    kept = zip(ply["vertices"].tolist(), ply["colors"].tolist(), strict=True)
    assert all(tuple(p) + tuple(c) in full_rows for p, c in kept)


def test_ply_round_trip(tmp_path: Path) -> None:
    vertices = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    colors = np.arange(15, dtype=np.uint8).reshape(5, 3)
    faces = np.array([[0, 1, 2], [2, 3, 4]])
    write_ply(tmp_path / "m.ply", vertices, colors=colors, faces=faces, comments=["hello"])
    ply = read_ply(tmp_path / "m.ply")
    np.testing.assert_array_equal(ply["vertices"], vertices)
    np.testing.assert_array_equal(ply["colors"], colors)
    np.testing.assert_array_equal(ply["faces"], faces)
    assert b"comment hello" in (tmp_path / "m.ply").read_bytes()[:200]


# --- errors ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ckpt_path", "missing.ckpt", "--format", "mesh", "--out", "m.ply"],
         "missing.ckpt: no such checkpoint"),
        (["--format", "obj", "--out", "m.obj"], "unknown format 'obj'; expected one of mesh, pointcloud"),
        (["--format", "grid", "--out", "exists.npz"], "exists.npz: already exists; pass --force"),
        (["--format", "mesh", "--out", "m.ply", "--verify"],
         "--verify checks a pt2 or torchscript export, not"),
        (["--format", "mesh", "--out", "m.obj"], "expected a .ply file for this format"),
        (["--format", "torchscript", "--out", "m.pt", "--verify-only"], "m.pt: no such module to verify"),
        (["--format", "grid", "--out", "g.npz", "--trainer.max_steps", "3"], "unrecognized arguments"),
        (["--format", "grid", "--out", "g.npz", "--resolution", "1"], "--resolution: expected an integer"),
    ],
)
@pytest.mark.slow
def test_bad_arguments_are_one_line_errors(tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           args: list[str], message: str) -> None:
    (tmp_path / "exists.npz").write_bytes(b"keep")
    args = [str(tmp_path / arg) if arg.startswith(("m.", "g.", "exists", "missing")) else arg for arg in args]
    ckpt = [] if "--ckpt_path" in args else ["--ckpt_path", str(_ckpt(tiny_run))]
    assert main(["export", *ckpt, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and err.startswith("nerf-lightning"), err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["exists.npz"]
    assert (tmp_path / "exists.npz").read_bytes() == b"keep"


class _JitteredSteps(torch.nn.Module):
    """An export module that calls the eager-only ``stratified_fractions`` (its keyword-only generator)."""

    def forward(self, origins: torch.Tensor, directions: torch.Tensor, near: torch.Tensor,
                far: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        fractions = stratified_fractions(near.shape[0], 5, jitter=False, device=near.device)
        return pack_dense_edges(interval_edges(near, far, fractions))


class _UnscriptableUniform(Uniform):
    def standalone(self, field: torch.nn.Module) -> torch.nn.Module:
        return _JitteredSteps()


def test_a_module_that_does_not_script_is_refused_naming_the_construct(tmp_path: Path) -> None:
    model = NerfModule(field=PositionalEncodingField(position_frequencies=2, direction_frequencies=1, depth=1,
                                                     width=8), sampler=_UnscriptableUniform(num_samples=4))
    with pytest.raises(ExportError) as raised:
        export_torchscript(model, (1.0, 1.0, 1.0), tmp_path / "m.pt")
    message = str(raised.value)
    assert "\n" not in message and not (tmp_path / "m.pt").exists()
    assert message.startswith("torch.jit.script cannot compile the standalone renderer of sampler "
                              "'_UnscriptableUniform' and field 'PositionalEncodingField': Compiled "
                              "functions can't take variable number of arguments or use keyword-only "
                              "arguments with defaults, at "), message
    assert "nerf_lightning/samplers/intervals.py:" in message  # the file and line of the construct
    assert "generator: torch.Generator | None = None" in message  # its source line
    assert message.endswith("; use --format pt2"), message
