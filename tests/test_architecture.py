"""The package's floor plan as one table: which layer may import which, checked on every import of every
module (deferred and type-only imports included), no import circle, no loose module at the root, no
layer holding more than a fifth of the package.

A layer is a folder of ``nerf_lightning``; its ``__init__`` docstring says what it is. Imports point down
the table: a layer may import itself and the layers it lists, nothing else.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "nerf_lightning"

MAY_IMPORT: dict[str, set[str]] = {
    # shared ground
    "core": set(),
    "files": set(),
    "config": {"core"},
    "nn": {"core"},
    "cameras": {"core", "nn"},
    "rendering": {"core", "files", "cameras"},
    # the parts of a model: fields and samplers never import each other
    "fields": {"core", "nn"},
    "samplers": {"core", "nn", "rendering"},
    "testing": {"core", "nn", "rendering", "samplers"},
    # data: scenes on disk, making datasets, what training draws; none of it knows a model
    "scenes": {"core", "files", "cameras"},
    "datasets": {"core", "files", "cameras", "scenes"},
    "data": {"core", "files", "cameras", "scenes", "datasets"},
    "evaluation": {"core", "files", "cameras", "scenes"},
    # training and what observes or uses it
    "system": {"core", "nn", "cameras", "rendering", "fields", "samplers", "scenes", "data", "evaluation"},
    "viewer": {"core", "files", "cameras", "rendering", "scenes", "data", "system"},
    "callbacks": {"core", "files", "cameras", "rendering", "fields", "samplers", "scenes", "data",
                  "evaluation", "system", "viewer"},
    "runs": {"core", "files", "config", "samplers", "scenes", "data", "system"},
    "export": {"core", "files", "nn", "cameras", "rendering", "fields", "samplers", "scenes", "datasets",
               "data", "system"},
    "pipeline": {"core", "files", "config", "rendering", "scenes", "datasets", "runs"},
    "sweeps": {"core", "files", "config", "runs"},
    # the command layer wires everything
    "commands": {"core", "files", "config", "nn", "cameras", "rendering", "fields", "samplers", "testing",
                 "scenes", "datasets", "data", "evaluation", "system", "viewer", "callbacks", "runs",
                 "export", "pipeline", "sweeps"},
}
"""Per layer, the layers it may import (besides itself)."""

ROOT_MODULES: dict[str, set[str]] = {
    "__init__": set(),
    "types": {"core"},  # the shared types under their public name, for plugin authors
    "cli": {"core", "commands"},
    "__main__": {"cli"},
    "demo": {"core", "commands", "config"},  # core: the process set-up every entry point does first
}
"""The package root holds only entry points and the public face, each with what it may import."""

LARGEST_SHARE = 0.20
"""No layer holds more than this share of the package's lines."""


