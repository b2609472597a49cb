"""Packaging: the wheel holds every module and the configs, and ``--config NAME`` finds a shipped
config from any directory (fit/validate/test/predict and the pipeline file's ``fit.config``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from nerf_lightning.cli import main
from nerf_lightning.config.lookup import (
    ConfigNotFoundError,
    resolve_config,
    resolve_config_args,
    shipped_config_names,
)
from nerf_lightning.pipeline import load_pipeline_config

REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted(path.name for path in (REPO / "configs").glob("*.yaml"))
SHIPPED = "blender, ddp, demo, llff, nerfstudio, pipeline-demo, real, real-forward"


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty current directory: no configs/ folder to point at."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def test_bare_names_are_the_shipped_configs(elsewhere: Path) -> None:
    assert sorted(f"{name}.yaml" for name in shipped_config_names()) == CONFIGS
    assert ", ".join(shipped_config_names()) == SHIPPED
    for name in ("blender", "blender.yaml"):
        found = resolve_config(name)
        assert found.is_absolute() and found.name == "blender.yaml"
        assert found.read_bytes() == (REPO / "configs" / "blender.yaml").read_bytes()
    pipeline_demo = REPO / "configs" / "pipeline-demo.yaml"
    assert resolve_config("pipeline-demo").read_bytes() == pipeline_demo.read_bytes()


def test_a_file_here_wins_and_other_values_pass_through(elsewhere: Path) -> None:
    Path("demo.yaml").write_text("seed_everything: 1\n")
    assert resolve_config("demo.yaml") == Path("demo.yaml")  # the user's file, as given
    shipped_demo = resolve_config("demo")  # no file 'demo' here: the shipped demo.yaml, not this one
    assert shipped_demo.is_absolute()
    assert shipped_demo.read_bytes() == (REPO / "configs" / "demo.yaml").read_bytes()
    assert resolve_config("configs/blender.yaml") == Path("configs/blender.yaml")  # a path: its reader says
    inline = "{trainer: {max_steps: 5}}"  # jsonargparse also takes the config itself
    assert resolve_config(inline) == Path(inline)
    with pytest.raises(ConfigNotFoundError, match=rf"^dmeo: no such file, .* \(shipped: {SHIPPED}\)$"):
        resolve_config("dmeo")
    with pytest.raises(ConfigNotFoundError):  # too long for a file name: not an OSError
        resolve_config("x" * 300)


def test_command_lines_get_the_shipped_files_only_where_config_means_one(elsewhere: Path) -> None:
    Path("mine.yaml").write_text("seed_everything: 1\n")
    demo, ddp = resolve_config("demo"), resolve_config("ddp")
    args = ["--config", "demo", "--config=ddp.yaml", "--config", "mine.yaml", "--config", "{a: x//y}",
            "--trainer.max_steps", "3"]
    expected = ["--config", str(demo), f"--config={ddp}", "--config", "mine.yaml", "--config", "{a: x//y}",
                "--trainer.max_steps", "3"]
    for command in ("fit", "validate", "test", "predict"):
        assert resolve_config_args([command, *args]) == [command, *expected]
    assert resolve_config_args(["pipeline", "--config", "pipeline-demo"]) == [
        "pipeline", "--config", str(resolve_config("pipeline-demo"))]
    others = (["render", "--config", "demo"], ["export", "--config=demo"], ["data", "validate", "demo"], [])
    for other in others:  # render and export read a run's config: left to them
        assert resolve_config_args(other) == other


def test_an_unknown_name_is_one_line_listing_the_shipped_ones(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for command in ("fit", "pipeline"):
        assert main([command, "--config", "dmeo"]) == 2
        assert capsys.readouterr().err.splitlines() == [
            "nerf-lightning: --config dmeo: no such file, and no config of that name ships with "
            f"nerf-lightning (shipped: {SHIPPED})"]


def test_the_shipped_pipeline_file_names_the_shipped_fit_config(elsewhere: Path) -> None:
    config = load_pipeline_config(resolve_config("pipeline-demo"), export_available=False)
    assert config.fit_config == resolve_config("demo")
    assert config.work_dir == elsewhere / "runs" / "pipeline-demo"
    assert config.data.root == elsewhere / "data" / "demo" and config.data.make_demo


@pytest.mark.slow  # LightningCLI parses the whole config
def test_fit_print_config_with_a_shipped_name_from_an_empty_directory(
    elsewhere: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["fit", "--config", "demo", "--print_config"])
    assert done.value.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["data"]["root"] == "data/demo"  # relative to the current directory, as written
    assert printed["model"]["sampler"]["class_path"] == "nerf_lightning.samplers.OccupancyGrid"
    assert printed["trainer"]["max_time"] == "00:00:03:00"
    assert list(elsewhere.iterdir()) == []  # printing the config writes nothing


def _source_copy(destination: Path) -> Path:
    """What a wheel is built from, copied so the build leaves nothing (build/, egg-info) in the checkout
    and no stale build/ folder of the checkout can leak into the wheel."""
    destination.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, destination / name)
    for folder in ("nerf_lightning", "configs"):
        shutil.copytree(REPO / folder, destination / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return destination


@pytest.mark.slow
def test_the_wheel_holds_every_module_and_the_configs(tmp_path: Path) -> None:
    source = _source_copy(tmp_path / "source")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir",
         "--quiet", "--wheel-dir", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = (tmp_path / "dist").glob("nerf_lightning-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = (archive.read(name).decode() for name in names if name.endswith(".dist-info/METADATA"))
    modules = {f"nerf_lightning/{path.relative_to(REPO / 'nerf_lightning').as_posix()}"
               for path in (REPO / "nerf_lightning").rglob("*.py") if "__pycache__" not in path.parts}
    missing = sorted(modules - names)
    assert not missing, f"not in the wheel (list the package in pyproject's [tool.setuptools]): {missing}"
    assert {f"nerf_lightning/configs/{name}" for name in CONFIGS} <= names
    assert not [name for name in names if name.startswith("configs/")]  # no top-level 'configs' package
    assert "Requires-Python: >=3.11" in metadata.splitlines()
    assert re.search(r"^Requires-Dist: pyyaml>=6\.0$", metadata, flags=re.MULTILINE), metadata
