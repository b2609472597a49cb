"""One-line errors for a class built from the command line whose constructor refuses its arguments.

jsonargparse builds the model, the data module, samplers, fields and callbacks from the parsed
config. A constructor's ``ValueError`` (this project's convention for a bad argument, e.g.
``Disparity(min_near=0)``) reaches the user either at the end of the whole instantiation traceback
or, for an argument typed ``Sampler | None``, rewritten by jsonargparse as "Does not validate
against any of the Union subtypes" with every subtype's error ("Expected a <class 'NoneType'>")
and the whole config value. :func:`constructor_error` finds the constructor's own exception (down
the ``__cause__``/``__context__`` chain), the class that raised it (the first frame after
jsonargparse's or LightningCLI's instantiator) and the config key that named the class, and turns
them into one :class:`ConstructorArgumentError` line:

    model.sampler (Disparity): min_near must be > 0, got 0.0

Exceptions of other types (a plugin's ``RuntimeError`` is a bug, whose traceback helps) and errors
that did not come from a constructor are left alone.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from types import FrameType, TracebackType
from typing import Any

_INSTANTIATORS = ("jsonargparse", "lightning.pytorch.cli")  # modules whose frames call the constructors


class ConstructorArgumentError(ValueError):
    """A class named by the config refused its arguments; the message is one line.

    Attributes:
        key: the config key that built the class (``model.sampler``), ``None`` when not found.
        class_name: the class (``Disparity``).
        original: the constructor's own exception.
    """

    def __init__(self, message: str, key: str | None, class_name: str, original: BaseException) -> None:
        super().__init__(message)
        self.key = key
        self.class_name = class_name
        self.original = original


def _frames(traceback: TracebackType | None) -> list[FrameType]:
    frames = []
    while traceback is not None:
        frames.append(traceback.tb_frame)
        traceback = traceback.tb_next
    return frames


def _in_instantiator(frame: FrameType) -> bool:
    module = str(frame.f_globals.get("__name__", ""))
    return any(module == name or module.startswith(name + ".") for name in _INSTANTIATORS)


def _original(error: BaseException) -> BaseException:
    """``error``, or the exception it wraps when jsonargparse raised it while handling another."""
    seen: set[int] = set()
    current = error
    while id(current) not in seen:
        seen.add(id(current))
        frames = _frames(current.__traceback__)
        if frames and not _in_instantiator(frames[-1]):
            return current  # raised outside jsonargparse: the constructor's own
        inner = current.__cause__ or current.__context__
        if inner is None:
            return current
        current = inner
    return current


def _constructor(error: BaseException) -> tuple[type, dict[str, Any]] | None:
    """The class whose ``__init__`` raised ``error`` when an instantiator called it, with that
    ``__init__``'s local variables (its arguments); ``None`` when no constructor raised it."""
    frames = _frames(error.__traceback__)
    calls = [index for index, frame in enumerate(frames) if _in_instantiator(frame)]
    if not calls or calls[-1] + 1 >= len(frames):
        return None
    constructor = frames[calls[-1] + 1]
    arguments = dict(constructor.f_locals)
    instance = arguments.get("self")
    if constructor.f_code.co_name != "__init__" or instance is None:
        return None
    return type(instance), arguments


def _import(path: str) -> Any:
    module_name, _, attribute = path.rpartition(".")
    while module_name:
        try:
            found: Any = importlib.import_module(module_name)
        except ImportError:
            module_name, _, outer = module_name.rpartition(".")
            attribute = f"{outer}.{attribute}"
            continue
        for name in attribute.split("."):
            found = getattr(found, name)
        return found
    raise ImportError(path)


def _subclass_specs(value: Any, key: str) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(key, class_path, init_args)`` of every ``class_path`` spec in a config (nested dicts and lists)."""
    if isinstance(value, dict):
        class_path = value.get("class_path")
        if isinstance(class_path, str):
            init_args = value.get("init_args")
            yield key, class_path, init_args if isinstance(init_args, dict) else {}
        for name, item in value.items():
            yield from _subclass_specs(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _subclass_specs(item, f"{key}[{index}]")


def _agrees(init_args: dict[str, Any], arguments: dict[str, Any]) -> bool:
    try:
        return all(arguments[name] == value for name, value in init_args.items() if name in arguments)
    except Exception:  # values that cannot be compared
        return False


def _config_key(cls: type, arguments: dict[str, Any], config: Any, parser: Any) -> str | None:
    """The key of ``config`` that names ``cls`` (``model.sampler``, ``trainer.callbacks[2]``; of
    several, the first whose ``init_args`` are the constructor's ``arguments``) or the parser group
    built as ``cls`` (``model``, ``eval_report``)."""
    as_dict = config.as_dict() if hasattr(config, "as_dict") else config
    candidates = []
    for key, class_path, init_args in _subclass_specs(as_dict, ""):
        try:
            if _import(class_path) is cls:
                candidates.append((key, init_args))
        except (ImportError, AttributeError):
            continue
    if candidates:
        return next((key for key, init_args in candidates if _agrees(init_args, arguments)), candidates[0][0])
    for group in getattr(parser, "groups", {}).values():
        if getattr(group, "group_class", None) is cls and getattr(group, "dest", None):
            return str(group.dest)
    return None


def constructor_error(
    error: BaseException, config: Any, parser: Any = None
) -> ConstructorArgumentError | None:
    """The one-line error for ``error``, raised while ``parser`` instantiated the classes of
    ``config``, when it is (or wraps) a ``ValueError`` of a class's constructor; else ``None``.

    The message is ``KEY (Class): message``; the constructor's own ``Class: `` prefix is dropped,
    and a message that already starts with the key (``model.eval_chunk_samples must be ...``) is
    kept as it is.
    """
    original = _original(error)
    if not isinstance(original, ValueError):
        return None
    constructor = _constructor(original)
    if constructor is None:
        return None
    cls, arguments = constructor
    name = cls.__name__
    key = _config_key(cls, arguments, config, parser)
    text = " ".join(str(original).split()) or type(original).__name__
    if text.startswith(f"{name}: "):
        text = text[len(name) + 2:]
    if key is not None and any(text.startswith(key + end) for end in (".", " ", ":")):
        message = text
    else:
        message = f"{key} ({name}): {text}" if key is not None else f"{name}: {text}"
    return ConstructorArgumentError(message, key, name, original)
