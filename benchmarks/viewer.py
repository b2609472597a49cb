"""Benchmark of the live viewer against issue 17's targets, on the demo scene:

* ``first_frame_s``: from the page being opened (``page.goto``) to the first frame sent to it while
  training runs (target: 2 s);
* ``throughput_ratio``: training rays/s with a browser watching over rays/s with none, each over the
  same stretch of an equal fresh fit (target: >= 0.9);
* ``viewer_throughput_ratio``: the same, over rays/s of a fit without the viewer while the same browser
  shows the same kind of page served from elsewhere (``view`` of a trained model, on the browser's
  core): what the viewer itself costs, apart from what the browser's presence costs this machine
  (``browser_elsewhere_ratio``, that control over training alone);
* ``view_moving_fps``: frames per second sent while the camera is dragged continuously in
  ``nerf-lightning view``'s loop, on the trained model, and their size (target: >= 5), beside
  ``view_camera_updates_per_s``: the page reports its camera once per frame it draws, so a page drawn
  slower than that rate caps the frames that can follow the camera;
* ``bare_page_connected_s``: the page of an empty viser server, no training, from being opened to
  connecting (three fresh browsers): the browser's own start-up, under any first frame.

The browser is Debian's headless Chromium driven by Playwright, as in the tests. Without a GPU it draws
WebGL in software (SwiftShader): each frame it receives costs it far more CPU than a browser on a
laptop would spend, and on this machine that CPU is taken from training. With ``--pin`` (the default
on two or more cores) training keeps the first core and the browser gets the last, as when the browser
runs elsewhere (the SSH-tunnel set-up); ``browser_cores_*`` report what the browser used and
``viewer_share_while_watched`` the share of wall time the viewer's own frames took from training. Run::

    OMP_NUM_THREADS=1 python -m benchmarks.viewer --scene data/demo --seconds 30
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl

from benchmarks.common import machine
from nerf_lightning.callbacks import SampleBudget, Viewer
from nerf_lightning.core.subnormal import flush_subnormals
from nerf_lightning.data.datamodule import NerfDataModule
from nerf_lightning.samplers import OccupancyGrid
from nerf_lightning.system.module import NerfModule

# Headless Chromium has no GPU: WebGL on SwiftShader, which newer Chromium allows only when asked.
CHROMIUM_ARGS = ["--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--ignore-gpu-blocklist"]
BROWSER_CORE: set[int] = set()  # filled by main: the core the browser gets when pinned


def _own_chromium_pids() -> list[int]:
    """Chromium processes of this user (the benchmark's browser: none other runs here), and
    Playwright's driver: a node process that receives every websocket frame the page gets (as
    DevTools events), so it works as hard as the page does and belongs on the browser's core, not
    beside training."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")[0]
            owner = entry.stat().st_uid
        except OSError:
            continue
        own_driver = b"node" in command.rsplit(b"/", 1)[-1] and b"playwright" in command
        if (b"chromium" in command or own_driver) and owner == os.getuid():
            pids.append(int(entry.name))
    return pids


def _cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


class Browser:
    """Headless Chromium on a page; pinned to the last core when ``pin``; its CPU time measured."""

    def __init__(self, playwright: Any, url: str, pin: bool) -> None:
        chromium = shutil.which("chromium")
        self.browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        self.pin = pin
        self._pin()  # the zygote too: the page's processes fork from it and keep its affinity
        self.page = self.browser.new_page(viewport={"width": 1280, "height": 720})
        self.opened = time.perf_counter()
        self.page.goto(url)
        self._pin()
        self.start_cpu, self.start = _cpu_seconds(_own_chromium_pids()), time.perf_counter()

    def _pin(self) -> None:
        if self.pin:
            for pid in _own_chromium_pids():
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(pid, BROWSER_CORE)

    def cores(self) -> float:
        """CPU cores the browser used on average since the page opened."""
        return (_cpu_seconds(_own_chromium_pids()) - self.start_cpu) / (time.perf_counter() - self.start)

    def close(self) -> None:
        self.browser.close()


class RaysCounter(pl.Callback):
    """Training rays per second between ``warmup_s`` and ``warmup_s + seconds`` of training; stops then."""

    def __init__(self, warmup_s: float, seconds: float) -> None:
        self.warmup_s, self.seconds = warmup_s, seconds
        self.start: float | None = None
        self.begin: float | None = None
        self.rays = 0
        self.rate = 0.0

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        now = time.perf_counter()
        self.start = self.start or now
        if now - self.start < self.warmup_s:
            return
        if self.begin is None:
            self.begin = now
            return
        self.rays += int(outputs["num_rays"])
        if now - self.begin >= self.seconds:
            self.rate = self.rays / (now - self.begin)
            trainer.should_stop = True


