"""How a command is declared and run: a typed function whose signature jsonargparse turns into options.

A :class:`Command` names a function; its parameters (types, defaults, the docstring's ``Args:``) are
the command's options, as LightningCLI makes them from the model's and data module's signatures. So
every command has ``--config FILE`` (a YAML file of its options), ``--print_config`` (the resolved
options as such a file: it runs unchanged with ``--config``) and ``--help`` listing every option, with
snake_case flags like the Lightning subcommands. Parameters without a default are positional for
``positional=True`` commands (``data validate DIR``, ``compare RUN_A RUN_B``) and required options
otherwise. The spellings the argparse commands took are still accepted: kebab-case flags
(``--camera-path``), switches without a value (``--force``) and list values given separately
(``--splits train val``); see :func:`normalize_args`.

A command that loads a trained run (``trained_run=True``: ``render``, ``export``) also gets
``--ckpt_path``, ``--run_config``, ``--weights_only``, ``--device`` and every ``--model.*`` and
``--data.*`` option (:mod:`nerf_lightning.runs.trained`), and its function receives the run as
``run``, loaded only when it asks.

Parse errors raise :class:`UsageError` (one line); :mod:`nerf_lightning.commands.errors` prints it.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import re
import signal
import sys
import threading
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jsonargparse import ActionConfigFile, ArgumentParser, Namespace

from nerf_lightning.files import atomic_write_json

# What a command that starts other commands (pipeline stages, sweep trials) has its warm-start server
# import once, so that each child starts with Lightning and the project's commands already imported.
WARM_PRELOAD = ("nerf_lightning.cli", "nerf_lightning.commands.lightning", "torch.utils.tensorboard")


class UsageError(ValueError):
    """The command line cannot be parsed; the message is one line."""


@dataclass(frozen=True)
class Command:
    """One subcommand beside Lightning's.

    Attributes:
        name: as typed after ``nerf-lightning`` (``render``, ``data validate``).
        function: called with the parsed options as keyword arguments; returns the exit code.
        positional: parameters without a default are positional arguments.
        trained_run: add the trained-run options and pass ``run`` (see the module docstring).
        declare: declares the options instead of ``function``'s signature (``pipeline``: its file's
            dataclasses); ``function`` then receives every top-level option.
        precheck: called with the arguments before parsing (to check config files with clearer
            messages than the parser's).
        takes_config_files: pass the ``--config`` files given as ``config_files`` (a list of paths).
    """

    name: str
    function: Callable[..., int]
    positional: bool = False
    trained_run: bool = False
    declare: Callable[[ArgumentParser], None] | None = None
    precheck: Callable[[list[str]], None] | None = None
    takes_config_files: bool = False

    @property
    def summary(self) -> str:
        """The first sentence of the function's docstring, for listings (:func:`first_sentence`)."""
        return first_sentence(inspect.getdoc(self.function) or "")


_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)[.!?](?=\s|$)")
"""A full stop, ``!`` or ``?`` before white space or the end, except the one ending ``e.g.`` or ``i.e.``."""


def first_sentence(text: str) -> str:
    """The first sentence of ``text``'s first paragraph, its wrapped lines joined.

    Listings and group titles take this, not the first line: a docstring's first sentence may be
    wrapped, and its first line then ends mid-sentence. A paragraph without a sentence end is taken
    whole.
    """
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    end = _SENTENCE_END.search(paragraph)
    return paragraph if end is None else paragraph[: end.end()]


def description(function: Callable[..., Any]) -> str:
    """The function's docstring up to its ``Args:`` section (the parameters are listed as options)."""
    text = inspect.getdoc(function) or ""
    return text.split("\nArgs:", 1)[0].strip()


def build_parser(command: Command) -> ArgumentParser:
    """The jsonargparse parser of ``command``; errors raise instead of exiting (``exit_on_error``)."""
    parser = ArgumentParser(prog=f"nerf-lightning {command.name}", description=description(command.function),
                            exit_on_error=False, env_prefix=False, default_env=False)
    parser.add_argument("--config", action=ActionConfigFile,
                        help="a YAML file of this command's options, as --print_config writes it.")
    if command.declare is not None:
        command.declare(parser)
    else:
        skip = {"run"} if command.trained_run else set()
        parser.add_function_arguments(command.function, as_group=False, as_positional=command.positional,
                                      skip=skip)
    if command.trained_run:
        from nerf_lightning.runs.trained import add_trained_run_arguments  # model and data: heavy imports

        add_trained_run_arguments(parser)
    return parser


_BOOLEANS = ("true", "false", "yes", "no", "on", "off", "1", "0")


