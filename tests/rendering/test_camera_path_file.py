"""Camera-path files in nerfstudio's format: written from keyframes, read back as cameras, refused
with one line when broken; and ``render --camera_path FILE.json`` renders one."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from nerf_lightning.cli import main
from nerf_lightning.rendering.camera_path_file import (
    CameraPathError,
    Keyframe,
    read_camera_path,
    write_camera_path,
)
from nerf_lightning.rendering.camera_paths import look_at


def _keyframes() -> list[Keyframe]:
    eyes = torch.tensor([[4.0, 0.0, 1.0], [0.0, 4.0, 1.0], [-4.0, 0.0, 2.0]])
    poses = look_at(eyes, torch.zeros(3), torch.tensor([0.0, 0.0, 1.0]))
    return [Keyframe(pose, fov, 1.5) for pose, fov in zip(poses, (40.0, 50.0, 60.0), strict=True)]


def test_written_path_reads_back_through_its_keyframes(tmp_path: Path) -> None:
    keyframes = _keyframes()
    path = tmp_path / "paths" / "orbit.json"
    assert write_camera_path(path, keyframes, height=40, fps=10, seconds=1.0) == 10
    document = json.loads(path.read_text())
    assert document["render_height"] == 40 and document["render_width"] == 60
    assert document["camera_type"] == "perspective" and len(document["keyframes"]) == 3
    frame = document["camera_path"][0]
    assert len(frame["camera_to_world"]) == 16 and frame["camera_to_world"][12:] == [0, 0, 0, 1]
    cameras, fps = read_camera_path(path)
    assert fps == 10 and len(cameras) == 10
    assert int(cameras.width[0]) == 60 and int(cameras.height[0]) == 40
    torch.testing.assert_close(cameras.camera_to_world[0], keyframes[0].camera_to_world, atol=1e-5, rtol=0)
    torch.testing.assert_close(cameras.camera_to_world[-1], keyframes[-1].camera_to_world, atol=1e-5, rtol=0)
    assert math.isclose(float(cameras.fy[0]), 20 / math.tan(math.radians(20)), rel_tol=1e-5)
    # Every interpolated pose keeps an orthonormal rotation.
    rotations = cameras.camera_to_world[:, :, :3]
    torch.testing.assert_close(rotations @ rotations.transpose(1, 2), torch.eye(3).expand(10, 3, 3),
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "not a JSON camera path"),
        ('{"render_width": 4, "render_height": 4}', "expected a 'camera_path' list of frames"),
        ('{"render_width": 4, "render_height": 4, "camera_path": [{"camera_to_world": [1, 2], "fov": 50}]}',
         "camera_path[0].camera_to_world: expected 16 numbers"),
        ('{"render_width": 4, "render_height": 4, "camera_path": [{"camera_to_world": '
         '[1,0,0,0, 0,1,0,0, 0,0,1,0, 0,0,0,1], "fov": 190}]}',
         "camera_path[0].fov: expected a vertical field"),
        ('{"render_width": 4, "render_height": 4, "camera_type": "equirectangular", "camera_path": [{}]}',
         "camera_type 'equirectangular' is not supported"),
    ],
)
def test_broken_files_are_one_line_errors(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(CameraPathError) as error:
        read_camera_path(path)
    assert message in str(error.value) and str(path) in str(error.value) and "\n" not in str(error.value)


@pytest.mark.slow
def test_render_turns_a_camera_path_file_into_a_video(tiny_run: Path, tmp_path: Path) -> None:
    from nerf_lightning.runs.trained import load_trained

    _, datamodule = load_trained(tiny_run / "checkpoints" / "last.ckpt", tiny_run / "config.yaml")
    poses = datamodule.splits["train"].cameras.camera_to_world[:2]
    path = tmp_path / "path.json"
    write_camera_path(path, [Keyframe(pose, 40.0, 4 / 3) for pose in poses], height=18, fps=4, seconds=1.5)
    out = tmp_path / "path.gif"
    ckpt = str(tiny_run / "checkpoints" / "last.ckpt")
    assert main(["render", "--ckpt_path", ckpt, "--camera_path", str(path), "--out", str(out)]) == 0
    with Image.open(out) as gif:
        assert gif.size == (24, 18) and gif.n_frames == 6
        assert gif.info["duration"] == 250  # the file's fps
    missing, video = str(tmp_path / "missing.json"), str(tmp_path / "x.gif")
    assert main(["render", "--ckpt_path", ckpt, "--camera_path", missing, "--out", video]) == 2
