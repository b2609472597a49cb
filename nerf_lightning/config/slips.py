"""One line for a slip in a command line or a config file, naming what was meant when it can tell.

jsonargparse reports a mistyped key after the whole usage text (a hundred lines for ``fit``), and a
key that is wrong in a config file without naming the file; an unknown sampler gets the list of
Union subtypes it tried instead of the samplers that are installed, and a config file that is not
YAML as a parser trace of "<unicode string>". :func:`explain` turns its message into one line: the
key as the user wrote it, the nearest known key ("did you mean"), the config file and line the key
came from, for ``model.sampler`` the installed sampler names, and for broken YAML the file, the
problem and its line; a class a config names that cannot be imported (a run's config.yaml naming a
callback of a package this environment lacks), the key, the class, why and the file's line.
Pure functions over strings and files: the command layer supplies the known keys, the config files
and the sampler names.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path

import yaml

_UNRECOGNIZED = re.compile(r"unrecognized arguments: (?P<rest>.*)")
_NOT_ACCEPTED = re.compile(r"does not accept (?:option|key) '(?P<key>[^']+)'")
_KEY_NOT_EXPECTED = re.compile(r"[Kk]ey \"(?P<key>[^\"]+)\" is not expected")
_PARSER_KEY = re.compile(r"Parser key \"(?P<key>[^\"]+)\"")
_GIVEN_VALUE = re.compile(r"Given value: (?P<value>.+)")
_CLASS_PATH_PROBLEM = re.compile(
    r"Problem with given class_path '(?P<class_path>[^']+)':\s*\n\s*(?P<why>\S[^\n]*)")
_IMPORT_FAILURE = re.compile(r"No module named|cannot import name|module '[^']*' has no attribute")
SAMPLER_KEY = "model.sampler"


def nearest(word: str, choices: Sequence[str]) -> str | None:
    """The choice closest to ``word`` (difflib's ratio of at least 0.75), or ``None``."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    return found[0] if found else None


def unknown_keys(message: str) -> list[str]:
    """The dotted keys a jsonargparse message refuses (``trainer.max_tiem``), in order, without ``--``.

    Recognised: ``unrecognized arguments: --a.b 5 --c`` (the command line) and ``does not accept
    option 'a.b'`` (a config file's key, or a command-line key inside a known section)."""
    keys: list[str] = []
    first = message.splitlines()[0] if message else ""
    match = _UNRECOGNIZED.search(first)
    if match:
        keys += [token[2:].split("=", 1)[0] for token in match["rest"].split() if token.startswith("--")]
    for pattern in (_NOT_ACCEPTED, _KEY_NOT_EXPECTED):
        keys += [found["key"] for found in pattern.finditer(message)]
    return list(dict.fromkeys(keys))


def key_line(path: Path, key: str, value: str | None = None) -> int | None:
    """The 1-based line of dotted ``key`` in YAML file ``path`` (``trainer.max_tiem`` is ``max_tiem``
    under ``trainer``), or ``None`` when the file does not hold it or cannot be read as YAML. With
    ``value``, only where the key is set to it (directly or as its ``class_path``)."""
    try:
        node = yaml.compose(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    line = None
    for part in key.split("."):
        found = _child(node, part)
        if found is None:
            return None
        line, node = found[0].start_mark.line + 1, found[1]
    if value is not None:
        class_path = _child(node, "class_path")
        scalar = class_path[1] if class_path is not None else node
        if not (isinstance(scalar, yaml.ScalarNode) and scalar.value.rsplit(".", 1)[-1] == value):
            return None
    return line


def _child(node: yaml.Node | None, name: str) -> tuple[yaml.Node, yaml.Node] | None:
    """The key and value nodes of ``name`` in mapping ``node``."""
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == name:
            return key_node, value_node
    return None


def yaml_problem(path: Path) -> str | None:
    """``FILE: not valid YAML (PROBLEM at line L, column C)`` when ``path`` does not parse, else ``None``."""
    try:
        yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        return yaml_error_line(path, error)
    except (OSError, UnicodeDecodeError) as error:
        return f"{path}: cannot be read ({error})"
    return None


def yaml_error_line(path: Path, error: yaml.YAMLError) -> str:
    """PyYAML's ``error`` reading ``path`` as one line: the file, the problem and where it is."""
    if isinstance(error, yaml.MarkedYAMLError):
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{path}: not valid YAML ({error.problem or error.context}{where})"
    return f"{path}: not valid YAML ({str(error).splitlines()[0]})"


def _where(key: str, config_files: Sequence[Path], value: str | None = None) -> str:
    """`` (in FILE, line N)`` for the last config file holding ``key`` (later files win), or ``""``."""
    for path in reversed(config_files):
        line = key_line(path, key, value)
        if line is not None:
            return f" (in {path}, line {line})"
    return ""


def explain(message: str, known_keys: Sequence[str], config_files: Sequence[Path] = (),
            samplers: Sequence[str] = ()) -> str | None:
    """One line for jsonargparse's ``message``, or ``None`` when it is not a slip recognised here.

    Args:
        message: the parser's error message (may span several lines).
        known_keys: the dotted keys the command accepts (``trainer.max_time``).
        config_files: the ``--config`` files given, in order: a refused key is looked up in them.
        samplers: the installed sampler names, listed when ``model.sampler`` is refused.
    """
    if message.startswith("Problems parsing config"):
        broken = next((line for line in map(yaml_problem, config_files) if line is not None), None)
        if broken is not None:
            return broken
    keys = unknown_keys(message)
    if keys:
        parts = []
        for key in keys:
            guess = nearest(key, known_keys)
            where = _where(key, config_files)
            if where:  # a config file's key, spelled as the file spells it
                parts.append(f"unknown key {key}{where}" + (f"; did you mean {guess}?" if guess else ""))
            else:
                parts.append(f"unknown option --{key}" + (f"; did you mean --{guess}?" if guess else ""))
        return "; ".join(parts)
    parser_key = _PARSER_KEY.search(message)
    if parser_key and parser_key["key"] == SAMPLER_KEY and samplers:
        given = _GIVEN_VALUE.search(message)
        value = given["value"].strip() if given else "?"
        guess = nearest(value, samplers)
        hint = f"; did you mean {guess}?" if guess else ""
        where = _where(SAMPLER_KEY, config_files, value)
        return (f"{SAMPLER_KEY}: {value!r} is not an installed sampler{where}; "
                f"installed: {', '.join(sorted(samplers))}{hint}")
    # jsonargparse words a bad init argument of an importable class the same way: only import failures,
    # each once (a Union tries a class once per subtype).
    problems = ((m["class_path"], m["why"].strip()) for m in _CLASS_PATH_PROBLEM.finditer(message))
    unimportable = dict.fromkeys(problem for problem in problems if _IMPORT_FAILURE.match(problem[1]))
    if parser_key and unimportable:
        key = parser_key["key"]
        named = "; ".join(f"{class_path} cannot be imported ({why})" for class_path, why in unimportable)
        return f"{key}{_where(key, config_files)}: {named}; expected a class of an installed package"
    return None
