"""``data process VIDEO DST``: frames chosen by sharpness, downscaled copies, the pipeline's process stage.

The end-to-end cases film the embedded demo scene: a short camera arc rendered exactly
(:func:`nerf_lightning.datasets.demo_scene.render_views`) in front of a textured dome and floor (the demo
scene's own background is empty, and a plain background gives SIFT nothing to match), encoded as
H.264 with imageio-ffmpeg. They need pycolmap and imageio-ffmpeg.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from nerf_lightning.commands import dispatch
from nerf_lightning.datasets.demo_scene import (
    CAMERA_ANGLE_X,
    CAMERA_DISTANCE,
    camera_directions,
    look_at_origin,
)
from nerf_lightning.datasets.process.downscaled import write_downscaled
from nerf_lightning.datasets.process.video import neighbourhoods, select_sharpest, sharpness
from tests.helpers.runs import DEMO_CONFIG, RUN, run_cli, short_run_args

needs_sfm = pytest.mark.skipif(
    importlib.util.find_spec("pycolmap") is None or importlib.util.find_spec("imageio_ffmpeg") is None,
    reason="pycolmap and imageio-ffmpeg (the 'sfm' and 'video' extras) are needed")


def _no_lightning(args: list[str]) -> None:
    raise AssertionError(f"LightningCLI should not run: {args}")


def _process(*args: str) -> int:
    return dispatch(["data", "process", *args], _no_lightning)


def _texture(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def _blurred(frame: np.ndarray, radius: int) -> np.ndarray:
    """A box blur of ``frame`` (motion blur enough for the Laplacian)."""
    padded = np.pad(frame.astype(np.float64), ((radius, radius), (radius, radius), (0, 0)), mode="edge")
    out = np.zeros(frame.shape)
    for dy in range(2 * radius + 1):
        for dx in range(2 * radius + 1):
            out += padded[dy:dy + frame.shape[0], dx:dx + frame.shape[1]]
    return np.round(out / (2 * radius + 1) ** 2).astype(np.uint8)


# ------------------------------------------------------------------------------------------ units


def test_neighbourhoods_spread_candidates_evenly() -> None:
    groups = neighbourhoods(300, 100)
    assert len(groups) == 100 and all(len(g) == 3 for g in groups)
    assert groups[0][0] == 0 and groups[-1][-1] == 299
    flat = [n for g in groups for n in g]
    assert flat == sorted(set(flat))
    assert neighbourhoods(10, 100) == [[i] for i in range(10)]  # a short video: every frame kept
    assert len(neighbourhoods(1000, 20)) == 20


def test_the_sharpest_frame_of_each_neighbourhood_is_kept() -> None:
    rng = np.random.default_rng(0)
    frames, sharp = [], {1, 5, 6}
    for number in range(9):
        frame = _texture(rng, 48, 64)
        frames.append(frame if number in sharp else _blurred(frame, 1 + number % 2))
    assert sharpness(frames[1]) > 3 * sharpness(frames[0])
    kept = list(select_sharpest(iter(frames), [[0, 1, 2], [3, 4, 5], [6, 7, 8]]))
    assert [k.number for k in kept] == [1, 5, 6]
    assert np.array_equal(kept[0].frame, frames[1])


def test_a_stream_shorter_than_counted_keeps_what_it_read() -> None:
    rng = np.random.default_rng(1)
    frames = [_texture(rng, 8, 8) for _ in range(5)]
    kept = list(select_sharpest(iter(frames), [[0, 2], [4, 6], [8, 10]]))
    assert len(kept) == 2 and kept[0].number in (0, 2)
    assert kept[1].number == 4  # the second group's only frame read; the third never reached


def test_downscaled_copies_have_the_loaders_sizes(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(2)
    for name in ("a.png", "b.jpg"):
        Image.fromarray(_texture(rng, 75, 101)).save(images / name)
    folders = write_downscaled(tmp_path, images, ["a.png", "b.jpg"])
    assert [f.name for f in folders] == ["images_2", "images_4", "images_8"]
    for factor, size in ((2, (50, 37)), (4, (25, 18)), (8, (12, 9))):
        for name in ("a.png", "b.jpg"):
            with Image.open(tmp_path / f"images_{factor}" / name) as copy:
                assert copy.size == size
    with Image.open(images / "a.png") as full, Image.open(tmp_path / "images_4" / "a.png") as copy:
        area = np.asarray(full, dtype=np.float64)[:72, :100].reshape(18, 4, 25, 4, 3).mean((1, 3))
        assert np.abs(np.asarray(copy, dtype=np.float64) - area).max() <= 0.5 + 1e-9  # the loader's filter


@pytest.mark.slow  # imageio-ffmpeg probes the file in a subprocess
def test_an_undecodable_video_is_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("imageio_ffmpeg")
    video = tmp_path / "x.mp4"
    video.write_text("not a video\n")
    capfd.readouterr()
    assert _process(str(video), str(tmp_path / "out")) == 2
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "x.mp4: cannot be decoded as a video" in err[0], err
    assert not (tmp_path / "out").exists()
    (tmp_path / "notes.txt").write_text("hello")
    assert _process(str(tmp_path / "notes.txt"), str(tmp_path / "out")) == 2
    assert "is a file but not a video" in capfd.readouterr().err


def test_a_missing_video_is_no_such_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not "not a folder": the path names nothing at all (a typo, a video not copied yet)."""
    assert _process(str(tmp_path / "clip.mp4"), str(tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"nerf-lightning: dataset error: {tmp_path / 'clip.mp4'}: no such file or folder; "
                   "expected a folder of photos (.jpg, .jpeg, .png) or a video "
                   "(.mp4, .mov, .m4v, .mkv, .avi, .webm)"]
    assert not any(tmp_path.iterdir())


# ------------------------------------------------------------------------------------------ a filmed scene


def _backdrop(texture: np.ndarray, c2w: np.ndarray, width: int, height: int) -> np.ndarray:
    """``[H, W, 3]`` of a textured floor (z = -0.8) inside a textured dome (radius 5.5): depth variety
    that keeps the two-view geometry from looking planar or panoramic."""
    d = camera_directions(width, height, CAMERA_ANGLE_X, np.array([[0.5, 0.5]]))[..., 0]
    d = np.einsum("ij,jhw->ihw", c2w[:3, :3], d)
    o = c2w[:3, 3]
    b = (d * o[:, None, None]).sum(0)
    t_dome = -b + np.sqrt(b * b - (o @ o - 5.5**2))
    with np.errstate(divide="ignore", invalid="ignore"):
        t_floor = np.where(d[2] < 0, (-0.8 - o[2]) / d[2], np.inf)
    p = o[:, None, None] + np.minimum(t_floor, t_dome) * d
    azimuth = np.mod(np.arctan2(p[1], p[0]), 2 * np.pi)
    u = np.where(t_floor < t_dome, p[0] + 30, azimuth * 5.5)
    v = np.where(t_floor < t_dome, p[1] + 30, np.arcsin(np.clip(p[2] / 5.5, -1, 1)) * 5.5 + 20)
    size = texture.shape[0] - 1
    u, v = np.mod(u / 0.15, size), np.mod(v / 0.15, size)
    i, j = np.floor(u).astype(int), np.floor(v).astype(int)
    fu, fv = (u - i)[..., None], (v - j)[..., None]
    return (texture[i, j] * (1 - fu) * (1 - fv) + texture[i + 1, j] * fu * (1 - fv)
            + texture[i, j + 1] * (1 - fu) * fv + texture[i + 1, j + 1] * fu * fv)


WIDTH, HEIGHT = 256, 192
"""The filmed video's frame size: each of its sides divides by 8, so every downscaled copy is exact."""


def film_demo_scene(path: Path, frames: int = 24, width: int = WIDTH, height: int = HEIGHT,
                    degrees: float = 120.0, seed: int = 0) -> Path:
    """An H.264 video of a camera arc around the demo scene (30 degrees up, looking at the origin), in
    front of a backdrop textured from ``seed``.

    The scene is rendered with one ray per pixel (``supersample=1``), in a quarter of the time of four:
    the backdrop, which gives SIFT most of its texture, is sampled once per pixel either way, and 12 of
    12 frames registered for each of three backdrop seeds, as with four rays per pixel. 24 frames of
    256x192 (two candidates per kept frame) registered 12 of 12 for seeds 0, 1 and 2 too, as 36 frames
    of 320x240 did, in less than half the filming and about two thirds of the processing time."""
    import imageio_ffmpeg

    from nerf_lightning.datasets.demo_scene import render_views

    azimuth = np.radians(np.linspace(0.0, degrees, frames))
    elevation = math.radians(30.0)
    positions = CAMERA_DISTANCE * np.stack([math.cos(elevation) * np.cos(azimuth),
                                            math.cos(elevation) * np.sin(azimuth),
                                            np.full(frames, math.sin(elevation))], axis=-1)
    c2w = np.stack([look_at_origin(p) for p in positions])
    rgba = render_views(c2w, width, height, supersample=1)
    texture = np.random.default_rng(seed).uniform(0.0, 1.0, (420, 420, 3)) ** 1.5
    writer = imageio_ffmpeg.write_frames(str(path), (width, height), fps=24, quality=8, macro_block_size=16)
    writer.send(None)
    for k in range(frames):
        alpha = rgba[k, ..., 3:]
        rgb = rgba[k, ..., :3] * alpha + _backdrop(texture, c2w[k], width, height) * (1 - alpha)
        writer.send(np.ascontiguousarray(np.round(rgb * 255).astype(np.uint8)))
    writer.close()
    return path


CAMERA = ("--camera_model", "SIMPLE_RADIAL")
"""The filmed camera has no lens distortion. With the default OPENCV camera, bundle adjustment of these
12 frames can fit focal length and distortion into a split model (from 36 frames of 320x240: 6 of 12
registered, every seed; from 24 of 256x192: 10 of 12 with 8 points for seed 1); with SIMPLE_RADIAL,
12 of 12 for each of three seeds."""


@pytest.fixture(scope="module")
def filmed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    """The filmed demo scene processed into a dataset with 12 frames: (video, dataset, seconds)."""
    root = tmp_path_factory.mktemp("video_process")
    video = film_demo_scene(root / "arc.mp4")
    started = time.perf_counter()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert _process(str(video), str(root / "scene"), "--num_frames", "12", *CAMERA,
                        "--result_file", str(root / "result.json")) == 0
    (root / "printed.txt").write_text(printed.getvalue())
    return video, root / "scene", time.perf_counter() - started


@needs_sfm
@pytest.mark.slow
def test_a_filmed_camera_path_processes_into_a_dataset_that_trains(filmed: tuple[Path, Path, float],
                                                                   tmp_path: Path) -> None:
    from nerf_lightning.cli import run_lightning_cli
    from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio

    video, dst, seconds = filmed
    result = json.loads((dst.parent / "result.json").read_text())
    assert result["stages_run"] == ["extraction", "features", "matches", "mapping"]
    assert result["total"] == 12 and result["registered"] == 12, result
    assert result["mean_reprojection_error"] < 1.0
    printed = (dst.parent / "printed.txt").read_text()
    assert f"registered {result['registered']}/12 video frames" in printed, printed  # frames, not photos
    state = json.loads((dst / "process.json").read_text())
    assert state["options"]["matcher"] == "sequential" and state["downscaled"] == [2, 4, 8]
    names = sorted(p.name for p in (dst / "images").iterdir())
    assert len(names) == 12 and names[0].startswith("frame_000")
    for factor in (2, 4, 8):
        with Image.open(dst / f"images_{factor}" / names[0]) as copy:
            assert copy.size == (WIDTH // factor, HEIGHT // factor)
    with_copies = load_nerfstudio(dst, "train", downscale=2)
    print(f"video: {result['registered']}/{result['total']} frames registered, "
          f"{result['mean_reprojection_error']:.2f} px, process {seconds:.1f} s")
    assert with_copies.images[0].shape[:2] == (HEIGHT // 2, WIDTH // 2)

    out = tmp_path / "run"  # on the smallest copies (32x24): the fit's image size is not the point
    run_lightning_cli(["fit", *short_run_args(dst, out, "--data.dataset_format", "nerfstudio",
                                              "--data.downscale", "8", "--data.cache", "false", steps=4)])
    record = json.loads((out / RUN / "run.json").read_text())
    assert record["status"] == "completed" and record["global_step"] == 4

    started = time.perf_counter()  # unchanged: nothing redone
    assert _process(str(video), str(dst), "--num_frames", "12", *CAMERA) == 0
    assert time.perf_counter() - started < 10


@needs_sfm
@pytest.mark.slow
def test_the_pipeline_processes_a_video_first(filmed: tuple[Path, Path, float], tmp_path: Path) -> None:
    """Also: processing the same video again, in another process, gives the same model (the default
    --deterministic: with several threads, runs of this video under a busy machine registered 10 to
    12 frames with 92 to 555 points)."""
    video, dst, _ = filmed
    work = tmp_path / "work"
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "work_dir": str(work), "data": {"root": str(video), "process_args": ["--num_frames", 12, *CAMERA]},
        "fit": {"config": str(DEMO_CONFIG), "args": ["--data.dataset_format", "nerfstudio"]},
        "stages": ["process", "validate"],
    }))
    # The pipeline in this process (run_cli), its stages in subprocesses as always.
    run = run_cli("pipeline", "--config", str(config))
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((work / "process" / "result.json").read_text())
    assert result["outputs"]["dataset"] == "process/dataset"
    assert (work / "process" / "dataset" / "transforms.json").is_file()
    validate = json.loads((work / "pipeline.json").read_text())["stages"]["validate"]
    assert str(work / "process" / "dataset") in validate["command"]
    for name in ("cameras.bin", "images.bin", "points3D.bin"):
        first = (dst / "colmap" / "sparse" / "0" / name).read_bytes()
        assert (work / "process" / "dataset" / "colmap" / "sparse" / "0" / name).read_bytes() == first, name
    again = run_cli("pipeline", "--config", str(config))
    assert again.returncode == 0 and "[process] skipped: up to date" in again.stdout, again.stdout


