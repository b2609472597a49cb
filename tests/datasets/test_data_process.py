"""``nerf-lightning data process``: photos -> a validated dataset by structure-from-motion (pycolmap).

The alignment and the bad-input cases run everywhere; structure-from-motion needs pycolmap (the
``sfm`` extra) and the accuracy bar needs fern's photos (``../shared/datasets/fern``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from nerf_lightning.commands import dispatch
from nerf_lightning.datasets.process.align import pose_errors, umeyama
from nerf_lightning.datasets.sources.llff import read_llff
from tests.helpers.runs import ONE_THREAD, REPO, SHARED_DATASETS

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
    assert f"{photos / 'p2.png'}: is not a PNG or JPEG image" in _one_error_line(capsys)


def _photos(folder: Path, count: int, suffix: str = ".jpg", size: tuple[int, int] = (64, 48)) -> list[Path]:
    """``count`` small noise photos ``p0 .. p<count-1>`` in ``folder`` (created)."""
    folder.mkdir()
    rng = np.random.default_rng(3)
    paths = [folder / f"p{i}{suffix}" for i in range(count)]
    for path in paths:
        Image.fromarray(rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)).save(path)
    return paths


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.slow  # a subprocess
def test_a_truncated_photo_is_one_line_before_structure_from_motion(tmp_path: Path) -> None:
    """The user's case: a header that reads, a body cut short. Found by decoding every photo before any
    work, so nothing is written next to DST and no structure-from-motion runs."""
    photos = _photos(tmp_path / "photos", 4)
    _truncate(photos[2])
    command = [sys.executable, "-m", "nerf_lightning", "data", "process", str(tmp_path / "photos"),
               str(tmp_path / "scene")]
    done = subprocess.run(command, cwd=REPO, env={**os.environ, **ONE_THREAD}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    err = done.stderr.strip().splitlines()
    assert len(err) == 1, err
    assert f"{photos[2]}: is truncated" in err[0] and "--skip_unreadable true" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]  # no scene, no .scene.process-work


@pytest.mark.parametrize("damage, expected", [
    (lambda path: path.write_bytes(b""), "is empty (0 bytes)"),
    (lambda path: path.write_text("a shopping list"), "is not a PNG or JPEG image"),
    (_truncate, "is truncated"),
])
def test_a_photo_that_does_not_decode_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  damage: Callable[[Path], object], expected: str) -> None:
    photos = _photos(tmp_path / "photos", 4, suffix=".png")
    damage(photos[1])
    assert _process(str(tmp_path / "photos"), str(tmp_path / "scene")) == 2
    line = _one_error_line(capsys)
    assert f"{photos[1]}: {expected}" in line and "expected a PNG or JPEG photo that decodes" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]


def test_skipping_unreadable_photos_warns_and_keeps_the_minimum(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    photos = _photos(tmp_path / "photos", 4)
    _truncate(photos[0])
    photos[3].write_bytes(b"")
    assert _process(str(tmp_path / "photos"), str(tmp_path / "scene")) == 2
    line = _one_error_line(capsys)
    assert f"{photos[0]}: is truncated" in line
    assert "1 more of the 4 photos does not decode either: p3.jpg" in line
    assert _process(str(tmp_path / "photos"), str(tmp_path / "scene"), "--skip_unreadable", "true") == 2
    err = capsys.readouterr().err.strip().splitlines()
    skipped = "skipped (--skip_unreadable true)"
    assert err == [f"nerf-lightning: warning: {photos[0]}: is truncated (the file ends before the image "
                   f"does); {skipped}",
                   f"nerf-lightning: warning: {photos[3]}: is empty (0 bytes); {skipped}",
                   f"nerf-lightning: dataset error: {tmp_path / 'photos'}: holds 2 photo(s) that decode "
                   "(2 skipped); expected at least 3 overlapping photos"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]


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


UNREADABLE = ("image004b.png", "image010b.png")
"""Photos added to fern's for the fixture's runs (``--skip_unreadable true``): a truncated copy of one
of fern's and an empty file, named so that they sort among fern's."""


@pytest.fixture(scope="module")
def fern_processed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float, str]:
    """fern's 20 photos (copied: the shared dataset is only read) processed into a dataset: the
    photos, the dataset, the seconds it took and the command's result file. The photos folder also
    holds two :data:`UNREADABLE` photos, left out by ``--skip_unreadable true`` (the command's stderr:
    ``warned.txt``) and deleted after the runs. The first run is interrupted before its mapping stage
    (what it left and warned: ``interrupted.json``); the command run again (its output:
    ``printed.txt``) resumes after the last stage that finished."""
    from nerf_lightning.datasets.process import run

    root = tmp_path_factory.mktemp("fern_process")
    photos = shutil.copytree(FERN / "images_8", root / "photos")
    data = (photos / "image004.png").read_bytes()
    (photos / UNREADABLE[0]).write_bytes(data[: len(data) // 2])
    (photos / UNREADABLE[1]).write_bytes(b"")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    started = time.perf_counter()
    warned: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run, "map_photos", interrupted)
        with pytest.raises(KeyboardInterrupt):
            run.process_photos(photos, root / "fern", skip_unreadable=True, log=lambda line: None,
                               warn=warned.append)
    left = {"published": (root / "fern").exists(), "work": (root / ".fern.process-work").is_dir(),
            "warned": warned}
    (root / "interrupted.json").write_text(json.dumps(left))
    printed, errors = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
        code = _process(str(photos), str(root / "fern"), "--skip_unreadable", "true",
                        "--result_file", str(root / "result.json"))
    seconds = time.perf_counter() - started
    (root / "printed.txt").write_text(printed.getvalue())
    (root / "warned.txt").write_text(errors.getvalue())
    for name in UNREADABLE:  # the other tests run on fern's photos alone, without the option
        (photos / name).unlink()
    assert code == 0, errors.getvalue()
    return photos, root / "fern", seconds, (root / "result.json").read_text()


@pytest.mark.slow  # structure-from-motion of 20 photos (the fixture)
@needs_pycolmap
@needs_fern
def test_an_interrupted_run_resumes_after_its_last_stage(
        fern_processed: tuple[Path, Path, float, str]) -> None:
    _, dst, _, result_text = fern_processed
    interrupted = json.loads((dst.parent / "interrupted.json").read_text())
    assert not interrupted["published"] and interrupted["work"]
    assert interrupted["warned"][-1] == (
        f"nerf-lightning: warning: data process stopped (KeyboardInterrupt): {dst} not written; "
        f"{dst.parent / '.fern.process-work'} kept: a rerun skips its finished stages (features, matches) "
        "as long as their photos and options stay the same")
    result = json.loads(result_text)
    assert result["stages_run"] == ["mapping"] and result["registered"] == 20
    lines = (dst.parent / "printed.txt").read_text().splitlines()
    assert lines[:2] == ["features: done before, skipped", "matches: done before, skipped"]


@pytest.mark.slow  # structure-from-motion of 20 photos (the fixture)
@needs_pycolmap
@needs_fern
def test_photos_that_do_not_decode_are_skipped_with_a_warning_each(
        fern_processed: tuple[Path, Path, float, str]) -> None:
    photos, dst, _, result_text = fern_processed
    warned = (dst.parent / "warned.txt").read_text().strip().splitlines()
    skipped = "skipped (--skip_unreadable true)"
    assert warned == [
        f"nerf-lightning: warning: {photos / UNREADABLE[0]}: is truncated (the file ends before the image "
        f"does); {skipped}",
        f"nerf-lightning: warning: {photos / UNREADABLE[1]}: is empty (0 bytes); {skipped}",
    ]
    assert (json.loads(result_text)["total"], json.loads(result_text)["registered"]) == (20, 20)
    assert not any((dst / "images" / name).exists() for name in UNREADABLE)


@pytest.mark.slow  # the writing stage of a resumed run on fern's photos
@needs_pycolmap
@needs_fern
def test_a_photo_damaged_during_the_run_removes_the_work_folder(
        fern_processed: tuple[Path, Path, float, str], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A photo that decoded up front and is truncated once mapping is done (a copy still being written,
    a failing disk) is found when the dataset is written: one line naming the photo, and the work
    folder, of no use to a rerun that needs other photos, removed."""
    from nerf_lightning.datasets.process import run

    fixture_photos, dst, _, _ = fern_processed
    photos = shutil.copytree(fixture_photos, tmp_path / "photos")
    work = tmp_path / ".scene.process-work"  # every stage done: the run goes straight to writing
    shutil.copytree(dst, work, ignore=shutil.ignore_patterns("images"))
    real = run.write_downscaled

    def damaged_first(*args: object, **kwargs: object) -> list[Path]:
        _truncate(photos / "image005.png")  # hard-linked into the work folder: the same file
        return real(*args, **kwargs)

    monkeypatch.setattr(run, "write_downscaled", damaged_first)
    capsys.readouterr()
    assert _process(str(photos), str(tmp_path / "scene")) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"nerf-lightning: dataset error: {photos / 'image005.png'}: is truncated"), line
    assert line.endswith(f"{tmp_path / 'scene'} not written; {work} removed (other photos redo every stage)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]


@pytest.mark.slow  # structure-from-motion of 20 photos (the fixture)
@needs_pycolmap
@needs_fern
def test_fern_registers_every_photo_accurately(fern_processed: tuple[Path, Path, float, str]) -> None:
    _, dst, seconds, result_text = fern_processed
    result = json.loads(result_text)
    assert (result["registered"], result["total"]) == (20, 20)
    assert result["mean_reprojection_error"] < 1.0
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
    assert _process(str(photos), str(dst)) == 0
    out = capsys.readouterr().out
    assert "up to date" in out and "registered 20/20" in out
    assert out.strip().splitlines()[-1] == f"next: nerf-lightning fit --config real --data.root {dst}"


# ------------------------------------------------------------------- a small capture of fern's photos


SMALL_EVERY, SMALL_SCALE = 2, 2
"""The small capture: every other one of fern's photos (10), at half their size (252x189). It registers
whole with either matcher, and a run on it (structure-from-motion) takes a few seconds instead of
fern's twenty: for the tests of reruns, whose photos' count and size are not the point."""


def _small_photos(folder: Path, names: list[str]) -> Path:
    """Fern's photos ``names`` at half their size in ``folder`` (created)."""
    folder.mkdir()
    for name in names:
        with Image.open(FERN / "images_8" / name) as photo:
            size = (photo.width // SMALL_SCALE, photo.height // SMALL_SCALE)
            photo.resize(size, Image.BOX).save(folder / name)
    return folder


@pytest.fixture(scope="module")
def small_processed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The small capture (:data:`SMALL_EVERY`) processed into a dataset with the default options:
    (photos, dataset). The tests copy the dataset before they run the command on it again."""
    root = tmp_path_factory.mktemp("small_process")
    names = sorted(path.name for path in (FERN / "images_8").glob("*.png"))[::SMALL_EVERY]
    photos = _small_photos(root / "photos", names)
    with contextlib.redirect_stdout(io.StringIO()):
        assert _process(str(photos), str(root / "small")) == 0
    return photos, root / "small"


@pytest.mark.slow  # structure-from-motion of 8 small photos
@needs_pycolmap
@needs_fern
def test_too_few_registered_keeps_the_earlier_result(
    small_processed: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Photos of which fewer than half register: one line saying so, and the earlier dataset in DST
    kept as it was."""
    dst = shutil.copytree(small_processed[1], tmp_path / "small")
    before = (dst / "transforms.json").read_bytes()
    mixed = _small_photos(tmp_path / "mixed", ["image000.png", "image001.png", "image002.png"])
    with Image.open(mixed / "image000.png") as photo:
        size = photo.size
    rng = np.random.default_rng(0)
    for i in range(5):  # smooth noise: features, but none that match another photo
        small = rng.integers(0, 256, size=(size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
        Image.fromarray(small).resize(size, Image.BILINEAR).save(mixed / f"noise{i}.png")
    capsys.readouterr()
    assert _process(str(mixed), str(dst)) == 2
    line = _one_error_line(capsys)
    assert "of 8 photos registered (fewer than half)" in line and "overlap" in line
    assert (dst / "transforms.json").read_bytes() == before


@pytest.mark.slow  # structure-from-motion of 10 small photos (the fixture)
@needs_pycolmap
@needs_fern
def test_another_matcher_reuses_the_features(small_processed: tuple[Path, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    photos, dst = small_processed
    copy = shutil.copytree(dst, tmp_path / "small")
    capsys.readouterr()
    assert _process(str(photos), str(copy), "--matcher", "sequential") == 0
    out = capsys.readouterr().out
    assert "features: done before, skipped" in out and "matches (sequential):" in out
    assert "registered 10/10" in out
    state = json.loads((copy / "process.json").read_text())
    assert state["options"]["matcher"] == "sequential" and state["complete"]
    assert not (tmp_path / ".small.process-work").exists()


@pytest.mark.slow  # structure-from-motion of 10 small photos (the fixture)
@needs_pycolmap
@needs_fern
def test_a_damaged_result_is_built_again(small_processed: tuple[Path, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    photos, dst = small_processed
    copy = shutil.copytree(dst, tmp_path / "small")
    (copy / "images" / "image004.png").unlink()
    capsys.readouterr()
    assert _process(str(photos), str(copy)) == 0
    out = capsys.readouterr().out
    assert "no longer validates" in out and "features: done before, skipped" in out
    assert (copy / "images" / "image004.png").is_file()


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
    work = tmp_path / ".out.process-work"  # kept: another --matcher would reuse its features
    assert err[0].endswith(f"{tmp_path / 'out'} not written; {work} kept: a rerun skips its finished stages "
                           "(features, matches, mapping) as long as their photos and options stay the same")
    assert json.loads((work / "process.json").read_text())["summary"]["registered"] == 0
    assert _process(str(photos), str(tmp_path / "out"), "--camera_model", "SIMPLE_RADIAL") == 2
    assert "--camera_model" not in capfd.readouterr().err


@needs_pycolmap
def test_an_interrupt_before_any_stage_finished_removes_the_work_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from nerf_lightning.datasets.process import run

    _photos(tmp_path / "photos", 3)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "extract_features", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _process(str(tmp_path / "photos"), str(tmp_path / "out"))
    work = tmp_path / ".out.process-work"
    assert _one_error_line(capsys) == (
        f"nerf-lightning: warning: data process stopped (KeyboardInterrupt): {tmp_path / 'out'} not written; "
        f"{work} removed (no stage had finished)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]
