"""Layer ``commands``: the commands beside Lightning's ``fit|validate|test|predict``, and the dispatch to
them.

One module per command, each a typed function declared as a :class:`~nerf_lightning.commands.base.Command`
(see :mod:`nerf_lightning.commands.base` for what that gives every command):

=================  ========================================================================
``data``           ``data make-demo|validate|cache|convert|process`` (:mod:`.data`)
``render``         a novel-view video from a checkpoint (:mod:`.render`)
``view``           a trained run in the browser, camera paths saved from it (:mod:`.view`)
``export``         mesh, point cloud, grid, standalone renderer or poses from a checkpoint (:mod:`.export`)
``compare``        what differs between two recorded runs (:mod:`.compare`)
``runs``           the ledger: recorded runs in comparability groups, ranked by test PSNR (:mod:`.runs`)
``pipeline``       dataset to verified export, stage by stage (:mod:`.pipeline`)
``sweep``          many runs over a search space in an Optuna study (:mod:`.sweep`)
anything else      LightningCLI (:mod:`.lightning`)
=================  ========================================================================

Modules are imported only for the command being run, and for the listings of ``--help``
(:func:`other_commands`, ``nerf-lightning data --help``), which are made from :data:`MODULES` and each
command's docstring so that they cannot leave a command out.

May import ``core``, ``files``, ``config``, ``nn``, ``cameras``, ``rendering``, ``fields``,
``samplers``, ``testing``, ``scenes``, ``datasets``, ``data``, ``evaluation``, ``system``, ``viewer``,
``callbacks``, ``runs``, ``export``, ``pipeline``, ``sweeps``; nothing else of the package.
"""

from __future__ import annotations

import importlib
import shutil
import textwrap
from collections.abc import Callable

from nerf_lightning.commands.base import Command, UsageError, run_command
from nerf_lightning.commands.errors import report
from nerf_lightning.config.lookup import resolve_config_args

MODULES = {word: word for word in ("data", "render", "view", "export", "compare", "runs", "pipeline",
                                   "sweep")}
"""First word of the command line -> module of :mod:`nerf_lightning.commands` declaring it."""


def commands(word: str) -> list[Command]:
    """The commands declared by the module of ``word`` (``data``: its four)."""
    module = importlib.import_module(f"{__name__}.{MODULES[word]}")
    return list(getattr(module, "COMMANDS", None) or [module.COMMAND])


def listing(rows: list[tuple[str, str]], width: int | None = None) -> list[str]:
    """``rows`` of (name, summary) as the lines of a two-column listing, each summary wrapped under
    itself within ``width`` columns (default: the terminal's less 2, the width argparse's help takes)."""
    width = width or shutil.get_terminal_size().columns - 2
    column = max(len(name) for name, _ in rows) + 4
    lines: list[str] = []
    for name, summary in rows:
        lines += textwrap.wrap(summary, width=max(width, column + 30),
                               initial_indent=f"  {name:<{column - 2}}", subsequent_indent=" " * column,
                               break_long_words=False, break_on_hyphens=False)
    return lines


def other_commands() -> str:
    """The commands beside Lightning's, one per line with its summary, for ``nerf-lightning --help``.

    Made from :data:`MODULES`; a command whose module cannot be imported (an optional package this
    installation lacks, such as ``nerf_lightning.export``) is left out, as it cannot be run.
    """
    rows = []
    for word in MODULES:
        try:
            group = commands(word)
        except ImportError:
            continue
        rows += [(command.name, command.summary) for command in group]
    return "\n".join(["other commands ('nerf-lightning COMMAND --help' lists a command's options):",
                      *listing(rows)])


def _group_help(word: str, group: list[Command]) -> str:
    names = "|".join(command.name.split(" ", 1)[1] for command in group)
    lines = [f"usage: nerf-lightning {word} {{{names}}} [-h] ...", ""]
    lines += listing([(command.name.split(" ", 1)[1], command.summary) for command in group])
    return "\n".join([*lines, "", f"'nerf-lightning {word} COMMAND --help' lists a command's options."])


def _find(args: list[str]) -> tuple[Command, list[str]]:
    """The command ``args`` name and the arguments after its name."""
    group = commands(args[0])
    if len(group) == 1 and group[0].name == args[0]:
        return group[0], args[1:]
    chosen = args[1] if len(args) > 1 else ""
    for command in group:
        if command.name == f"{args[0]} {chosen}":
            return command, args[2:]
    if chosen in ("-h", "--help"):
        print(_group_help(args[0], group))
        raise SystemExit(0)
    names = ", ".join(command.name for command in group)
    raise UsageError(f"expected one of: {names}; got {' '.join(args[:2])!r}")


def dispatch(args: list[str], lightning: Callable[[list[str]], object]) -> int:
    """Run the command ``args`` name, or ``lightning(args)`` (LightningCLI's ``fit|validate|test|predict``)
    for any other; the exit code. A bare ``--config NAME`` of a training or pipeline command is first
    resolved to the shipped config of that name (:mod:`nerf_lightning.config.lookup`)."""

    def run() -> int:
        resolved = resolve_config_args(args)  # --config demo: the shipped demo.yaml when no such file is here
        if resolved and resolved[0] in MODULES:
            command, rest = _find(resolved)
            # Errors of finding the command name its first word; the command's own, its full name.
            return report(command.name, lambda: run_command(command, rest))
        lightning(resolved)
        return 0

    return report(args[0] if args and args[0] in MODULES else None, run)
