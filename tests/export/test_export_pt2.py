"""``nerf-lightning export --format pt2``: the renderer assembled from the standalone() hooks, traced with
``torch.export`` and verified in a fresh torch-only process, for every built-in sampler and the Disparity
plugin (real short fits on the tiny scene); samplers and fields without the hook are refused by name."""

from __future__ import annotations

import json
import math
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from nerf_lightning.cli import main, run_lightning_cli
from nerf_lightning.core.types import DensityFn, PackedSamples, Rays
from nerf_lightning.export.common import ExportError
from nerf_lightning.export.pt2 import export_pt2, load_pt2
from nerf_lightning.export.torchscript import build_standalone
from nerf_lightning.export.verify import image_psnr
from nerf_lightning.fields import HashGridField, RadianceField
from nerf_lightning.runs.trained import load_trained, run_config_path
from nerf_lightning.samplers import Sampler, Uniform
from nerf_lightning.samplers.intervals import stratified_fractions
from nerf_lightning.system.module import NerfModule
from tests.helpers.runs import RUN, short_run_args


class NoStandalone(Sampler):
    """Equal intervals (jittered in training), and no standalone() hook: export must refuse it."""

    def __init__(self, num_samples: int = 8) -> None:
        super().__init__()
        self.num_samples = num_samples

    def forward(self, rays: Rays, density_fn: DensityFn | None = None, *,
                generator: torch.Generator | None = None) -> PackedSamples:
        u = stratified_fractions(len(rays), self.num_samples + 1, jitter=self.training, device=rays.device,
                                 generator=generator)
        near, far = rays.near[:, None], torch.maximum(rays.far, rays.near)[:, None]
        return PackedSamples.from_dense(near + (far - near) * u)


