"""``nerf-lightning data make-demo``: the demo scene by default, a suite scene with ``--scene``, an unknown
name as one line and exit code 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nerf_lightning.cli import main
from nerf_lightning.datasets.demo_scene import make_demo_scene
from nerf_lightning.datasets.scene_suite import SUITE


def _bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_default_is_the_demo_scene(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "make-demo", str(tmp_path / "demo"), "--resolution", "8", "--seed", "2"]) == 0
    assert capsys.readouterr().out == f"demo scene written to {tmp_path / 'demo'}\n"
    assert _bytes(tmp_path / "demo") == _bytes(make_demo_scene(tmp_path / "direct", seed=2, resolution=8))


def test_a_suite_scene_is_written_and_validates(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, result = tmp_path / "forward", tmp_path / "result.json"
    assert main(["data", "make-demo", str(out), "--scene", "forward", "--resolution", "16",
                 "--result_file", str(result)]) == 0
    assert capsys.readouterr().out == f"forward scene written to {out}\n"
    expected = {"command": "data make-demo", "directory": str(out), "scene": "forward"}
    assert json.loads(result.read_text()) == expected
    assert (out / "poses_bounds.npy").is_file()
    assert main(["data", "validate", str(out)]) == 0
    assert "OK" in capsys.readouterr().out


def test_an_unknown_scene_is_one_line_listing_the_names(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["data", "make-demo", str(tmp_path / "x"), "--scene", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"nerf-lightning data make-demo: --scene: expected one of {', '.join(SUITE)}, got 'nope'"]
    assert not (tmp_path / "x").exists()


def test_the_help_names_every_scene(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["data", "make-demo", "--help"])
    # argparse wraps its lines at hyphens too: a name may be split after one
    help_text = " ".join(capsys.readouterr().out.split()).replace("- ", "-")
    named = set(re.findall(r"[\w-]+", help_text))  # whole names: forward is not found in forward-exposure
    assert set(SUITE) <= named, set(SUITE) - named
