"""``data cache`` shows each split's build going: images done, images per second, the time left."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from nerf_lightning.cli import main
from nerf_lightning.commands.cache_progress import CacheProgress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _feed(progress: CacheProgress, clock: Clock, split: str, skip: int, total: int, seconds: float) -> None:
    for done in range(skip, total + 1):
        progress(split, done, total)
        clock.now += seconds


def test_a_log_gets_a_line_every_few_seconds_and_one_for_the_last_image() -> None:
    stream, clock = io.StringIO(), Clock()
    _feed(CacheProgress(stream, every_s=10.0, clock=clock), clock, "train", 0, 10, seconds=4.0)
    assert stream.getvalue().splitlines() == [
        "data cache: train 0/10 images",  # before the first image: no rate yet
        "data cache: train 3/10 images, 0.2 images/s, 0:28 left",
        "data cache: train 6/10 images, 0.2 images/s, 0:16 left",
        "data cache: train 9/10 images, 0.2 images/s, 0:04 left",
        "data cache: train 10/10 images, 0.2 images/s, 0:40 taken",
    ]


def test_a_terminal_redraws_one_line_per_split_and_a_continued_build_counts_only_its_own_images() -> None:
    stream, clock = Terminal(), Clock()
    progress = CacheProgress(stream, clock=clock)
    _feed(progress, clock, "train", 6, 8, seconds=0.5)  # 6 images were done before an interruption
    _feed(progress, clock, "val", 0, 1, seconds=2.0)
    lines = stream.getvalue().split("\n")
    assert lines[0].split("\r\033[K")[1:] == ["data cache: train 6/8 images",
                                              "data cache: train 7/8 images, 2.0 images/s, 0:00 left",
                                              "data cache: train 8/8 images, 2.0 images/s, 0:01 taken"]
    assert lines[1].split("\r\033[K")[1:] == ["data cache: val 0/1 images",
                                              "data cache: val 1/1 images, 0.5 images/s, 0:02 taken"]
    assert lines[2] == ""


@pytest.mark.parametrize("again", [False, True], ids=["cold", "warm"])
def test_the_command_shows_each_split_it_builds(tiny_scene: Path, tmp_path: Path, again: bool,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    cache_dir = tmp_path / "cache"
    if again:
        assert main(["data", "cache", str(tiny_scene), "--cache_dir", str(cache_dir)]) == 0
        capsys.readouterr()
    assert main(["data", "cache", str(tiny_scene), "--cache_dir", str(cache_dir)]) == 0
    err = capsys.readouterr().err
    shown = [line for line in err.splitlines() if line.startswith("data cache:")]
    if again:
        assert shown == [], err  # every split was cached: nothing built
    else:
        assert [line.split(" images")[0] for line in shown if "/" in line and " 0/" not in line][-3:] == [
            "data cache: train 8/8", "data cache: val 2/2", "data cache: test 2/2"], err
