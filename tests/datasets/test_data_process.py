"""``nerf-lightning data process``: photos -> a validated dataset by structure-from-motion (pycolmap).

The alignment and the bad-input cases run everywhere; structure-from-motion needs pycolmap (the
``sfm`` extra) and the accuracy bar needs fern's photos (``../shared/datasets/fern``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from nerf_lightning.commands import dispatch
from nerf_lightning.datasets.process.align import pose_errors, umeyama
from nerf_lightning.datasets.sources.llff import read_llff
from tests.helpers.runs import SHARED_DATASETS

FERN = SHARED_DATASETS / "fern"
needs_pycolmap = pytest.mark.skipif(importlib.util.find_spec("pycolmap") is None,
                                    reason="pycolmap (the 'sfm' extra) is not installed")
needs_fern = pytest.mark.skipif(not (FERN / "images_8").is_dir(), reason=f"{FERN}/images_8 is absent")


def _no_lightning(args: list[str]) -> None:
    raise AssertionError(f"LightningCLI should not run: {args}")


def _process(*args: str) -> int:
    return dispatch(["data", "process", *args], _no_lightning)


def _rotation(seed: int) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(3, 3)))
    q = q * np.sign(np.diag(r))
    return q if np.linalg.det(q) > 0 else -q


# ------------------------------------------------------------------------------------------ alignment


def test_umeyama_recovers_a_similarity() -> None:
    points = np.random.default_rng(0).normal(size=(10, 3))
    rotation, translation = _rotation(1), np.array([1.0, -2.0, 0.5])
    found = umeyama(points, 2.5 * points @ rotation.T + translation)
    assert found.scale == pytest.approx(2.5)
    np.testing.assert_allclose(found.rotation, rotation, atol=1e-9)
    np.testing.assert_allclose(found.translation, translation, atol=1e-9)


def test_umeyama_refuses_degenerate_points() -> None:
    with pytest.raises(ValueError, match="one place"):
        umeyama(np.ones((4, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="N >= 3"):
        umeyama(np.zeros((2, 3)), np.zeros((2, 3)))


def test_pose_errors_ignore_a_similarity_and_see_a_turned_camera() -> None:
    rng = np.random.default_rng(2)
    reference = np.tile(np.eye(4), (6, 1, 1))
    reference[:, :3, 3] = rng.normal(size=(6, 3))
    for i in range(6):
        reference[i, :3, :3] = _rotation(10 + i)
    similarity = np.eye(4)
    similarity[:3, :3], similarity[:3, 3] = 0.3 * _rotation(3), [4.0, 5.0, 6.0]
    estimated = similarity @ reference  # the same cameras in another world frame and scale
    errors = pose_errors(estimated, reference)
    assert errors.centre.max() < 1e-9 and errors.degrees.max() < 1e-5
    turned = estimated.copy()
    angle = np.radians(2.0)
    turned[0, :3, :3] = turned[0, :3, :3] @ np.array(
        [[1, 0, 0], [0, np.cos(angle), -np.sin(angle)], [0, np.sin(angle), np.cos(angle)]])
    assert pose_errors(turned, reference).degrees[0] == pytest.approx(2.0, abs=1e-6)


# ------------------------------------------------------------------------------------------ bad input


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_an_empty_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "photos").mkdir()
    assert _process(str(tmp_path / "photos"), str(tmp_path / "out")) == 2
    assert "is empty; expected photos" in _one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_a_folder_of_non_images_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    for name in ("notes.txt", "clip.mov", "scan.pdf"):
        (photos / name).write_text("not a photo")
    assert _process(str(photos), str(tmp_path / "out")) == 2
    assert "holds 3 file(s) but no photo" in _one_error_line(capsys)


def test_a_broken_photo_and_mixed_sizes_are_one_line(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    for i, size in enumerate([(40, 30), (40, 30), (30, 40)]):
        Image.new("RGB", size).save(photos / f"p{i}.png")
    assert _process(str(photos), str(tmp_path / "out")) == 2
    assert "photos differ in size (p0.png is 40x30, p2.png is 30x40)" in _one_error_line(capsys)
    (photos / "p2.png").write_bytes(b"not a png")
    assert _process(str(photos), str(tmp_path / "out")) == 2
    assert "p2.png' cannot be read" in _one_error_line(capsys)


def test_missing_pycolmap_says_how_to_install(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(3):
        Image.new("RGB", (40, 30)).save(photos / f"p{i}.png")
    monkeypatch.setitem(sys.modules, "pycolmap", None)  # import pycolmap raises ImportError
    assert _process(str(photos), str(tmp_path / "out")) == 2
    assert "'.[sfm]'" in _one_error_line(capsys)


def test_a_foreign_destination_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pycolmap", reason="pycolmap (the 'sfm' extra) is not installed")
    photos, out = tmp_path / "photos", tmp_path / "out"
    photos.mkdir()
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    for i in range(3):
        Image.new("RGB", (40, 30)).save(photos / f"p{i}.png")
    assert _process(str(photos), str(out)) == 2
    assert "holds files but no process.json" in _one_error_line(capsys)
    assert (out / "mine.txt").read_text() == "keep me"


# ------------------------------------------------------------------------------------------ fern


@pytest.fixture(scope="module")
def fern_processed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float, str]:
    """fern's 20 photos (copied: the shared dataset is only read) processed into a dataset: the
    photos, the dataset, the seconds it took and the command's result file. The first run is
    interrupted before its mapping stage (what it left: ``interrupted.json``); the command run again
    (its output: ``printed.txt``) resumes after the last stage that finished."""
    from nerf_lightning.datasets.process import run

    root = tmp_path_factory.mktemp("fern_process")
    photos = shutil.copytree(FERN / "images_8", root / "photos")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    started = time.perf_counter()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run, "map_photos", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run.process_photos(photos, root / "fern", log=lambda line: None)
    (root / "interrupted.json").write_text(json.dumps({"published": (root / "fern").exists()}))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = _process(str(photos), str(root / "fern"), "--result_file", str(root / "result.json"))
    seconds = time.perf_counter() - started
    (root / "printed.txt").write_text(printed.getvalue())
    assert code == 0
    return photos, root / "fern", seconds, (root / "result.json").read_text()


@pytest.mark.slow  # structure-from-motion of 20 photos (the fixture)
@needs_pycolmap
@needs_fern
def test_an_interrupted_run_resumes_after_its_last_stage(
        fern_processed: tuple[Path, Path, float, str]) -> None:
    _, dst, _, result_text = fern_processed
    assert json.loads((dst.parent / "interrupted.json").read_text()) == {"published": False}
    result = json.loads(result_text)
    assert result["stages_run"] == ["mapping"] and result["registered"] == 20
    lines = (dst.parent / "printed.txt").read_text().splitlines()
    assert lines[:2] == ["features: done before, skipped", "matches: done before, skipped"]


@pytest.mark.slow  # structure-from-motion of 20 photos (the fixture)
@needs_pycolmap
@needs_fern
def test_fern_registers_every_photo_accurately(fern_processed: tuple[Path, Path, float, str]) -> None:
    _, dst, seconds, result_text = fern_processed
    result = json.loads(result_text)
    assert (result["registered"], result["total"]) == (20, 20)
    assert result["mean_reprojection_error"] < 1.0
    assert seconds < 60
    frames = json.loads((dst / "transforms.json").read_text())["frames"]
    estimated = {Path(f["file_path"]).name: np.array(f["transform_matrix"]) for f in frames}
    reference = {f.image.name: f.camera_to_world for f in read_llff(FERN, FERN / "images_8").frames}
    names = sorted(reference)
    assert sorted(estimated) == names
    errors = pose_errors(np.stack([estimated[n] for n in names]), np.stack([reference[n] for n in names]))
    print(f"fern: {result['registered']}/{result['total']} registered, reprojection "
          f"{result['mean_reprojection_error']:.3f} px, centre error max {100 * errors.centre.max():.3f}% "
          f"mean {100 * errors.centre.mean():.3f}% of extent {errors.extent:.3f}, direction error max "
          f"{errors.degrees.max():.3f} deg mean {errors.degrees.mean():.3f} deg, {seconds:.1f} s")
    assert errors.centre.max() < 0.01
    assert errors.degrees.max() < 1.0
    assert (dst / "colmap" / "sparse" / "0" / "images.bin").is_file()
    assert len(list((dst / "images").iterdir())) == 20


@pytest.mark.slow  # structure-from-motion of 20 photos (the fixture)
@needs_pycolmap
@needs_fern
def test_fern_rerun_skips_every_stage(fern_processed: tuple[Path, Path, float, str],
                                      capsys: pytest.CaptureFixture[str]) -> None:
    photos, dst, _, _ = fern_processed
    capsys.readouterr()
    started = time.perf_counter()
    assert _process(str(photos), str(dst)) == 0
    out = capsys.readouterr().out
    assert "up to date" in out and "registered 20/20" in out
    assert out.strip().splitlines()[-1] == f"next: nerf-lightning fit --config real --data.root {dst}"
    assert time.perf_counter() - started < 10


@pytest.mark.slow  # structure-from-motion of 20 photos (the fixture)
@needs_pycolmap
@needs_fern
def test_too_few_registered_keeps_the_earlier_result(
    fern_processed: tuple[Path, Path, float, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, dst, _, _ = fern_processed
    before = (dst / "transforms.json").read_bytes()
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in ("image000.png", "image001.png", "image002.png"):
        shutil.copy(FERN / "images_8" / name, mixed / name)
    rng = np.random.default_rng(0)
    for i in range(5):  # smooth noise: features, but none that match another photo
        small = rng.integers(0, 256, size=(48, 63, 3), dtype=np.uint8)
        Image.fromarray(small).resize((504, 378), Image.BILINEAR).save(mixed / f"noise{i}.png")
    capsys.readouterr()
    assert _process(str(mixed), str(dst)) == 2
    line = _one_error_line(capsys)
    assert "of 8 photos registered (fewer than half)" in line and "overlap" in line
    assert (dst / "transforms.json").read_bytes() == before


@pytest.mark.slow  # structure-from-motion of 20 photos (the fixture)
@needs_pycolmap
@needs_fern
def test_another_matcher_reuses_the_features(fern_processed: tuple[Path, Path, float, str], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    photos, dst, _, _ = fern_processed
    copy = shutil.copytree(dst, tmp_path / "fern")
    capsys.readouterr()
    assert _process(str(photos), str(copy), "--matcher", "sequential") == 0
    out = capsys.readouterr().out
    assert "features: done before, skipped" in out and "matches (sequential):" in out
    assert "registered 20/20" in out
    state = json.loads((copy / "process.json").read_text())
    assert state["options"]["matcher"] == "sequential" and state["complete"]
    assert not (tmp_path / ".fern.process-work").exists()


@pytest.mark.slow  # structure-from-motion of 20 photos (the fixture)
@needs_pycolmap
@needs_fern
def test_a_damaged_result_is_built_again(fern_processed: tuple[Path, Path, float, str], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    photos, dst, _, _ = fern_processed
    copy = shutil.copytree(dst, tmp_path / "fern")
    (copy / "images" / "image003.png").unlink()
    capsys.readouterr()
    assert _process(str(photos), str(copy)) == 0
    out = capsys.readouterr().out
    assert "no longer validates" in out and "features: done before, skipped" in out
    assert (copy / "images" / "image003.png").is_file()


@needs_pycolmap
def test_photos_sharing_no_features_are_one_line(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    photos = tmp_path / "photos"
    photos.mkdir()
    rng = np.random.default_rng(1)
    for i in range(5):
        small = rng.integers(0, 256, size=(24, 32, 3), dtype=np.uint8)
        Image.fromarray(small).resize((256, 192), Image.BILINEAR).save(photos / f"noise{i}.png")
    capfd.readouterr()
    assert _process(str(photos), str(tmp_path / "out")) == 2
    err = capfd.readouterr().err.strip().splitlines()  # pycolmap's own log lines (fd 2) included
    assert len(err) == 1 and "only 0 of 5 photos registered" in err[0], err
    assert "--camera_model SIMPLE_RADIAL" in err[0]  # the default OPENCV camera: a simpler one suggested
    assert not (tmp_path / "out").exists()
    assert _process(str(photos), str(tmp_path / "out"), "--camera_model", "SIMPLE_RADIAL") == 2
    assert "--camera_model" not in capfd.readouterr().err