def _start_fit(scene: Path, seconds: float, out: Path, *callbacks: pl.Callback
               ) -> tuple[RaysCounter, NerfModule, NerfDataModule, pl.Trainer, threading.Thread]:
    """A fresh fit of the demo config on ``scene`` started in a thread, counted by a RaysCounter."""
    pl.seed_everything(0)
    counter = RaysCounter(warmup_s=10.0, seconds=seconds)
    model = NerfModule(sampler=OccupancyGrid())
    datamodule = NerfDataModule(root=str(scene), rays_per_batch=1024, steps_per_epoch=100_000)
    trainer = pl.Trainer(max_steps=-1, limit_val_batches=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=out,
                         callbacks=[counter, *callbacks, SampleBudget(target_samples=32768)])
    thread = threading.Thread(target=trainer.fit, args=(model,), kwargs={"datamodule": datamodule})
    thread.start()
    return counter, model, datamodule, trainer, thread


def fit_phase(scene: Path, seconds: float, watch: bool, out: Path, pin: bool) -> dict[str, Any]:
    """A fresh fit with the viewer on, measured over ``seconds`` after a warm-up; ``watch``: a browser
    opens the page as the measurement starts and stays. Returns the figures and the trained model."""
    from playwright.sync_api import sync_playwright

    viewer = Viewer(enabled=True, port=0)
    counter, model, datamodule, trainer, thread = _start_fit(scene, seconds, out, viewer)
    result: dict[str, Any] = {"watched": watch}
    if watch:
        while counter.begin is None and thread.is_alive():
            time.sleep(0.01)
        session = viewer.session
        connected: list[float] = []
        session.server.on_client_connect(lambda _: connected.append(time.perf_counter()))
        with sync_playwright() as playwright:
            browser = Browser(playwright, session.url, pin)
            while session.frames_sent == 0:
                time.sleep(0.005)
            result["first_frame_s"] = time.perf_counter() - browser.opened
            result["page_connected_s"] = connected[0] - browser.opened if connected else None
            thread.join()
            result["browser_cores"] = browser.cores()
            result["frames_sent"] = session.frames_sent
            result["viewer_share"] = viewer.training_render_seconds / (time.perf_counter() - browser.opened)
            browser.close()
    thread.join()
    result["rays_per_s"] = counter.rate
    result["steps"] = trainer.global_step
    return result | {"model": model, "datamodule": datamodule}


def control_phase(scene: Path, seconds: float, out: Path, pin: bool, trained: NerfModule) -> dict[str, Any]:
    """A fresh fit without the viewer, measured as in :func:`fit_phase`, while the browser shows the
    page of ``view`` on ``trained``, served by a thread on the browser's core."""
    from playwright.sync_api import sync_playwright

    from nerf_lightning.viewer.trained import open_trained_view, serve

    counter, _, datamodule, trainer, thread = _start_fit(scene, seconds, out)
    while counter.begin is None and thread.is_alive():
        time.sleep(0.01)
    trained.eval()
    session, _ = open_trained_view(trained, datamodule, host="127.0.0.1", port=0, max_resolution=512,
                                   camera_path_out=out / "camera_path.json")
    stop = threading.Event()

    def serve_on_the_browser_core() -> None:
        if pin:
            os.sched_setaffinity(0, BROWSER_CORE)  # this thread only
        serve(session, trained, lambda: not stop.is_set())

    server = threading.Thread(target=serve_on_the_browser_core)
    server.start()
    try:
        with sync_playwright() as playwright:
            browser = Browser(playwright, session.url, pin)
            thread.join()
            cores = browser.cores()
            browser.close()
    finally:
        stop.set()
        server.join()
        session.close()
    return {"rays_per_s": counter.rate, "steps": trainer.global_step, "browser_cores": cores}


