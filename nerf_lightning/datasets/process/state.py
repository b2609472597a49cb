"""``process.json``: which stages of ``data process`` are done, for which inputs.

Each stage's *key* is a sha256 of everything its output depends on, chained: the photos' names, sizes
and contents (hashed once per version of each file, :class:`~nerf_lightning.files.DigestMemo`) with the
options that shape the features, then the matcher, then the mapper's settings. For a video the chain
starts one stage earlier: ``extraction``'s key is the video's size and content with the frame options,
and the features' key takes it in place of the photos (which extraction writes). A stage whose recorded
key equals the key now is skipped, as the pipeline skips its stages (:mod:`nerf_lightning.pipeline`); a
changed key redoes that stage and every later one. The file is written atomically after every stage, so
an interrupted run resumes after the last finished stage.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nerf_lightning.files import DigestMemo, atomic_write_json

STATE_FILE = "process.json"
STATE_FORMAT, STATE_VERSION = "nerf-lightning data process", 1
STAGES = ("extraction", "features", "matches", "mapping")
"""The stages worth skipping (placing the photos and writing transforms.json take a moment);
``extraction`` only for a video (photos have no key for it)."""
EXTRACTION_VERSION = 1
"""Part of the extraction key: a change to how frames are chosen or written redoes extraction."""


def value_key(value: Any) -> str:
    """sha256 of a JSON-able value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def stage_keys(photos: list[Path], settings: dict[str, Any], pycolmap_version: str, *,
               video: Path | None = None) -> dict[str, str]:
    """The key of each of :data:`STAGES` (see the module docstring); ``extraction`` only for a video.

    Args:
        photos: the photos, all in one folder (ignored for a video).
        settings: ``camera_model``, ``max_image_size``, ``copy``, ``deterministic`` (features), ``matcher``
            (resolved) and, for a video, ``num_frames``.
        pycolmap_version: another version may find other features.
        video: the video the photos are extracted from.
    """
    keys = {}
    if video is not None:
        with DigestMemo(None, scope=video.parent) as memo:
            content = list(memo.digest(video))
        keys["extraction"] = value_key(["extraction", EXTRACTION_VERSION, content, settings["num_frames"]])
        images: Any = keys["extraction"]
    else:
        with DigestMemo(None, scope=photos[0].parent) as memo:
            images = [[p.name, *memo.digest(p)] for p in photos]
    # copy is part of the first key only so that a changed --copy places the photos again (they are
    # placed with the features); redoing the stages after it is the price of one simple rule.
    threads = "one thread" if settings["deterministic"] else "every core"
    keys["features"] = value_key(["features", images, pycolmap_version, settings["camera_model"],
                                  settings["max_image_size"], settings["copy"], threads])
    keys["matches"] = value_key(["matches", keys["features"], settings["matcher"]])
    keys["mapping"] = value_key(["mapping", keys["matches"], "incremental", "seed 0", "largest model"])
    return keys


@dataclass
class ProcessState:
    """The content of ``process.json``: ``keys`` of the finished stages, their ``seconds``, the options
    and source, the model's summary once mapped, the names of a video's extracted ``frames`` and the
    factors of the ``downscaled`` copies written."""

    source: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    complete: bool = False
    frames: list[str] = field(default_factory=list)
    downscaled: list[int] = field(default_factory=list)

    def done(self, stage: str, keys: dict[str, str]) -> bool:
        """Whether ``stage`` and every stage before it (that has a key now) finished with the keys of now."""
        before = STAGES[: STAGES.index(stage) + 1]
        return all(self.keys.get(name) == keys[name] for name in before if name in keys)

    def finish(self, stage: str, key: str, seconds: float) -> None:
        """Record ``stage`` as done; the later stages are forgotten (their inputs changed)."""
        for later in STAGES[STAGES.index(stage):]:
            self.keys.pop(later, None)
            self.seconds.pop(later, None)
        self.keys[stage], self.seconds[stage] = key, round(seconds, 3)
        self.complete = False

    def write(self, folder: Path) -> None:
        atomic_write_json({"format": STATE_FORMAT, "version": STATE_VERSION, "source": self.source,
                           "options": self.options, "complete": self.complete, "keys": self.keys,
                           "seconds": self.seconds, "summary": self.summary, "frames": self.frames,
                           "downscaled": self.downscaled}, folder / STATE_FILE)


def read_state(folder: Path) -> ProcessState | None:
    """``folder/process.json``, or ``None`` when absent, unreadable or of another version (the stages
    are then redone: a lost state costs time, never a wrong result)."""
    try:
        raw = json.loads((folder / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or raw.get("format") != STATE_FORMAT or raw.get("version") != STATE_VERSION:
        return None
    try:
        return ProcessState(source=str(raw["source"]), options=dict(raw["options"]), keys=dict(raw["keys"]),
                            seconds=dict(raw["seconds"]), summary=dict(raw["summary"]),
                            complete=bool(raw["complete"]), frames=list(raw.get("frames", [])),
                            downscaled=[int(f) for f in raw.get("downscaled", [])])
    except (KeyError, TypeError, ValueError):
        return None
