"""The test suite's own rules: its folders mirror the package's layers, no test file imports another
test file or a ``conftest`` (what several share lives in ``tests/helpers``), the ``slow`` mark is
enforced, and ``make test``'s scheduler still finds the files it runs one after the other."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import scheduling, slow_guard
from tests.helpers.runs import REPO

TESTS = REPO / "tests"
PACKAGE = REPO / "nerf_lightning"
OUTSIDE_THE_PACKAGE = {"benchmarks": REPO / "benchmarks", "helpers": None}
"""Test folders that mirror no layer of the package: the benchmarks' tests, and the shared helpers."""
WHOLE_PACKAGE = {"test_architecture.py", "test_suite_layout.py"}
"""The only test files directly in ``tests/``: rules about the whole package or the whole suite."""


def _python_files() -> list[Path]:
    return sorted(path for path in TESTS.rglob("*.py") if "__pycache__" not in path.parts)


def _is_test_module(name: str) -> bool:
    return name == "conftest" or name.startswith("test_")


def _imported_test_modules(path: Path) -> list[str]:
    """``line: statement`` of each import in ``path`` (at any depth, in functions too) that names a test
    module or a conftest, or imports relatively (which can reach them unnamed)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append(f"{node.lineno}: a relative import")
                continue
            module = node.module or ""
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            if any(_is_test_module(part) for part in name.split(".")):
                found.append(f"{node.lineno}: {name}")
    return found


def test_no_test_file_imports_another_test_file_or_a_conftest() -> None:
    offenders = {str(path.relative_to(REPO)): found for path in _python_files()
                 if (found := _imported_test_modules(path))}
    assert not offenders, f"import what several test files share from tests/helpers instead: {offenders}"


def test_the_import_check_sees_every_spelling(tmp_path: Path) -> None:
    spellings = ["from tests.scenes.test_loaders import write_blender", "import tests.datasets.test_convert",
                 "from tests.datasets import test_convert", "from tests.conftest import tiny_scene",
                 "from . import helpers", "def f():\n    from tests.data.test_ray_batches import x"]
    for code in spellings:
        (tmp_path / "test_probe.py").write_text(code + "\n")
        assert _imported_test_modules(tmp_path / "test_probe.py"), code
    (tmp_path / "test_probe.py").write_text("from tests.helpers.datasets import write_blender\nimport os\n")
    assert _imported_test_modules(tmp_path / "test_probe.py") == []


def _layers() -> set[str]:
    return {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}


def test_every_test_file_lives_in_the_folder_of_its_layer() -> None:
    """``tests/<layer>/test_*.py`` for a layer (subpackage) of ``nerf_lightning``, or one folder deeper
    where the layer has subpackages (``tests/samplers/occupancy/``); ``tests/benchmarks/`` for
    ``benchmarks/``; no test file in ``tests/helpers/``."""
    folders = _layers() | set(OUTSIDE_THE_PACKAGE)
    misplaced = []
    for path in sorted(TESTS.rglob("test_*.py")):
        parts = path.relative_to(TESTS).parts
        if len(parts) == 1:
            if parts[0] not in WHOLE_PACKAGE:
                misplaced.append(f"{path.relative_to(REPO)}: in no layer's folder")
        elif parts[0] == "helpers":
            misplaced.append(f"{path.relative_to(REPO)}: tests/helpers holds what test files share, no tests")
        elif parts[0] not in folders:
            misplaced.append(f"{path.relative_to(REPO)}: tests/{parts[0]} mirrors no layer of nerf_lightning "
                             f"({', '.join(sorted(folders - {'helpers'}))})")
        elif len(parts) > 2 and not (PACKAGE.joinpath(*parts[:-1]) / "__init__.py").is_file():
            misplaced.append(f"{path.relative_to(REPO)}: nerf_lightning/{'/'.join(parts[:-1])} is no package")
    assert not misplaced, misplaced
    for folder, source in OUTSIDE_THE_PACKAGE.items():
        assert source is None or source.is_dir(), f"tests/{folder} mirrors {source}, which is gone"


def test_every_test_folder_is_a_package() -> None:
    """Test files of the same name in two folders (``test_export.py``) import as different modules."""
    folders = {path.parent for path in _python_files()}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_the_files_run_one_after_the_other_exist_and_are_scheduled_as_one_unit() -> None:
    for name in scheduling.SEVERAL_AT_ONCE:
        found = list(TESTS.rglob(name))
        assert len(found) == 1, f"{name}: {found} (the scheduler matches file basenames)"
        nodeid = f"{found[0].relative_to(REPO).as_posix()}::test_x"
        assert scheduling.scope(nodeid) == "several-at-once"
    assert scheduling.scope("tests/scenes/test_cache.py::test_x[a::b]") == "tests/scenes/test_cache.py"


def test_the_longest_units_are_handed_out_first_and_each_keeps_its_order() -> None:
    stale = [unit for unit in scheduling.HEAVY_FIRST
             if unit != "several-at-once" and not (REPO / unit).is_file()]
    assert stale == [], "HEAVY_FIRST names test files that are gone"
    nodeids = ["tests/a/test_a.py::one", "tests/viewer/test_viewer.py::first", "tests/a/test_a.py::two",
               "tests/runs/test_runs.py::x", "tests/viewer/test_viewer.py::second"]
    assert scheduling.heavy_first(nodeids) == [
        "tests/runs/test_runs.py::x", "tests/viewer/test_viewer.py::first",
        "tests/viewer/test_viewer.py::second", "tests/a/test_a.py::one", "tests/a/test_a.py::two"]


# ---------------------------------------------------------------------------------- the slow mark


def test_an_unmarked_test_that_starts_a_process_or_a_trainer_fails_saying_so() -> None:
    """This test is not marked slow: the guard stops each start (a ``BaseException``, so that no
    ``except Exception`` on the way swallows it)."""
    import lightning.pytorch as pl
    from lightning.pytorch.cli import LightningCLI

    expected = r"test_suite_layout\.py::.*: mark this test slow \(@pytest\.mark\.slow\): it starts "
    with pytest.raises(slow_guard.UnmarkedSlowTest, match=expected + "a subprocess$"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    with pytest.raises(slow_guard.UnmarkedSlowTest, match=expected + "a Trainer$"):
        pl.Trainer(logger=False)
    with pytest.raises(slow_guard.UnmarkedSlowTest, match=expected + "a LightningCLI$"):
        LightningCLI(args=["--help"])
    assert not issubclass(slow_guard.UnmarkedSlowTest, Exception)


@pytest.fixture
def starts_a_process() -> int:
    return subprocess.run([sys.executable, "-c", "pass"], check=False).returncode


def test_a_fixture_that_starts_one_fails_the_unmarked_test_that_uses_it(
        request: pytest.FixtureRequest) -> None:
    expected = "it starts a subprocess in the fixture 'starts_a_process'$"
    with pytest.raises(slow_guard.UnmarkedSlowTest, match=expected):
        request.getfixturevalue("starts_a_process")
    # Set up once by a slow test (the guard remembers what it started), a fixture still fails an
    # unmarked test that uses it, whichever ran first.
    fixturedefs = request._fixturemanager.getfixturedefs("starts_a_process", request.node)
    assert fixturedefs and slow_guard.GUARD.heavy.get(fixturedefs[-1]) == "a subprocess"


@pytest.mark.slow
def test_a_test_marked_slow_may_start_them() -> None:
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0
