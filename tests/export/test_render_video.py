"""``nerf-lightning render``: novel-view videos from a tiny trained checkpoint."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image, ImageSequence

from nerf_lightning.cli import main
from nerf_lightning.export.render_video import describe_seconds, estimate_line

pytestmark = pytest.mark.slow  # the tests render the checkpoint of a real training run (tiny_run)


def _gif_frames(path: Path) -> list[Image.Image]:
    with Image.open(path) as gif:
        return [frame.convert("RGB") for frame in ImageSequence.Iterator(gif)]


def _render(run: Path, out: Path, *extra: str) -> int:
    return main(["render", "--ckpt_path", str(run / "checkpoints" / "last.ckpt"), "--out", str(out), *extra])


@pytest.mark.parametrize(("extra", "size"),
                         [((), (24, 24)), (("--camera-path", "orbit", "--depth"), (48, 24))])
def test_orbit_gif_has_the_frames_and_size(tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           extra: tuple[str, ...], size: tuple[int, int]) -> None:
    out = tmp_path / "orbit.gif"
    assert _render(tiny_run, out, "--frames", "3", *extra) == 0
    frames = _gif_frames(out)
    assert len(frames) == 3 and all(frame.size == size for frame in frames)
    assert not [path for path in tmp_path.iterdir() if path.name != "orbit.gif"]  # no temporary left
    err = capsys.readouterr().err
    # Before the other frames: what they will take, from the first one (timed, so only its form is known).
    estimate = r"^render: 3 frames at 24x24, about \S+ s at \S+ s per frame \(first frame\)$"
    assert re.search(estimate, err, re.M), err
    chose = "render: camera path orbit, for a 360 capture: the training cameras look up to"
    assert (chose in err) == (not extra), err  # the demo scene's cameras surround it: auto is the orbit


def test_the_estimate_line_reads_in_hours_and_names_the_shorter_options() -> None:
    line = estimate_line(120, 504, 378, 36.0, "--frames or --data.downscale")
    assert line == ("render: 120 frames at 504x378, about 1 h 12 min at 36 s per frame (first frame); "
                    "--frames or --data.downscale make it shorter")
    quick = estimate_line(3, 24, 24, 0.05, "--frames")  # under a minute: nothing to shorten
    assert quick == "render: 3 frames at 24x24, about 0.15 s at 0.05 s per frame (first frame)"
    seconds = (0.31, 12.4, 250.0, 3600.0)
    assert [describe_seconds(s) for s in seconds] == ["0.31 s", "12 s", "4 min 10 s", "1 h"]


def test_test_path_gif_with_explicit_config_and_data_override(tiny_run: Path, tiny_scene: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "test.gif"
    code = _render(tiny_run, out, "--camera-path", "test", "--run_config", str(tiny_run), "--fps", "5",
                   "--data.root", str(tiny_scene))
    assert code == 0 and len(_gif_frames(out)) == 2  # the tiny scene's two test views


def test_spiral_mp4_decodes_to_its_frames(tiny_run: Path, tmp_path: Path) -> None:
    imageio_ffmpeg = pytest.importorskip("imageio_ffmpeg")
    out = tmp_path / "spiral.mp4"
    assert _render(tiny_run, out, "--camera-path", "spiral", "--frames", "3", "--depth") == 0
    reader = imageio_ffmpeg.read_frames(str(out))
    meta = next(reader)
    assert tuple(meta["size"]) == (48, 24) and sum(1 for _ in reader) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ckpt_path", "missing.ckpt", "--out", "v.gif"], "missing.ckpt: no such checkpoint"),
        (["--camera-path", "zoom", "--out", "v.gif"], "unknown camera path 'zoom'"),
        (["--out", "v.avi"], "unknown video type (.avi); expected .mp4 or .gif"),
        (["--out", "v.gif", "--trainer.max_steps", "3"], "unrecognized arguments: --trainer.max_steps"),
        (["--out", "v.gif", "--data.nope", "1"], "--data.nope"),
    ],
)
def test_bad_arguments_are_one_line_errors(tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           args: list[str], message: str) -> None:
    ckpt = ["--ckpt_path", str(tiny_run / "checkpoints" / "last.ckpt")]
    args = [arg if not arg.startswith(("v.", "missing")) else str(tmp_path / arg) for arg in args]
    code = main(["render", *([] if "--ckpt_path" in args else ckpt), *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert err.startswith("nerf-lightning")
    assert not list(tmp_path.iterdir())


def test_a_checkpoint_outside_a_run_needs_a_config(tiny_run: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    lone = tmp_path / "lone.ckpt"
    lone.write_bytes((tiny_run / "checkpoints" / "last.ckpt").read_bytes())
    assert main(["render", "--ckpt_path", str(lone), "--out", str(tmp_path / "v.gif")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pass --run_config RUN_DIR/config.yaml" in err
    assert main(["render", "--ckpt_path", str(lone), "--run_config", str(tiny_run / "config.yaml"),
                 "--out", str(tmp_path / "v.gif"), "--frames", "2"]) == 0
