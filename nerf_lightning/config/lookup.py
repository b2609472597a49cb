"""``--config NAME``: a config file, or the name of a config that ships with the package.

The YAML configs are kept once, in the repository's top-level ``configs/`` folder. A wheel installs
them as ``nerf_lightning/configs/`` (pyproject.toml maps that package to the folder), so after
``pip install nerf-lightning`` there is no ``configs/`` folder to point at; ``--config blender``
(or ``blender.yaml``) names the shipped ``blender.yaml`` wherever the command runs. A file named
exactly so in the current directory wins: ``--config demo.yaml`` is the user's own ``demo.yaml`` when
there is one, ``--config demo`` the shipped one unless a file ``demo`` is there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

# Commands whose --config is a training or pipeline config. The other commands' --config is a file of
# their own options (render and export take the run's config as --run_config): never a shipped config.
CONFIG_COMMANDS = frozenset({"fit", "validate", "test", "predict", "pipeline"})

# A value that could be a file name in the current directory. Anything else (a path with a folder,
# or jsonargparse's inline YAML such as '{trainer: {max_steps: 5}}') is passed on untouched.
_BARE_NAME = re.compile(r"[\w][\w.-]*")
_SUFFIX = ".yaml"


class ConfigNotFoundError(FileNotFoundError):
    """A bare ``--config`` name that is neither a file here nor a shipped config (one line)."""


def shipped_configs_dir() -> Path:
    """The folder of the configs that ship with the package.

    In an installed wheel it is ``nerf_lightning/configs/``; in a source checkout (and an editable
    install, which imports the checkout) that folder does not exist and the top-level ``configs/``
    beside the package is the same set of files.
    """
    package = Path(__file__).resolve().parents[1]  # nerf_lightning/
    installed = package / "configs"
    return installed if installed.is_dir() else package.parent / "configs"


def shipped_config_names() -> list[str]:
    """The names ``--config`` accepts without a file, sorted: ``blender``, ``demo``, ..."""
    return sorted(path.stem for path in shipped_configs_dir().glob(f"*{_SUFFIX}"))


def resolve_config(name: str | os.PathLike[str]) -> Path:
    """The config file ``name`` stands for.

    A bare file name (``blender``, ``blender.yaml``) that is no file in the current directory is the
    shipped config of that name (an absolute path). Anything else (a file here, a path with a folder,
    jsonargparse's inline YAML) is returned unchanged: whoever opens it reports a missing file.

    Raises:
        ConfigNotFoundError: a bare name that is neither a file here nor a shipped config; the
            message lists the shipped names.
    """
    text = os.fspath(name)
    if not _BARE_NAME.fullmatch(text) or _is_file(text):
        return Path(name)
    file_name = text if text.endswith(_SUFFIX) else text + _SUFFIX
    shipped = shipped_configs_dir() / file_name
    if _is_file(shipped):
        return shipped
    raise ConfigNotFoundError(
        f"{text}: no such file, and no config of that name ships with nerf-lightning "
        f"(shipped: {', '.join(shipped_config_names())})"
    )


def resolve_config_args(args: Sequence[str]) -> list[str]:
    """``args`` (a command line without the program name) with each ``--config NAME`` and
    ``--config=NAME`` value replaced by :func:`resolve_config`'s file, when the command (``args[0]``)
    is one of :data:`CONFIG_COMMANDS`; other commands' arguments are returned unchanged.

    Raises:
        ConfigNotFoundError: an unknown bare name, as ``--config NAME: ...``.
    """
    args = list(args)
    if not args or args[0] not in CONFIG_COMMANDS:
        return args
    resolved = args[:1]
    expects_value = False
    for arg in args[1:]:
        if expects_value:
            resolved.append(_resolve_value(arg))
        elif arg.startswith("--config="):
            resolved.append("--config=" + _resolve_value(arg.removeprefix("--config=")))
        else:
            resolved.append(arg)
        expects_value = not expects_value and arg == "--config"
    return resolved


def _resolve_value(value: str) -> str:
    try:
        path = resolve_config(value)
    except ConfigNotFoundError as error:
        raise ConfigNotFoundError(f"--config {error}") from None
    # A value passed through stays the very string: Path() would tidy inline YAML such as 'a//b'.
    return value if path == Path(value) else str(path)


def _is_file(name: str | Path) -> bool:
    try:
        return Path(name).is_file()
    except OSError:  # e.g. a name too long for the file system: no such file here
        return False
