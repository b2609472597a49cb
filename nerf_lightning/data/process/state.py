"""``process.json``: which stages of ``data process`` are done, for which inputs.

Each stage's *key* is a sha256 of everything its output depends on, chained: the photos' names, sizes
and contents (hashed once per version of each file, :class:`~nerf_lightning.files.DigestMemo`) with the
options that shape the features, then the matcher, then the mapper's settings. A stage whose recorded
key equals the key now is skipped, as the pipeline skips its stages (:mod:`nerf_lightning.pipeline`);
a changed key redoes that stage and every later one. The file is written atomically after every stage,
so an interrupted run resumes after the last finished stage.
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
STAGES = ("features", "matches", "mapping")
"""The stages worth skipping (placing the photos and writing transforms.json take a moment)."""


def value_key(value: Any) -> str:
    """sha256 of a JSON-able value."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def stage_keys(photos: list[Path], settings: dict[str, Any], pycolmap_version: str) -> dict[str, str]:
    """The key of each of :data:`STAGES` (see the module docstring).

    Args:
        photos: the photos, all in one folder.
        settings: ``camera_model``, ``max_image_size``, ``copy`` (features) and ``matcher`` (resolved).
        pycolmap_version: another version may find other features.
    """
    with DigestMemo(None, scope=photos[0].parent) as memo:
        contents = [[p.name, *memo.digest(p)] for p in photos]
    # copy is part of the first key only so that a changed --copy places the photos again (they are
    # placed with the features); redoing the stages after it is the price of one simple rule.
    features = value_key(["features", contents, pycolmap_version, settings["camera_model"],
                          settings["max_image_size"], settings["copy"]])
    matches = value_key(["matches", features, settings["matcher"]])
    mapping = value_key(["mapping", matches, "incremental", "seed 0", "largest model"])
    return {"features": features, "matches": matches, "mapping": mapping}


@dataclass
class ProcessState:
    """The content of ``process.json``: ``keys`` of the finished stages, their ``seconds``, the options
    and source, and the model's summary once mapped."""

    source: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    complete: bool = False

    def done(self, stage: str, keys: dict[str, str]) -> bool:
        """Whether ``stage`` and every stage before it finished with the keys of now."""
        before = STAGES[: STAGES.index(stage) + 1]
        return all(self.keys.get(name) == keys[name] for name in before)

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
                           "seconds": self.seconds, "summary": self.summary}, folder / STATE_FILE)


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
                            complete=bool(raw["complete"]))
    except (KeyError, TypeError, ValueError):
        return None
