"""``nerf-lightning view`` in a real browser: a trained run's frames follow the camera, keyframes placed
there are saved as a camera path, and ``render`` turns that path into a video."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest
from PIL import Image

from nerf_lightning.cli import main
from tests.helpers.browser import CHROMIUM_ARGS, browser_missing, chromium_path, wait_for

MISSING = browser_missing()
pytestmark = pytest.mark.slow


@pytest.mark.skipif(MISSING is not None, reason=f"viewer tests: {MISSING}")
def test_keyframes_placed_in_the_browser_render_as_a_video(tiny_run: Path, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    from nerf_lightning.runs.trained import load_trained
    from nerf_lightning.viewer.trained import open_trained_view, serve

    ckpt = tiny_run / "checkpoints" / "last.ckpt"
    model, datamodule = load_trained(ckpt, tiny_run / "config.yaml")
    out = tmp_path / "paths" / "flight.json"
    session, recorder = open_trained_view(model, datamodule, host="127.0.0.1", port=0, max_resolution=128,
                                          camera_path_out=out)
    stop = threading.Event()
    server = threading.Thread(target=serve, args=(session, model, lambda: not stop.is_set()), daemon=True)
    server.start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 640, "height": 480})
            page.goto(session.url)
            wait_for(lambda: session.frames_sent > 0, 30, "the first frame")
            page.get_by_role("button", name="Add keyframe").click()
            wait_for(lambda: len(recorder.keyframes) == 1, 10, "the first keyframe")
            stamp = session.clients()[0].camera.update_timestamp
            page.mouse.move(250, 300)
            page.mouse.down()
            page.mouse.move(420, 260, steps=4)
            page.mouse.up()
            wait_for(lambda: session.clients()[0].camera.update_timestamp != stamp, 10, "the camera to move")
            page.get_by_role("button", name="Add keyframe").click()
            wait_for(lambda: len(recorder.keyframes) == 2, 10, "the second keyframe")
            page.get_by_role("button", name="Save camera path").click()
            wait_for(out.is_file, 10, "the camera path file")
            browser.close()
    finally:
        stop.set()
        server.join(30)
        session.close()
    first, second = recorder.keyframes
    assert not first.camera_to_world.allclose(second.camera_to_world, atol=1e-3), "the drag moved the camera"
    document = json.loads(out.read_text())
    assert len(document["camera_path"]) == 120 and document["fps"] == 30  # the panel's 4 s at 30 fps
    video = tmp_path / "flight.gif"
    assert main(["render", "--ckpt_path", str(ckpt), "--camera_path", str(out), "--frames", "6",
                 "--out", str(video)]) == 0
    with Image.open(video) as gif:
        assert gif.n_frames == 6 and gif.size == (document["render_width"], document["render_height"])


def test_view_serves_and_stops(tiny_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ckpt = str(tiny_run / "checkpoints" / "last.ckpt")
    if MISSING is None:
        assert main(["view", "--ckpt_path", ckpt, "--port", "0", "--serve_seconds", "0"]) == 0
        assert "viewer: http://127.0.0.1:" in capsys.readouterr().err
        # a run folder stands for its last checkpoint, and so does an older fit's output folder
        # (OUT/lightning_logs/version_N/, before run folders)
        old = tmp_path / "old" / "lightning_logs" / "version_0"
        (old / "checkpoints").mkdir(parents=True)
        shutil.copy(tiny_run / "config.yaml", old / "config.yaml")
        shutil.copy(ckpt, old / "checkpoints" / "last.ckpt")
        for folder in (tiny_run, tmp_path / "old"):
            assert main(["view", "--ckpt_path", str(folder), "--port", "0", "--serve_seconds", "0"]) == 0
    assert main(["view", "--ckpt_path", str(tiny_run / "checkpoints"), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("checkpoints: a folder without checkpoints/last.ckpt; expected a checkpoint or a run "
                        "folder RUN holding RUN/checkpoints/last.ckpt")
    assert main(["view", "--ckpt_path", ckpt, "--port", "70000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("nerf-lightning view: ")
