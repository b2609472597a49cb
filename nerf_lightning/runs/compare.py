"""``nerf-lightning compare RUN_A RUN_B``: what differs between two recorded runs."""

from __future__ import annotations

import json
from typing import Any

from nerf_lightning.runs.record import load_run_record

SECTIONS = {
    "config": ("config", "seed"),
    "environment": ("git", "versions", "sampler_plugins", "machine", "world_size"),
    "data": ("data",),
    "metrics": ("metrics", "global_step", "status"),
}
COLUMN = 40
"""The widest the A column is padded to: a longer value (a list, a path) runs past it."""
_IGNORED = ("config.trainer.default_root_dir", "config.config", "machine.hostname")


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts → ``{"a.b.c": leaf}``; lists of plugins are keyed by their name."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and value and all(isinstance(v, dict) and "name" in v for v in value):
        return flatten({v["name"]: {k: x for k, x in v.items() if k != "name"} for v in value}, prefix)
    return {prefix: value}


def show_value(value: Any) -> str:
    """A value as a comparison or ledger shows it: floats to 6 significant digits, lists and dicts as JSON."""
    if isinstance(value, float):
        return f"{value:.6g}"
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def compare_runs(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """Rows ``(section, key, value in a, value in b)`` for every leaf that differs."""
    rows = []
    for section, keys in SECTIONS.items():
        left = flatten({k: a.get(k) for k in keys})
        right = flatten({k: b.get(k) for k in keys})
        for key in sorted(set(left) | set(right)):
            if key.startswith(_IGNORED):
                continue
            if left.get(key, "<absent>") != right.get(key, "<absent>"):
                rows.append((section, key, show_value(left.get(key, "<absent>")),
                             show_value(right.get(key, "<absent>"))))
    return rows


def format_comparison(name_a: str, name_b: str, a: dict[str, Any], b: dict[str, Any]) -> str:
    rows = compare_runs(a, b)
    width_key = max([len(r[1]) for r in rows] + [3])
    width_a = min(COLUMN, max([len(r[2]) for r in rows] + [len("A")]))  # a long value overflows its column
    lines = [
        f"A: {name_a}  ({a.get('start_time')} .. {a.get('end_time')}, {a.get('status')})",
        f"B: {name_b}  ({b.get('start_time')} .. {b.get('end_time')}, {b.get('status')})",
    ]
    for section in SECTIONS:
        section_rows = [r for r in rows if r[0] == section]
        if not section_rows:
            lines.append(f"\n[{section}] identical")
            continue
        lines.append(f"\n[{section}] {len(section_rows)} difference(s)")
        lines.append(f"  {'key'.ljust(width_key)}  {'A'.ljust(width_a)}  B")
        for _, key, left, right in section_rows:
            lines.append(f"  {key.ljust(width_key)}  {left.ljust(width_a)}  {right}")
    return "\n".join(lines)


def run_compare(dir_a: str, dir_b: str) -> str:
    return format_comparison(dir_a, dir_b, load_run_record(dir_a), load_run_record(dir_b))