def test_the_pipeline_takes_a_video_or_photos_as_its_data_root(tmp_path: Path) -> None:
    from nerf_lightning.datasets.process import needs_processing
    from nerf_lightning.pipeline import PipelineConfigError, load_pipeline_config
    from nerf_lightning.pipeline.process_stage import data_root
    from nerf_lightning.pipeline.state import State

    video = tmp_path / "clip.mov"
    video.write_bytes(b"\0" * 16)
    photos = tmp_path / "photos"
    photos.mkdir()
    Image.new("RGB", (8, 8)).save(photos / "a.jpg")
    assert needs_processing(video) == "video" and needs_processing(photos) == "photos"
    (photos / "transforms.json").write_text("{}")  # a dataset now: read as it is
    assert needs_processing(photos) is None and needs_processing(tmp_path / "absent.mp4") is None

    def load(**data: object) -> object:
        path = tmp_path / "pipeline.yaml"
        path.write_text(yaml.safe_dump({"work_dir": str(tmp_path / "work"), "data": data,
                                        "fit": {"config": str(DEMO_CONFIG)}}))
        return load_pipeline_config(path, export_available=False)

    config = load(root=str(video), process_args=["--num_frames", 50])
    assert config.stages[0] == "process" and config.data.process_args == ("--num_frames", "50")
    assert data_root(config, State(config.work_dir, config.path)) == tmp_path / "work" / "process" / "dataset"
    with pytest.raises(PipelineConfigError, match=r"data\.process_args: --result_file is set by"):
        load(root=str(video), process_args=["--result_file", "x.json"])
    with pytest.raises(PipelineConfigError, match=r"absent\.mp4: no such file"):
        load(root=str(tmp_path / "absent.mp4"))