@dataclass(frozen=True)
class Import:
    """One import statement's target inside the package: ``importer`` (a file) imports ``target``."""

    importer: Path
    line: int
    target: str  # a dotted name under nerf_lightning


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, package: Path) -> list[Import]:
    """Every import of ``path`` that names the package (module-level, deferred and ``TYPE_CHECKING``)."""
    name = module_name(path, package)
    top = package.name
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                here = parts if path.name == "__init__.py" else parts[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            targets = [base]
        else:
            continue
        found += [Import(path, node.lineno, t) for t in targets if t == top or t.startswith(top + ".")]
    return found


def layer_of(dotted: str) -> str:
    """``nerf_lightning.samplers.occupancy.grid`` -> ``samplers``; a root module -> its own name."""
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def breaches(package: Path) -> list[str]:
    """Every import that breaks :data:`MAY_IMPORT` or :data:`ROOT_MODULES`, one line each naming the
    file, its line and the import."""
    found = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if len(relative.parts) == 1:
            layer = relative.stem
            allowed = ROOT_MODULES.get(layer)
            if allowed is None:
                found.append(f"{relative}: a loose module at the package root; move it into the folder of "
                             f"its layer")
                continue
        else:
            layer = relative.parts[0]
            if layer not in MAY_IMPORT:
                found.append(f"{relative}: folder {layer!r} is not a layer of tests/test_architecture.py")
                continue
            allowed = MAY_IMPORT[layer]
        for imported in imports_of(path, package):
            target = layer_of(imported.target)
            if target == "__init__" and imported.target == package.name:
                target = "__init__"
            if target != layer and target not in allowed:
                found.append(f"{relative}:{imported.line}: layer {layer!r} imports {imported.target} "
                             f"(layer {target!r}); it may import only {sorted(allowed) or 'nothing'}")
    return found


def circles(package: Path) -> list[str]:
    """Import circles between modules, type-only imports included (one line per circle)."""
    modules = {module_name(path, package): path for path in package.rglob("*.py")}

    def resolve(target: str) -> str | None:
        # `from package import module` names the module; `from package import name` the package
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    graph = {name: {t for i in imports_of(path, package) if (t := resolve(i.target)) not in (None, name)}
             for name, path in modules.items()}
    found: list[str] = []
    state: dict[str, int] = {}

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                found.append(" -> ".join([*trail[trail.index(target):], target]))
            elif target not in state:
                visit(target, [*trail, target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    return found


def test_every_import_points_down_the_layers() -> None:
    found = breaches(PACKAGE)
    assert not found, "\n".join(found)


def test_no_import_circle() -> None:
    found = circles(PACKAGE)
    assert not found, "\n".join(found)


def test_every_layer_is_a_folder_that_says_what_it_is() -> None:
    folders = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert folders == set(MAY_IMPORT)
    undocumented = [name for name in sorted(folders) if not ast.get_docstring(ast.parse(
        (PACKAGE / name / "__init__.py").read_text()))]
    assert not undocumented, f"layers whose __init__ has no docstring: {undocumented}"


def test_no_layer_holds_more_than_a_fifth_of_the_package() -> None:
    lines = {layer: sum(len(p.read_text().splitlines()) for p in (PACKAGE / layer).rglob("*.py"))
             for layer in MAY_IMPORT}
    total = sum(len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py"))
    over = {layer: f"{count / total:.0%}" for layer, count in lines.items() if count > LARGEST_SHARE * total}
    assert not over, f"layers over {LARGEST_SHARE:.0%} of {total} lines: {over}"


def test_the_table_has_no_circle_of_its_own() -> None:
    done: set[str] = set()

    def visit(layer: str, trail: tuple[str, ...]) -> None:
        assert layer not in trail, f"layers import each other: {' -> '.join([*trail, layer])}"
        for lower in sorted(MAY_IMPORT[layer]):
            if lower not in done:
                visit(lower, (*trail, layer))
        done.add(layer)

    for layer in sorted(MAY_IMPORT):
        visit(layer, ())


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A two-layer copy of the package's shape: ``core`` (bottom) and ``samplers``, all imports legal."""
    package = tmp_path / "nerf_lightning"
    for folder in ("core", "samplers"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text(f'"""Layer {folder}."""\n')
    (package / "__init__.py").write_text("")
    (package / "core" / "types.py").write_text("X = 1\n")
    (package / "samplers" / "base.py").write_text("from nerf_lightning.core.types import X\n")
    return package


def test_the_checker_names_an_upward_import(planted: Path) -> None:
    assert breaches(planted) == [] and circles(planted) == []
    (planted / "core" / "helpers.py").write_text(
        "from typing import TYPE_CHECKING\n\n"
        "if TYPE_CHECKING:\n    from nerf_lightning.samplers import base\n"
    )
    assert breaches(planted) == [
        "core/helpers.py:4: layer 'core' imports nerf_lightning.samplers (layer 'samplers'); "
        "it may import only nothing"
    ]


def test_the_checker_names_a_circle_and_a_loose_module(planted: Path) -> None:
    (planted / "samplers" / "grid.py").write_text("def f():\n"
                                                  "    from nerf_lightning.samplers.base import X\n")
    (planted / "samplers" / "base.py").write_text("from nerf_lightning.samplers.grid import f\n")
    (planted / "helpers.py").write_text("")
    assert circles(planted) == ["nerf_lightning.samplers.base -> nerf_lightning.samplers.grid -> "
                                "nerf_lightning.samplers.base"]
    assert breaches(planted) == ["helpers.py: a loose module at the package root; move it into the folder "
                                 "of its layer"]
