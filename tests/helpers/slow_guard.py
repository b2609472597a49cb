"""The ``slow`` mark, enforced: a test not marked ``slow`` that starts a Trainer, a LightningCLI or a
process fails, naming what it started and the fix (``@pytest.mark.slow``).

``make test-fast`` (``-m "not slow"``) relies on the mark: one unmarked test that trains turns the
quick loop into a slow one without anybody noticing. Here each start is checked where it happens:

* ``lightning.pytorch.Trainer.__init__`` and ``lightning.pytorch.cli.LightningCLI.__init__`` are
  wrapped as soon as their modules are imported (an import hook, so a test file that never imports
  Lightning does not pay for its import), ``subprocess.Popen.__init__`` and
  ``multiprocessing``'s ``Process.start`` from the start;
* while an unmarked test is set up or run, any of them raises :class:`UnmarkedSlowTest`, a
  ``BaseException`` so that no ``except Exception`` on the way (the CLI turns errors into exit codes)
  hides it;
* a fixture that started one is remembered whoever requested it, so an unmarked test that merely
  uses a fixture a slow test built earlier (a session-scoped trained run) fails too, whichever
  order the tests run in.

Registered as a plugin by ``tests/conftest.py``, so it sees every test, including the plugins' tests
and session fixtures (whose setup a conftest's own hooks would not see).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import multiprocessing.process
import subprocess
import sys
from collections.abc import Callable, Generator, Sequence
from types import ModuleType
from typing import Any

import pytest

FIX = "mark this test slow (@pytest.mark.slow)"


class UnmarkedSlowTest(BaseException):
    """A test not marked ``slow`` started a Trainer, a LightningCLI or a process."""


class SlowMarkGuard:
    """Raises :class:`UnmarkedSlowTest` on a start while an unmarked test is being set up or run."""

    def __init__(self) -> None:
        self.unmarked: pytest.Item | None = None  # the unmarked test now in setup or call
        self.fixtures: list[Any] = []  # FixtureDefs being set up, innermost last
        self.heavy: dict[Any, str] = {}  # FixtureDef -> what its setup started

    # ------------------------------------------------------------------------- what the wrappers call
    def started(self, what: str) -> None:
        for fixturedef in self.fixtures:
            self.heavy.setdefault(fixturedef, what)
        if self.unmarked is not None:
            where = f" in the fixture '{self.fixtures[-1].argname}'" if self.fixtures else ""
            raise UnmarkedSlowTest(f"{self.unmarked.nodeid}: {FIX}: it starts {what}{where}")

    def heavy_fixtures(self, item: pytest.Item) -> list[str]:
        """``name (what it starts)`` of the fixtures ``item`` uses that started something when set up."""
        info = getattr(item, "_fixtureinfo", None)
        if info is None:
            return []
        found = []
        for name in info.names_closure:
            for fixturedef in info.name2fixturedefs.get(name, ()):
                if fixturedef in self.heavy:
                    found.append(f"'{name}' ({self.heavy[fixturedef]})")
        return found

    # ------------------------------------------------------------------------------------- pytest hooks
    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any,
                             request: pytest.FixtureRequest) -> Generator[None, Any, Any]:
        self.fixtures.append(fixturedef)
        try:
            return (yield)
        finally:
            self.fixtures.pop()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        if item.get_closest_marker("slow") is not None:
            return (yield)
        heavy = self.heavy_fixtures(item)
        if heavy:
            raise UnmarkedSlowTest(f"{item.nodeid}: {FIX}: it uses the fixture {', '.join(heavy)}")
        self.unmarked = item
        try:
            return (yield)
        finally:
            self.unmarked = None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        if item.get_closest_marker("slow") is not None:
            return (yield)
        self.unmarked = item
        try:
            return (yield)
        finally:
            self.unmarked = None


GUARD = SlowMarkGuard()


def _guarded(original: Callable[..., Any], what: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        GUARD.started(what)
        return original(*args, **kwargs)

    wrapper.__slow_guard__ = True  # type: ignore[attr-defined]
    return wrapper


def _wrap(cls: type, method: str, what: str) -> None:
    original = cls.__dict__[method]
    if not getattr(original, "__slow_guard__", False):
        setattr(cls, method, _guarded(original, what))


LIGHTNING = {
    "lightning.pytorch.trainer.trainer": lambda module: _wrap(module.Trainer, "__init__", "a Trainer"),
    "lightning.pytorch.cli": lambda module: _wrap(module.LightningCLI, "__init__", "a LightningCLI"),
}
"""Module -> how to wrap its class once the module has run."""


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds ``LIGHTNING``'s modules with the other finders and wraps their classes once loaded."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name not in LIGHTNING:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path, target)
        if spec is None or spec.loader is None:
            return None
        execute = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            execute(module)
            LIGHTNING[name](module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install(config: pytest.Config) -> None:
    """Wrap the starts and register the guard's hooks (once per process)."""
    if config.pluginmanager.has_plugin("slow-mark-guard"):
        return
    _wrap(subprocess.Popen, "__init__", "a subprocess")
    _wrap(multiprocessing.process.BaseProcess, "start", "a process (multiprocessing)")
    for name, wrap in LIGHTNING.items():
        if name in sys.modules:
            wrap(sys.modules[name])
    sys.meta_path.insert(0, _WrapOnImport())
    config.pluginmanager.register(GUARD, "slow-mark-guard")
