"""``max_resolution: auto``: the hash grid's finest level sized to the training pixels' footprint, from the
data module's cameras, kept by checkpoints whatever data they are later tested on."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from nerf_lightning.cli import run_lightning_cli
from nerf_lightning.core.types import SceneBox
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.fields import HashGridField
from nerf_lightning.system.module import NerfModule
from tests.helpers.runs import RUN, short_run_args

GRID = {"num_levels": 4, "log2_hashmap_size": 12, "base_resolution": 4, "hidden_dim": 16}


def finest(field: HashGridField) -> int:
    return int(field.encoding.resolutions[-1])


def auto_field(**kwargs: object) -> HashGridField:
    torch.manual_seed(0)
    field = HashGridField(**GRID, max_resolution="auto", **kwargs)
    field.set_scene_box(SceneBox.cube(1.5))
    return field


def test_the_finest_level_follows_the_footprint_and_the_contraction() -> None:
    """Half the footprint, twice the cells; a contracted grid, whose box takes half of it, twice again."""
    widths = {}
    for footprint in (0.03, 0.015):
        field = auto_field()
        field.set_pixel_footprint(footprint)
        widths[footprint] = finest(field)
    assert widths[0.03] == pytest.approx(1.25 * 3.0 / 0.03, abs=1)  # 1.25 cells per footprint across 3 units
    assert widths[0.015] == pytest.approx(2 * widths[0.03], abs=2)
    contracted = auto_field(contraction="linf")
    contracted.set_pixel_footprint(0.03)
    assert finest(contracted) == pytest.approx(2 * widths[0.03], abs=2)
    coarser = auto_field(cells_per_footprint=0.5)
    coarser.set_pixel_footprint(0.03)
    assert finest(coarser) == pytest.approx(0.4 * widths[0.03], abs=1)


def test_a_fixed_resolution_ignores_the_footprint() -> None:
    torch.manual_seed(0)
    field = HashGridField(**GRID, max_resolution=64)
    field.set_scene_box(SceneBox.cube(1.5))
    before = field.encoding.table
    field.set_pixel_footprint(0.001)
    assert finest(field) == 63 and field.encoding.table is before  # floor(4 * 16 ** (3/3)) rounding
    assert "finest_resolution" not in field.state_dict()  # checkpoints of fixed grids are unchanged


def test_a_state_dict_rebuilds_the_grid_it_was_sized_to() -> None:
    """A field that was never told a footprint (a checkpoint loaded for test or export) takes the saved
    grid and computes what the saved field computed, bit for bit."""
    trained = auto_field()
    trained.set_pixel_footprint(0.05)
    with torch.no_grad():
        trained.encoding.table.uniform_(-1.0, 1.0)
    fresh = auto_field()
    assert finest(fresh) != finest(trained)
    fresh.load_state_dict(trained.state_dict())
    assert finest(fresh) == finest(trained) and int(fresh.finest_resolution) == 75  # 1.25 * 3 / 0.05
    points = torch.rand(64, 3) * 3.0 - 1.5
    directions = torch.nn.functional.normalize(torch.randn(64, 3), dim=-1)
    for ours, theirs in zip(fresh(points, directions), trained(points, directions), strict=True):
        assert torch.equal(ours, theirs)


def test_bad_settings_are_one_line_naming_the_option() -> None:
    with pytest.raises(ValueError, match="max_resolution must be a positive number of cells or 'auto'"):
        HashGridField(max_resolution="fine")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cells_per_footprint must be > 0"):
        HashGridField(max_resolution="auto", cells_per_footprint=0.0)


def test_the_footprint_scales_with_the_image_size(tmp_path: Path) -> None:
    """The same scene at twice the pixels: each pixel half as wide at the content."""
    footprints = []
    for resolution in (16, 32):
        root = make_demo_scene(tmp_path / str(resolution), num_train=4, num_val=1, num_test=1,
                               resolution=resolution)
        data = NerfDataModule(root=str(root), cache=False)
        data.setup("fit")
        footprints.append(data.pixel_footprint)
    assert footprints[0] == pytest.approx(2 * footprints[1], rel=1e-4)
    # Blender's convention: cameras 4 units from the centre, 40 degrees across the image.
    assert footprints[1] == pytest.approx(4.0 * 2 * torch.tan(torch.tensor(0.3491)).item() / 32, rel=0.05)


@pytest.mark.slow
def test_a_fit_sizes_the_grid_from_its_data_and_its_checkpoint_keeps_it(tiny_scene: Path,
                                                                        tmp_path: Path) -> None:
    run_lightning_cli(["fit", *short_run_args(tiny_scene, tmp_path, "--model.field.max_resolution", "auto",
                                              steps=2)])
    data = NerfDataModule(root=str(tiny_scene), cache=False)
    data.setup("fit")
    assert data.scene_box is not None and data.pixel_footprint is not None
    side = float((data.scene_box.upper - data.scene_box.lower).max())
    model = NerfModule.load_from_checkpoint(tmp_path / RUN / "checkpoints" / "last.ckpt")
    assert isinstance(model.field, HashGridField)
    assert int(model.field.finest_resolution) == round(1.25 * side / data.pixel_footprint)
    assert finest(model.field) == pytest.approx(1.25 * side / data.pixel_footprint, abs=2)
