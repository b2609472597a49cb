"""A constructor's ValueError names its own parameter; the config layer adds the key and the class.

The key and the class come from the instantiators the config layer wraps (what jsonargparse called,
with which arguments), never from the traceback's frames: a constructor behind a decorator, a check in a
helper it calls and a union-typed argument (whose error jsonargparse rewrites) are all named alike.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
from jsonargparse import ArgumentParser

from nerf_lightning.config.errors import ConstructorLog, constructor_error


def _check_count(count: int) -> None:
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")


class Part:
    """A component: refuses a bad argument by its parameter's name only.

    Args:
        count: how many.
    """

    def __init__(self, count: int = 1) -> None:
        _check_count(count)  # in a helper: the frame after jsonargparse's is not the one that raised
        self.count = count


class Legacy(Part):
    """A component in the earlier convention: its message starts with its class name."""

    def __init__(self, count: int = 1) -> None:
        if count < 1:
            raise ValueError(f"Legacy: count must be >= 1, got {count}")
        super().__init__(count)


def _logged(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        init(*args, **kwargs)

    return wrapper


class Decorated(Part):
    """A component whose constructor is wrapped by a decorator (as Lightning's ``Trainer`` is)."""

    @_logged
    def __init__(self, count: int = 1) -> None:
        super().__init__(count)


class Buggy(Part):
    """A component with a bug: not an argument error."""

    def __init__(self, count: int = 1) -> None:
        raise RuntimeError("a bug")


class Host:
    """Built as a group; holds a union-typed component.

    Args:
        part: the component.
        size: its size.
    """

    def __init__(self, part: Part | None = None, size: int = 1) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.part, self.size = part, size


def _refused(*args: str) -> str | None:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(Host, "host", sub_configs=True)
    parser.add_argument("--parts", type=list[Part], default=[])
    config = parser.parse_args(list(args))
    log = ConstructorLog()
    log.watch(parser)
    with pytest.raises(Exception) as raised:  # a ValueError, or the RuntimeError of a bug
        parser.instantiate(config)
    refused = constructor_error(raised.value, log, config, parser)
    return None if refused is None else str(refused)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        ((f"--host.part={__name__}.Part", "--host.part.count=0"),
         "host.part (Part): count must be >= 1, got 0"),
        ((f"--host.part={__name__}.Decorated", "--host.part.count=-2"),
         "host.part (Decorated): count must be >= 1, got -2"),
        ((f"--host.part={__name__}.Legacy", "--host.part.count=0"),
         "host.part (Legacy): count must be >= 1, got 0"),
        (("--host.size=0",), "host (Host): size must be >= 1, got 0"),
        ((f'--parts=[{{"class_path": "{__name__}.Part", "init_args": {{"count": 2}}}}, '
          f'{{"class_path": "{__name__}.Part", "init_args": {{"count": 0}}}}]',),
         "parts[1] (Part): count must be >= 1, got 0"),
    ],
    ids=["union-typed", "decorated-constructor", "legacy-prefix", "group", "list-item"],
)
def test_the_line_names_key_class_and_the_constructors_own_message(args: tuple[str, ...], line: str) -> None:
    assert _refused(*args) == line


def test_a_bug_is_not_an_argument_error() -> None:
    assert _refused(f"--host.part={__name__}.Buggy") is None


def test_watching_keeps_what_the_parser_builds() -> None:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(Host, "host", sub_configs=True)
    ConstructorLog().watch(parser)
    built = parser.instantiate(parser.parse_args([f"--host.part={__name__}.Part", "--host.part.count=3"]))
    assert isinstance(built.host, Host) and isinstance(built.host.part, Part) and built.host.part.count == 3


def test_a_parser_watched_again_reports_to_the_new_log() -> None:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(Host, "host", sub_configs=True)
    config = parser.parse_args(["--host.size=0"])
    for _ in range(2):
        log = ConstructorLog()
        log.watch(parser)
        with pytest.raises(ValueError) as raised:
            parser.instantiate(config)
        refused = constructor_error(raised.value, log, config, parser)
        assert refused is not None and str(refused) == "host (Host): size must be >= 1, got 0"
