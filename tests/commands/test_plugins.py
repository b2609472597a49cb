"""Sampler discovery through real entry points of pip-installed distributions."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from nerf_lightning.samplers import ENTRY_POINT_GROUP, OccupancyGrid, Uniform, load_sampler_plugins

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_builtin_samplers_are_registered_like_third_party_ones() -> None:
    names = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    assert names["Uniform"].dist is not None and names["Uniform"].dist.name == "nerf-lightning"
    plugins = load_sampler_plugins()
    assert plugins["Uniform"].sampler_class is Uniform
    assert plugins["OccupancyGrid"].sampler_class is OccupancyGrid
    for plugin in plugins.values():
        plugin.sampler_class()  # every sampler is constructible with no arguments


def test_every_name_of_the_documented_plugin_api_exists() -> None:
    """docs/samplers.md lists the public API once, as table rows ``| `module` | `name`, ... | for |``."""
    text = (DOCS / "samplers.md").read_text()
    section = text.split("## Public API for plugin authors", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]
    names = {}
    for module_cell, names_cell in rows:
        module = importlib.import_module(module_cell.strip().strip("`"))
        for name in re.findall(r"`([^`]+)`", names_cell):
            assert hasattr(module, name), f"docs/samplers.md lists {module.__name__}.{name}: no such name"
            names[f"{module.__name__}.{name}"] = getattr(module, name)
    for expected in ("samplers.Sampler", "types.PackedSamples", "rendering.packed.render_weights",
                     "testing.check_sampler"):  # the table was found and read
        assert f"nerf_lightning.{expected}" in names
    for public in ("nerf_lightning.samplers.toolkit", "nerf_lightning.testing"):  # all of them, nothing more
        listed = {name.rpartition(".")[2] for name in names if name.rpartition(".")[0] == public}
        assert listed == set(importlib.import_module(public).__all__), public
    writing = (DOCS / "writing-a-sampler.md").read_text()
    assert "samplers.md#public-api-for-plugin-authors" in writing  # one list, linked, not repeated


def _pip_install_broken_plugin(tmp_path: Path) -> Path:
    package = tmp_path / "broken-plugin"
    (package / "broken_sampler").mkdir(parents=True)
    (package / "broken_sampler" / "__init__.py").write_text(
        "raise ImportError('this plugin needs a package that is not installed')\n"
    )
    (package / "pyproject.toml").write_text(
        textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "broken-sampler-plugin"
        version = "0.0.1"

        [project.entry-points."nerf_lightning.samplers"]
        Broken = "broken_sampler:BrokenSampler"
        """)
    )
    site = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(package),
        ],
        check=True,
        capture_output=True,
    )
    return site


@pytest.mark.slow
def test_broken_plugin_warns_and_the_cli_goes_on(tmp_path: Path) -> None:
    site = _pip_install_broken_plugin(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "nerf_lightning", "fit", "--model.sampler.help", "Uniform"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "sampler plugin 'Broken'" in result.stderr
    assert "this plugin needs a package that is not installed" in result.stderr
    assert "--model.sampler.num_samples" in result.stdout  # the CLI went on
