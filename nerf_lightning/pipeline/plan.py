"""What a stage of the pipeline runs: its :class:`Plan` (inputs, command, how its result is read)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Collected = tuple[dict[str, Any], dict[str, Any], str]
"""``(outputs, numbers, summary)`` of a stage's successful attempt."""


@dataclass
class Plan:
    """How to run a stage: its inputs, the command of the next attempt and what to record afterwards.

    ``command()`` is called right before each attempt and returns the arguments after
    ``nerf-lightning`` and extra fields for the stage's record; ``collect()`` is called after an
    attempt that exited 0 and reads the files it wrote, or raises :class:`OutputError`. ``always``
    runs the stage even when its record is up to date.
    """

    inputs: dict[str, Any]
    command: Callable[[], tuple[list[str], dict[str, Any]]]
    collect: Callable[[], Collected]
    always: bool = False