def view_phase(model: NerfModule, datamodule: NerfDataModule, seconds: float, out: Path, pin: bool
               ) -> dict[str, Any]:
    """``nerf-lightning view``'s loop on ``model``; a browser drags the camera for ``seconds``."""
    from playwright.sync_api import sync_playwright

    from nerf_lightning.viewer.trained import open_trained_view, serve

    model.eval()
    session, _ = open_trained_view(model, datamodule, host="127.0.0.1", port=0, max_resolution=512,
                                   camera_path_out=out / "camera_path.json")
    stop = threading.Event()
    loop = threading.Thread(target=serve, args=(session, model, lambda: not stop.is_set()))
    loop.start()
    sizes: list[int] = []
    try:
        with sync_playwright() as playwright:
            browser = Browser(playwright, session.url, pin)
            page = browser.page
            while session.frames_sent == 0:
                time.sleep(0.01)
            time.sleep(2.0)  # refined frames of the still camera
            page.mouse.move(500, 400)
            page.mouse.down()
            before, start = session.frames_sent, time.perf_counter()
            stamps: set[float] = set()  # camera updates the page sent: it sends one per frame it draws
            while (now := time.perf_counter()) - start < seconds:  # a continuous orbit, back and forth
                page.mouse.move(500 + 200 * math.sin(2.0 * (now - start)), 400)
                time.sleep(0.02)
                sizes.append(session.budget.pixels(0.1))
                stamps.update(client.camera.update_timestamp for client in session.clients())
            elapsed = time.perf_counter() - start
            moving_frames = session.frames_sent - before
            page.mouse.up()
            cores = browser.cores()
            browser.close()
    finally:
        stop.set()
        loop.join()
        session.close()
    return {"moving_fps": moving_frames / elapsed, "moving_frame_pixels": sorted(sizes)[len(sizes) // 2],
            "camera_updates_per_s": len(stamps) / elapsed, "browser_cores": cores}


def bare_page_phase(rounds: int, pin: bool) -> list[float]:
    """Seconds from opening the page of an empty viser server (no scene, no training) to its
    connecting, each round a fresh browser: what the browser's own start-up of viser's client
    costs on this machine, the floor under ``first_frame_s``."""
    import viser
    from playwright.sync_api import sync_playwright

    with contextlib.redirect_stdout(io.StringIO()):
        server = viser.ViserServer(host="127.0.0.1", port=0, verbose=False)
    connects: list[float] = []
    server.on_client_connect(lambda _: connects.append(time.perf_counter()))
    seconds = []
    try:
        for _ in range(rounds):
            before = len(connects)
            with sync_playwright() as playwright:
                browser = Browser(playwright, f"http://127.0.0.1:{server.get_port()}", pin)
                while len(connects) == before and time.perf_counter() - browser.opened < 60:
                    time.sleep(0.005)
                seconds.append(connects[before] - browser.opened if len(connects) > before else math.inf)
                browser.close()
    finally:
        server.stop()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scene", type=Path, default=Path("data/demo"))
    parser.add_argument("--seconds", type=float, default=30.0, help="measured training seconds per phase")
    parser.add_argument("--view-seconds", type=float, default=8.0)
    parser.add_argument("--repeats", type=int, default=2, help="rounds of fits: alone, watched, elsewhere")
    parser.add_argument("--out", type=Path, default=Path("bench_out/viewer"))
    several = len(os.sched_getaffinity(0)) > 1
    parser.add_argument("--pin", action=argparse.BooleanOptionalAction, default=several,
                        help="training on the first core, the browser on the last")
    parser.add_argument("--page-only", action="store_true",
                        help="only the bare page's connect time (bare_page_connected_s); no fits")
    args = parser.parse_args()
    if args.pin:  # before any thread starts: they inherit the main thread's affinity
        cores = sorted(os.sched_getaffinity(0))
        BROWSER_CORE.add(cores[-1])
        os.sched_setaffinity(0, {cores[0]})
    if not (args.scene / "transforms_train.json").is_file():
        from nerf_lightning.datasets.demo_scene import make_demo_scene

        make_demo_scene(args.scene)
    args.out.mkdir(parents=True, exist_ok=True)
    bare_page = bare_page_phase(3, args.pin)
    if args.page_only:
        print(json.dumps({"bare_page_connected_s": bare_page, "pinned": args.pin}))
        return
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {"alone": [], "watched": [], "elsewhere": []}
    for repeat in range(args.repeats):  # alternated, so a change in the machine's load hits all alike
        for watch in (False, True):
            kind = "watched" if watch else "alone"
            folder = args.out / f"{kind}{repeat}"
            runs[kind].append(fit_phase(args.scene, args.seconds, watch, folder, args.pin))
        trained = runs["watched"][-1]["model"]
        runs["elsewhere"].append(control_phase(args.scene, args.seconds, args.out / f"elsewhere{repeat}",
                                               args.pin, trained))
    watched = runs["watched"][-1]
    view = view_phase(watched["model"], watched["datamodule"], args.view_seconds, args.out, args.pin)
    rates = {kind: [run["rays_per_s"] for run in kind_runs] for kind, kind_runs in runs.items()}
    median = {kind: statistics.median(kind_rates) for kind, kind_rates in rates.items()}
    report = {
        "first_frame_s": [run["first_frame_s"] for run in runs["watched"]],
        "throughput_ratio": median["watched"] / median["alone"],
        "viewer_throughput_ratio": median["watched"] / median["elsewhere"],
        "browser_elsewhere_ratio": median["elsewhere"] / median["alone"],
        "rays_per_s": rates,
        "page_connected_s": [run["page_connected_s"] for run in runs["watched"]],
        "bare_page_connected_s": bare_page,
        "frames_sent_while_training": [run["frames_sent"] for run in runs["watched"]],
        "browser_cores_while_training": [run["browser_cores"] for run in runs["watched"]],
        "browser_cores_elsewhere": [run["browser_cores"] for run in runs["elsewhere"]],
        "viewer_share_while_watched": [run["viewer_share"] for run in runs["watched"]],
        "view_moving_fps": view["moving_fps"],
        "view_moving_frame_pixels": view["moving_frame_pixels"],
        "view_camera_updates_per_s": view["camera_updates_per_s"],
        "browser_cores_while_moving": view["browser_cores"],
        "pinned": args.pin,
        "load_average_1min": [load_before[0], os.getloadavg()[0]],
        "seconds": args.seconds,
        "machine": machine(),
    }
    (args.out / "viewer.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({key: value for key, value in report.items() if key != "machine"}, indent=1))


if __name__ == "__main__":
    flush_subnormals()  # before any thread starts, as the nerf-lightning script does
    main()