@needs_sfm
@pytest.mark.slow
def test_the_nerfstudio_loader_reads_a_copy_of_the_right_size(filmed: tuple[Path, Path, float],
                                                              tmp_path: Path) -> None:
    import shutil

    from nerf_lightning.scenes.fingerprint import dataset_fingerprint
    from nerf_lightning.scenes.formats.nerfstudio import load_nerfstudio

    dst = shutil.copytree(filmed[1], tmp_path / "scene")
    split = load_nerfstudio(dst, "train", downscale=4)
    copy = dst / "images_4" / Path(split.names[0]).name
    before = dataset_fingerprint(dst)
    Image.new("RGB", (WIDTH // 4, HEIGHT // 4)).save(copy)  # black: the loader must read it
    assert dataset_fingerprint(dst) != before
    assert float(load_nerfstudio(dst, "train", downscale=4).images[0].abs().max()) == 0.0
    Image.new("RGB", (WIDTH // 4 + 1, HEIGHT // 4)).save(copy)  # wrong size: the full image is read
    fallback = load_nerfstudio(dst, "train", downscale=4).images[0]
    shutil.rmtree(dst / "images_4")
    assert bool((load_nerfstudio(dst, "train", downscale=4).images[0] == fallback).all())
    assert float((fallback - split.images[0]).abs().max()) <= 0.5 / 255 + 1e-6  # the copy: rounded to 8 bits