def _values_taken(hint: Any) -> int | None:
    """How many separate values a list (0: any number) or tuple option took as an argparse ``nargs``
    option; ``None`` for other types."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        if typing.get_origin(option) is list:
            return 0
        if typing.get_origin(option) is tuple:
            items = typing.get_args(option)
            return 0 if Ellipsis in items else len(items)
    return None


def normalize_args(args: Sequence[str], parser: ArgumentParser) -> list[str]:
    """``args`` as jsonargparse takes them, from the spellings the argparse commands took.

    Those took kebab-case options (``--camera-path``), switches (``--force``) and lists as separate
    values (``--splits train val``, ``--background 1 1 1``): a kebab-case spelling of a known option
    becomes its snake_case one, a boolean option not followed by a boolean value gets ``true`` and
    separate values of a list or tuple option become one YAML list. Scripts written for those
    commands keep working, without a second, listed spelling of every option.
    """
    known = parser._option_string_actions  # argparse's table of option strings; stable since 2.7
    hints = {name: getattr(action, "_typehint", None) for name, action in known.items()}
    converted: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        name, equals, value = arg.partition("=")
        if name.startswith("--") and "-" in name[2:] and name not in known:
            snake = "--" + name[2:].replace("-", "_")
            if snake in known:
                name = snake
                arg = name + equals + value
        converted.append(arg)
        if equals or name not in hints:
            continue
        following = args[index] if index < len(args) else ""
        taken = _values_taken(hints[name])
        if hints[name] is bool and following.lower() not in _BOOLEANS:
            converted.append("true")
        elif taken is not None and following and not following.startswith(("[", "-")):
            end = index + taken if taken else len(args)
            values = []
            while index < min(end, len(args)) and not args[index].startswith("-"):
                values.append(args[index])
                index += 1
            converted.append("[" + ", ".join(values) + "]")
    return converted


def one_line(error: BaseException) -> str:
    """A parser's error message on one line (jsonargparse's may list every subtype it tried)."""
    lines = [" ".join(line.split()) for line in str(error).splitlines() if line.strip()]
    text = "; ".join(lines[:3]) if lines else type(error).__name__
    return text if len(text) <= 400 else text[:397] + "..."


def _options(namespace: Namespace) -> dict[str, Any]:
    """The top-level options of a parsed namespace as plain values (nested groups as dicts)."""
    options = namespace.as_dict()
    options.pop("config", None)
    options.pop("__path__", None)
    return options


TERMINATED_EXIT = 128 + signal.SIGTERM
"""The exit code of a command (not a fit) stopped by SIGTERM, as a shell reports one the signal killed."""


@contextlib.contextmanager
def terminated_as_exit(name: str) -> Iterator[None]:
    """Within it, SIGTERM ends the command by ``SystemExit`` (:data:`TERMINATED_EXIT`) after one line,
    instead of killing the process where it stands: the files being written are written under a
    temporary name (:func:`nerf_lightning.files.atomic_path`), whose cleanup then runs, so a stopped
    ``render`` or ``export`` leaves neither a partial output nor a temporary file. Left alone where
    SIGTERM already has a handler, or off the main thread."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise _Terminated(TERMINATED_EXIT)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except _Terminated:  # said once what was being written is cleaned up (a progress bar closed)
        print(f"nerf-lightning {name}: stopped by SIGTERM; nothing partial is left", file=sys.stderr,
              flush=True)
        raise SystemExit(TERMINATED_EXIT) from None
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


class _Terminated(SystemExit):
    """SIGTERM, raised where the command stood (:func:`terminated_as_exit`)."""


def run_command(command: Command, args: Sequence[str]) -> int:
    """Parse ``args`` for ``command`` and call its function (SIGTERM ends it cleanly:
    :func:`terminated_as_exit`); ``--help`` and ``--print_config`` exit 0."""
    parser = build_parser(command)
    args = normalize_args(args, parser)
    if command.precheck is not None:
        command.precheck(args)
    try:
        if command.trained_run:
            from nerf_lightning.runs.trained import parse_trained_run

            namespace, run = parse_trained_run(parser, args)
        else:
            namespace, run = parser.parse_args(args), None
    except argparse.ArgumentError as error:
        raise UsageError(one_line(error)) from None
    options = _options(namespace)
    if command.trained_run:
        from nerf_lightning.runs.trained import TRAINED_RUN_OPTIONS

        for name in TRAINED_RUN_OPTIONS:
            options.pop(name, None)
        options["run"] = run
    if command.takes_config_files:
        options["config_files"] = config_files(args)
    with terminated_as_exit(command.name):
        return command.function(**options)


def config_files(args: Sequence[str]) -> list[Path]:
    """The files given to ``--config`` in ``args``, in order."""
    files = []
    for index, arg in enumerate(args):
        if arg == "--config" and index + 1 < len(args):
            files.append(Path(args[index + 1]))
        elif arg.startswith("--config="):
            files.append(Path(arg.split("=", 1)[1]))
    return files


def write_result(result_file: Path | str | None, result: dict[str, Any]) -> None:
    """Write a command's ``--result_file``: JSON, atomically (a reader never sees half a file)."""
    if result_file is None:
        return
    path = Path(result_file)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(result, path)
