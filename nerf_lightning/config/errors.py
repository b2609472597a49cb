"""One-line errors for a class built from a config whose constructor refuses its arguments.

jsonargparse builds the model, the data module, samplers, fields and callbacks from the parsed config.
A constructor refuses a bad argument with a ``ValueError`` that names its own parameter and nothing
else (``min_near must be > 0, got 0.0``): the class cannot know under which config key, or even
whether from a config, it was built. The config layer knows, and adds it:

    model.sampler (Disparity): min_near must be > 0, got 0.0

How: jsonargparse calls every constructor through an *instantiator*, a function given the class and
its arguments. :class:`ConstructorLog` wraps the instantiators of a parser (LightningCLI's own for the
model and the data module, and the default one for every other class) so that a constructor's
``ValueError`` is recorded with the class and the arguments it was called with, then raised on
unchanged. :func:`constructor_error` finds the recorded exception in what reaches the command (for an
argument typed ``Sampler | None`` jsonargparse raises "Does not validate against any of the Union
subtypes" instead, with every subtype's error and the whole config value), finds the config key whose
``class_path`` names that class with those arguments (or the parser group built as that class:
``model``, ``data``, ``eval_report``), and makes one :class:`ConstructorArgumentError` line.

A message that still starts with its class's name (``Disparity: min_near ...``, the convention of
earlier plugins) loses that prefix, since the line names the class already. Exceptions of other types
(a plugin's ``RuntimeError`` is a bug, whose traceback helps) and errors no constructor raised are
left alone.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

_ORIGINAL = "_nerf_lightning_original_instantiator"
"""On a recording instantiator, the one it wraps: a parser watched again is wrapped once, by the new log."""


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


@dataclass(frozen=True)
class Refusal:
    """A constructor's ``ValueError``, with the class and the keyword arguments it was called with."""

    cls: type
    arguments: dict[str, Any]
    error: ValueError


class ConstructorLog:
    """Records which class refused which arguments while a parser instantiates a config.

    Use :meth:`watch` on the parser before it instantiates, then :meth:`refusal` (or
    :func:`constructor_error`) on the exception that came out.
    """

    def __init__(self) -> None:
        self._refusals: list[Refusal] = []

    def _record(self, cls: type, arguments: dict[str, Any], error: ValueError) -> None:
        if not any(refusal.error is error for refusal in self._refusals):
            self._refusals.append(Refusal(cls, arguments, error))

    def instantiator(self, inner: Callable[..., Any] | None = None) -> Callable[..., Any]:
        """jsonargparse's instantiator ``(class_type, *args, **kwargs) -> instance``: ``inner``
        (the default: ``class_type(*args, **kwargs)``), recording a ``ValueError`` it raises."""
        call = getattr(inner, _ORIGINAL, inner) if inner is not None else _construct

        def instantiate(class_type: type, *args: Any, **kwargs: Any) -> Any:
            try:
                return call(class_type, *args, **kwargs)
            except ValueError as error:
                arguments = {name: value for name, value in kwargs.items()
                             if name != "applied_instantiation_links"}
                self._record(class_type, arguments, error)
                raise

        # jsonargparse reads the signature (passing applied_instantiation_links to instantiators that take
        # it, as LightningCLI's do); __wrapped__ gives it the wrapped one's.
        functools.update_wrapper(instantiate, call, assigned=(), updated=())
        setattr(instantiate, _ORIGINAL, call)
        return instantiate

    def watch(self, parser: Any) -> None:
        """Record the refusals of every class ``parser`` (and its subcommands' parsers) instantiates:
        its registered instantiators are wrapped, and the default one stands behind them for every
        other class.

        The registry is the parser's ``_instantiators`` (jsonargparse's, where LightningCLI registers
        the model's and the data module's): adding through ``add_instantiator`` could not wrap the
        ones already there.
        """
        registry = getattr(parser, "_instantiators", None)
        if registry is None:
            registry = {}
            parser._instantiators = registry
        registry.setdefault((object, True), _construct)  # last: every class no other one is for
        for key, instantiator in list(registry.items()):
            registry[key] = self.instantiator(instantiator)

    def refusal(self, error: BaseException) -> Refusal | None:
        """The recorded refusal behind ``error``: ``error`` itself or an exception it was raised from
        or while handling (the innermost such), or else one whose message ``error``'s message quotes
        (jsonargparse's union error lists its subtypes' errors but chains only the first)."""
        chain, seen = [], set()
        current: BaseException | None = error
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            chain.append(current)
            current = current.__cause__ or current.__context__
        for link in reversed(chain):
            found = next((refusal for refusal in self._refusals if refusal.error is link), None)
            if found is not None:
                return found
        text = str(error)
        quoted = [refusal for refusal in self._refusals if str(refusal.error) and str(refusal.error) in text]
        return quoted[-1] if quoted else None


def _construct(cls: type, *args: Any, **kwargs: Any) -> Any:
    """jsonargparse's default instantiator."""
    return cls(*args, **kwargs)


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
    """Whether the plain values of ``init_args`` are those the constructor got (nested class specs,
    which arrive built, are not compared)."""
    try:
        return all(arguments[name] == value for name, value in init_args.items()
                   if name in arguments and not isinstance(value, (dict, list)))
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
    error: BaseException, log: ConstructorLog, config: Any, parser: Any = None
) -> ConstructorArgumentError | None:
    """The one-line error for ``error``, raised while ``parser`` (watched by ``log``) instantiated the
    classes of ``config``, when a constructor's ``ValueError`` is behind it; else ``None``.

    The message is ``KEY (Class): message`` (``Class: message`` when no key names the class).
    """
    refusal = log.refusal(error)
    if refusal is None:
        return None
    name = refusal.cls.__name__
    key = _config_key(refusal.cls, refusal.arguments, config, parser)
    text = " ".join(str(refusal.error).split()) or type(refusal.error).__name__
    if text.startswith(f"{name}: "):
        text = text[len(name) + 2:]
    message = f"{key} ({name}): {text}" if key is not None else f"{name}: {text}"
    return ConstructorArgumentError(message, key, name, refusal.error)