class NoStandaloneField(RadianceField):
    """A constant grey fog, without a standalone() hook."""

    def density(self, positions: torch.Tensor) -> torch.Tensor:
        return torch.ones(positions.shape[0])

    def forward(self, positions: torch.Tensor, directions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.density(positions), torch.full_like(positions, 0.5)


SAMPLERS = {  # sampler arguments of the short fits (after the demo config's OccupancyGrid)
    "OccupancyGrid": ("--model.sampler.resolution", "16"),
    "Uniform": ("--model.sampler=Uniform", "--model.sampler.num_samples=24",
                "--data.background", "[0.2, 0.4, 0.6]"),  # not the config's white: the export must record it
    "Hierarchical": ("--model.sampler=Hierarchical", "--model.sampler.num_coarse=16",
                     "--model.sampler.num_fine=16"),
    # One proposal network: each adds seconds to the trace; two in a row (the default count) are traced by
    # tests/export/test_export.py (test_density_querying_samplers_are_reproduced_not_replaced).
    "Proposal": ("--model.sampler=Proposal", "--model.sampler.num_samples=16",
                 "--model.sampler.proposal_samples=[32]", "--model.sampler.proposal_max_resolution=[64]"),
    "Disparity": ("--model.sampler=Disparity", "--model.sampler.num_samples=24"),
}
_RUNS: dict[str, Path] = {}
NO_VALIDATION = ("--trainer.limit_val_batches", "0")
"""For the fits below: an export reads the trained model of ``last.ckpt``, which validation (renders of the
val views, the best checkpoint) does not change; nothing here looks at what it computes."""


def _run(name: str, scene: Path, factory: pytest.TempPathFactory) -> Path:
    """The run directory of a 3-step fit with sampler ``name`` (one fit per sampler and session)."""
    if name not in _RUNS:
        out = factory.mktemp(f"run_{name}")
        run_lightning_cli(["fit", *short_run_args(scene, out, *NO_VALIDATION, steps=3,
                                                  sampler_args=SAMPLERS[name])])
        _RUNS[name] = out / RUN
    return _RUNS[name]


def _ckpt(run: Path) -> Path:
    return run / "checkpoints" / "last.ckpt"


VERIFIED_IN_A_FRESH_PROCESS = "OccupancyGrid"
"""The sampler whose export ``--verify`` renders in a fresh torch-only process (``nerf-lightning export``
does the same for every sampler; a tampered program fails it, below). Each sampler's program is
compared with ``render_image`` in this process, more tightly than the verify's 0.1 dB, and shown to
hold nothing of the package."""
_EXPORTED: dict[str, Path] = {}
"""sampler -> its run's ``export --format pt2`` (``tiny_run`` for OccupancyGrid), once per session: the
tampered-program test below edits a copy of :data:`TAMPERED`'s."""


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SAMPLERS))
def test_pt2_export_verifies_against_the_checkpoint(name: str, tiny_scene: Path, tmp_path: Path,
                                                    tmp_path_factory: pytest.TempPathFactory,
                                                    request: pytest.FixtureRequest,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    if name == "Disparity":
        disparity = pytest.importorskip("nerf_lightning_disparity")
        assert hasattr(disparity.Disparity, "standalone"), f"an old Disparity: {disparity.__file__}"
    # OccupancyGrid's 3-step fit is tiny_run's (the same arguments, validation aside)
    run = request.getfixturevalue("tiny_run") if name == "OccupancyGrid" else _run(name, tiny_scene,
                                                                                   tmp_path_factory)
    out = tmp_path / "scene.pt2"
    verify = ["--verify"] if name == VERIFIED_IN_A_FRESH_PROCESS else []
    code = main(["export", "--ckpt_path", str(_ckpt(run)), "--format", "pt2", "--out", str(out), *verify])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    lines = [line for line in printed.out.splitlines() if line.startswith("verify:")]
    print("\n".join(lines))
    if verify:
        assert len(lines) == 3 and lines[-1].endswith("OK") and "no nerf_lightning imported" in lines[1]
        assert abs(float(lines[-1].split("difference ")[1].split(" dB")[0])) <= 0.1
    else:
        assert lines == []
    assert "note:" not in printed.out  # the sampler is exported as itself, nothing stands in for it
    assert sorted(path.name for path in tmp_path.iterdir()) == ["scene.pt2"]
    _EXPORTED.setdefault(name, out)
    renderer, info = load_pt2(out)  # one load (seconds): the graph and the renders below are this module's
    # Only aten operations: a fresh process needs no nerf_lightning to run it.
    graph = renderer.code  # the program's graph, its weights as attributes: the same operations
    assert "torch.ops.aten." in graph and "nerf_lightning" not in graph

    # In this process too: the program renders a test view as render_image does, for any ray count.
    model, datamodule = load_trained(_ckpt(run), run_config_path(_ckpt(run)))
    assert type(model.sampler).__name__ == name
    assert info["sampler"] == name and info["field"] == "HashGridField" and info["program"] == "torch.export"
    assert info["checkpoint"] == str(_ckpt(run)) and info["chunk_rays"] == model.eval_chunk_rays
    assert info["background"] == pytest.approx(list(datamodule.background))
    if name == "OccupancyGrid":
        assert info["sampler_module"] == "OccupancyMarcher" and info["field_module"] == "HashGridRadiance"
        assert "nonzero" in graph  # the marching's data-dependent sample count, traced as such
    batch = datamodule.image_batch("test", 0, torch.device("cpu"))
    image = model.render_image(batch)
    rays = batch.rays
    with torch.no_grad():
        rgb, depth, opacity = renderer(rays.origins, rays.directions, rays.near, rays.far, batch.background)
        height, width = batch.image_size
        assert float((rgb.reshape(height, width, 3) - image.rgb).abs().max()) < 1e-5
        assert torch.allclose(opacity.reshape(height, width, 1), image.opacity, atol=1e-5)
        assert torch.allclose(depth.reshape(height, width, 1), image.depth, atol=1e-4)
        assert abs(image_psnr(rgb.reshape(height, width, 3), image.target) -
                   image_psnr(image.rgb, image.target)) < 0.1
        for count in (0, 1, 7):  # the example traced had 16 rays
            part = renderer(rays.origins[:count], rays.directions[:count], rays.near[:count],
                            rays.far[:count], batch.background)
            assert [tuple(t.shape) for t in part] == [(count, 3), (count,), (count,)]
            assert torch.allclose(part[0], rgb[:count], atol=1e-6)


WEIGHTS_CONFIG = "data/weights/model_weights_config.json"
"""The entry of a ``.pt2`` archive (a zip) that names the entry holding each weight's raw bytes."""


def _scale_stored_weight(path: Path, name: str, factor: float) -> None:
    """Multiply the float32 weight ``name`` of the ``.pt2`` file ``path`` by ``factor`` in the file itself.

    The archive stores each weight as raw little-endian bytes in an entry :data:`WEIGHTS_CONFIG` names
    (torch 2.13's format; another layout fails here, by name). Changing those bytes is tampering with
    the file, and spares loading the program (seconds) and saving it again (seconds)."""
    with zipfile.ZipFile(path) as archive:
        entries = [(info, archive.read(info)) for info in archive.infolist()]
    [(config_path, config)] = [(info.filename, json.loads(data)["config"]) for info, data in entries
                               if info.filename.endswith(f"/{WEIGHTS_CONFIG}")]
    stored = config[name]
    count = math.prod(size["as_int"] for size in stored["tensor_meta"]["sizes"])
    target = config_path.removesuffix(WEIGHTS_CONFIG) + f"data/weights/{stored['path_name']}"
    changed = 0
    with zipfile.ZipFile(path, "w") as archive:
        for info, data in entries:
            if info.filename == target:
                values = np.frombuffer(data, dtype="<f4")
                assert not stored["use_pickle"] and values.size == count > 0, (name, stored)
                data = (values * np.float32(factor)).astype("<f4").tobytes()
                changed += 1
            archive.writestr(info, data)
    assert changed == 1, f"{target}: not in {path}"


TAMPERED = "Uniform"
"""The sampler whose program is tampered with: the smallest graph of the five, so the fresh process that
loads and renders it (a ``.pt2`` load takes seconds, longer the larger the graph) is the shortest."""


@pytest.mark.slow
def test_a_tampered_pt2_fails_verification(tiny_scene: Path, tmp_path: Path,
                                           tmp_path_factory: pytest.TempPathFactory,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A program whose colour MLP's output layer is scaled in the file fails ``--verify-only`` in one line
    naming both PSNRs (the fresh process loaded and rendered it: it is not a load failure)."""
    run = _run(TAMPERED, tiny_scene, tmp_path_factory)
    out = tmp_path / "scene.pt2"
    if TAMPERED in _EXPORTED:  # the run's export, made by the test above
        shutil.copy(_EXPORTED[TAMPERED], out)
    else:
        assert main(["export", "--ckpt_path", str(_ckpt(run)), "--format", "pt2", "--out", str(out)]) == 0
    _scale_stored_weight(out, "renderer.field.color_mlp.4.weight", 20.0)  # the colour MLP's output layer
    capsys.readouterr()
    assert main(["export", "--ckpt_path", str(_ckpt(run)), "--format", "pt2", "--out", str(out),
                 "--verify-only"]) == 1
    err = capsys.readouterr().err.strip()
    print(err)
    assert len(err.splitlines()) == 1
    assert err.startswith("nerf-lightning export: verify failed: standalone module ")
    assert "vs checkpoint" in err and "allowed ±0.1 dB" in err


@pytest.mark.slow
@pytest.mark.parametrize("file_format", ["pt2", "torchscript"])
def test_a_sampler_without_the_hook_is_refused_by_name_and_nothing_is_written(
    file_format: str, tiny_scene: Path, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    class_path = f"{NoStandalone.__module__}.NoStandalone"
    if "NoStandalone" not in _RUNS:
        out = tmp_path_factory.mktemp("run_NoStandalone")
        run_lightning_cli(["fit", *short_run_args(tiny_scene, out, *NO_VALIDATION, steps=2,
                                                  sampler_args=(f"--model.sampler={class_path}",))])
        _RUNS["NoStandalone"] = out / RUN
    ckpt = _ckpt(_RUNS["NoStandalone"])
    exports = tmp_path / "exports"
    exports.mkdir()
    suffix = ".pt2" if file_format == "pt2" else ".pt"
    capsys.readouterr()
    code = main(["export", "--ckpt_path", str(ckpt), "--format", file_format, "--out",
                 str(exports / f"scene{suffix}"), "--verify"])
    err = capsys.readouterr().err.strip()
    print(err)
    assert code == 2
    assert err == (f"nerf-lightning export: sampler 'NoStandalone' ({class_path}) has no standalone() hook; "
                   "see docs/writing-a-sampler.md#export")
    assert list(exports.iterdir()) == []


def test_a_field_without_the_hook_is_refused_by_name(tmp_path: Path) -> None:
    model = NerfModule(field=NoStandaloneField(), sampler=Uniform(num_samples=4)).eval()
    with pytest.raises(ExportError) as caught:
        export_pt2(model, (1.0, 1.0, 1.0), tmp_path / "m.pt2")
    message = str(caught.value)
    assert message == (f"field 'NoStandaloneField' ({NoStandaloneField.__module__}.NoStandaloneField) has no "
                       "standalone() hook; see docs/writing-a-sampler.md#export")
    assert list(tmp_path.iterdir()) == []


def test_a_hook_that_returns_none_is_named_too() -> None:
    class Declines(Uniform):
        def standalone(self, field: torch.nn.Module) -> None:
            return None

    model = NerfModule(field=HashGridField(num_levels=2, log2_hashmap_size=8, max_resolution=32),
                       sampler=Declines()).eval()
    with pytest.raises(ExportError, match=r"sampler 'Declines' \(.*Declines\) cannot be exported: its "
                                          r"standalone\(\) hook returned None"):
        build_standalone(model, (1.0, 1.0, 1.0))
