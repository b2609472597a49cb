"""The command layer: every subcommand answers --help and --print_config, and a printed config runs
unchanged with --config. (The import rules: tests/test_architecture.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nerf_lightning.cli import main
from nerf_lightning.commands import MODULES, commands
from nerf_lightning.pipeline.config import check, pipeline_parser
from tests.helpers.datasets import colmap_capture
from tests.helpers.runs import DEMO_CONFIG, printed_and_exited

PACKAGE = Path(__file__).resolve().parents[2] / "nerf_lightning"
ALL = [command.name for word in MODULES for command in commands(word)]


def _printed(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    return printed_and_exited([*args, "--print_config"], capsys)


def _round_trip(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, dict]:
    """``args --print_config`` into a file; that file printed again gives the same config."""
    name = args[0] if args[0] != "data" else f"data-{args[1]}"
    printed = _printed(args, capsys)
    config = tmp_path / f"{name}.yaml"
    config.write_text(printed)
    words = args[:2] if args[0] == "data" else args[:1]
    assert _printed([*words, "--config", str(config)], capsys) == printed
    return config, yaml.safe_load(printed)


@pytest.mark.parametrize("name", ALL)
def test_every_command_lists_its_options(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([*name.split(), "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert f"nerf-lightning {name}" in out and "--config" in out and "--print_config" in out
    if name in ("render", "export"):
        assert "--model.learning_rate" in out and "--data.root" in out and "--ckpt_path" in out
    if name == "pipeline":
        assert "--fit.args" in out and "--render.frames" in out and "--retries" in out


def test_data_commands_run_from_their_printed_config(tiny_scene: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    config, values = _round_trip(["data", "validate", str(tiny_scene), "--downscale", "2"], tmp_path, capsys)
    assert values["directory"] == str(tiny_scene) and values["downscale"] == 2
    assert main(["data", "validate", str(tiny_scene), "--downscale", "2"]) == 0
    direct = capsys.readouterr().out
    assert main(["data", "validate", "--config", str(config)]) == 0
    assert capsys.readouterr().out == direct

    cache = ["data", "cache", str(tiny_scene), "--cache_dir", str(tmp_path / "cache"), "--splits", "[train]"]
    config, values = _round_trip(cache, tmp_path, capsys)
    assert values["splits"] == ["train"]
    assert main(["data", "cache", "--config", str(config), "--result_file", str(tmp_path / "r.json")]) == 0
    assert list(yaml.safe_load((tmp_path / "r.json").read_text())["splits"]) == ["train"]

    demo = tmp_path / "demo"
    config, _ = _round_trip(["data", "make-demo", str(demo), "--resolution", "8"], tmp_path, capsys)
    assert main(["data", "make-demo", "--config", str(config)]) == 0
    assert (demo / "transforms_test.json").is_file()


def test_convert_runs_from_its_printed_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = colmap_capture(tmp_path / "capture", ["PINHOLE"], binary=True)
    config, values = _round_trip(["data", "convert", str(root), str(tmp_path / "out")], tmp_path, capsys)
    assert values["source"] == str(root) and values["copy"] is False
    assert main(["data", "convert", "--config", str(config)]) == 0
    assert (tmp_path / "out" / "transforms.json").is_file()


@pytest.mark.slow
def test_compare_runs_from_its_printed_config(tiny_run: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    config, _ = _round_trip(["compare", str(tiny_run), str(tiny_run)], tmp_path, capsys)
    assert main(["compare", str(tiny_run), str(tiny_run)]) == 0
    direct = capsys.readouterr().out
    assert main(["compare", "--config", str(config)]) == 0
    assert capsys.readouterr().out == direct


@pytest.mark.slow
def test_render_and_export_print_the_run_they_load(tiny_run: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = str(tiny_run / "checkpoints" / "last.ckpt")
    run_config = yaml.safe_load((tiny_run / "config.yaml").read_text())
    video = tmp_path / "v.gif"
    config, values = _round_trip(["render", "--ckpt_path", ckpt, "--out", str(video), "--frames", "2",
                                  "--model.eval_chunk_rays", "512"], tmp_path, capsys)
    # The run's model and data, with the override on top: what the command will build.
    assert values["model"]["eval_chunk_rays"] == 512
    assert values["model"]["sampler"] == run_config["model"]["sampler"]
    assert values["data"]["root"] == run_config["data"]["root"]
    assert main(["render", "--config", str(config), "--result_file", str(tmp_path / "r.json")]) == 0
    assert video.is_file() and yaml.safe_load((tmp_path / "r.json").read_text())["frames"] == 2

    grid = tmp_path / "g.npz"
    config, _ = _round_trip(["export", "--ckpt_path", ckpt, "--format", "grid", "--out", str(grid),
                             "--resolution", "8"], tmp_path, capsys)
    assert main(["export", "--config", str(config)]) == 0 and grid.is_file()


@pytest.mark.slow
def test_a_checkpoint_outside_its_run_renders_from_its_hyperparameters(
        tiny_run: Path, tiny_scene: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lone = tmp_path / "lone.ckpt"
    lone.write_bytes((tiny_run / "checkpoints" / "last.ckpt").read_bytes())
    args = ["render", "--ckpt_path", str(lone), "--data.root", str(tiny_scene),
            "--out", str(tmp_path / "v.gif"), "--frames", "2"]
    values = yaml.safe_load(_printed(args, capsys))
    run_config = yaml.safe_load((tiny_run / "config.yaml").read_text())
    sampler = values["model"]["sampler"]  # from the checkpoint
    assert sampler["class_path"].endswith("OccupancyGrid")
    assert sampler["init_args"] == run_config["model"]["sampler"]["init_args"]
    assert main(args) == 0 and (tmp_path / "v.gif").is_file()


def test_pipeline_file_round_trips_with_overrides(tiny_scene: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({"work_dir": str(tmp_path / "work"), "data": {"root": str(tiny_scene)},
                                    "fit": {"config": str(DEMO_CONFIG), "args": ["--trainer.max_steps", 3]},
                                    "render": {"frames": 3, "out": "o.gif"}}))
    config, values = _round_trip(["pipeline", "--config", str(path), "--retries", "2", "--render.fps", "12"],
                                 tmp_path, capsys)
    assert values["retries"] == 2 and values["render"]["fps"] == 12 and values["render"]["frames"] == 3
    options = pipeline_parser().parse_args(["--config", str(config)]).as_dict()
    parsed = check(options, path, export_available=True)
    assert parsed.retries == 2 and parsed.render["fps"] == 12
    assert parsed.fit_args == ("--trainer.max_steps", "3")
    assert parsed.work_dir == tmp_path / "work"


@pytest.mark.slow
def test_data_commands_run_without_importing_lightning(tiny_scene: Path, tmp_path: Path) -> None:
    """'data validate' and 'data cache' are pipeline stages, each a fresh process: importing Lightning
    would add seconds to each. Checked in a fresh interpreter, as the pipeline starts them."""
    cache = tmp_path / "cache"
    code = (
        "import sys\n"
        "from nerf_lightning.cli import main\n"
        f"assert main(['data', 'validate', {str(tiny_scene)!r}]) == 0\n"
        f"assert main(['data', 'cache', {str(tiny_scene)!r}, '--cache_dir', {str(cache)!r}]) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
