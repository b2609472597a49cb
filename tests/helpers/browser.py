"""Driving a real browser for the viewer's tests: Debian's Chromium through Playwright.

Playwright's own browser downloads are not used: Playwright launches the system's ``chromium``
(``.ci/run`` installs it with apt-get when it is missing and it may). When Chromium, Playwright or
viser is missing, :func:`browser_missing` says which, for the tests' skip reason.
"""

from __future__ import annotations

import importlib.util
import io
import shutil
import time
from collections.abc import Callable

import numpy as np
from PIL import Image

# Headless Chromium has no GPU: WebGL runs on SwiftShader, which newer Chromium only allows when asked.
CHROMIUM_ARGS = ["--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--ignore-gpu-blocklist"]


def chromium_path() -> str | None:
    """The system's Chromium (Debian names it ``chromium``, Ubuntu ``chromium-browser``)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def browser_missing() -> str | None:
    """Why the browser tests cannot run here, or ``None``."""
    for module, extra in (("viser", "viewer"), ("playwright", "viewer")):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed (pip install 'nerf-lightning[{extra}]')"
    if chromium_path() is None:
        return "no chromium on PATH (apt-get install chromium; .ci/run does it when run as root)"
    return None


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout`` seconds."""
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.02)


NEUTRAL = (128, 128, 128)
UI_OVERLAYS = (".mantine-Notification-root", ".mantine-Paper-root")
"""The page's own coloured parts over the 3D view: notifications and the control panel."""


def frame_screenshot(page) -> np.ndarray:
    """``[H, W, 3]`` uint8 of the 3D view as shown, the coloured page overlays and the axes gizmo
    (drawn in the view's bottom-left corner) painted grey: what is left is the frame and the scene."""
    masks = [page.locator(selector) for selector in UI_OVERLAYS]
    png = page.screenshot(mask=masks, mask_color="#{:02x}{:02x}{:02x}".format(*NEUTRAL))
    image = np.array(Image.open(io.BytesIO(png)).convert("RGB"))
    height = image.shape[0]
    image[height - 110:, :110] = NEUTRAL
    return image


def near_colour(image: np.ndarray, colour: tuple[int, int, int], tolerance: float = 40.0) -> float:
    """Share of ``image``'s pixels within ``tolerance`` (RGB distance) of ``colour``."""
    distance = np.linalg.norm(image.reshape(-1, 3).astype(np.float64) - np.array(colour), axis=1)
    return float((distance <= tolerance).mean())


def changed_share(before: np.ndarray, after: np.ndarray, threshold: int = 30) -> float:
    """Share of pixels whose largest channel difference exceeds ``threshold``."""
    difference = np.abs(before.astype(np.int16) - after.astype(np.int16)).max(axis=-1)
    return float((difference > threshold).mean())


def hue_families(image: np.ndarray, min_saturation: float = 0.45, min_value: float = 0.25) -> dict[str, int]:
    """Pixels of clearly coloured red, yellow, green and blue hues in ``image`` (grey and white, the
    page and the scene box, count in none)."""
    hsv = np.asarray(Image.fromarray(image).convert("HSV")).reshape(-1, 3) / 255.0
    coloured = (hsv[:, 1] >= min_saturation) & (hsv[:, 2] >= min_value)
    hue = hsv[:, 0] * 360.0
    bands = {"red": (hue < 20) | (hue >= 340), "yellow": (hue >= 40) & (hue < 70),
             "green": (hue >= 90) & (hue < 170), "blue": (hue >= 200) & (hue < 250)}
    return {name: int((band & coloured).sum()) for name, band in bands.items()}
