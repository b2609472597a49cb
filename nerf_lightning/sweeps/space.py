"""The search space of a sweep: parameters over config keys, and the config of one trial.

A key is a dotted path into the base config (``model.learning_rate``, ``model.sampler``,
``model.field.max_resolution``). Two rules make every part of a LightningCLI config reachable:

- below a component (a mapping with ``class_path``) a key goes on into its ``init_args``:
  ``model.field.max_resolution`` is ``model.field.init_args.max_resolution``;
- in a list of components (``trainer.callbacks``) the next part names one by its class:
  ``trainer.callbacks.SampleBudget.target_samples``.

A string value for a component key replaces the component by that class with its defaults
(``model.sampler: Proposal``): the base's ``init_args`` belong to the class it named.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any, Literal

ParamKind = Literal["categorical", "int", "float", "log-float"]
KINDS: tuple[str, ...] = ("categorical", "int", "float", "log-float")


class SpaceError(ValueError):
    """A parameter of the search space cannot be used; the message names it (``space.KEY``)."""


@dataclass(frozen=True)
class Param:
    """One searched config key.

    Attributes:
        key: dotted path into the config (module docstring).
        kind: ``categorical`` (``choices``), ``int`` (``low``..``high`` by ``step``), ``float``
            (``low``..``high``, optionally by ``step``) or ``log-float`` (``low``..``high``, sampled on a
            log scale).
        choices: the values of a categorical parameter (strings, numbers, booleans or null).
        low, high, step: the range of a numeric one (both ends included).
    """

    key: str
    kind: ParamKind
    choices: tuple[Any, ...] = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None

    def grid_values(self) -> list[Any]:
        """Every value a grid search tries: the choices, or the range by its step."""
        if self.kind == "categorical":
            return list(self.choices)
        if self.step is None or self.kind == "log-float":
            raise SpaceError(f"space.{self.key}: a grid search needs the values of every parameter; give "
                             f"this {self.kind} parameter a step, or make it categorical")
        assert self.low is not None and self.high is not None
        count = round((self.high - self.low) / self.step) + 1
        values = [self.low + i * self.step for i in range(count)]
        return [int(v) for v in values] if self.kind == "int" else values

    def probe_values(self) -> list[Any]:
        """The values that show whether a config takes this parameter: every choice, or both ends."""
        return list(self.choices) if self.kind == "categorical" else [self.low, self.high]

    def suggest(self, trial: Any) -> Any:
        """The value of this parameter for an Optuna ``trial`` (which records it under ``key``)."""
        if self.kind == "categorical":
            return trial.suggest_categorical(self.key, list(self.choices))
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=int(self.step or 1))
        return trial.suggest_float(self.key, self.low, self.high, step=self.step,
                                   log=self.kind == "log-float")


def parse_param(key: str, spec: Any) -> Param:
    """A :class:`Param` from its entry in the sweep file (``{type: ..., choices|low/high/step: ...}``), or
    :class:`SpaceError` naming ``space.KEY`` and what was expected."""
    where = f"space.{key}"
    if not key or any(not part for part in key.split(".")):
        raise SpaceError(f"{where}: expected a dotted config key such as model.learning_rate")
    if not isinstance(spec, dict):
        raise SpaceError(f"{where}: expected a mapping with 'type' ({', '.join(KINDS)}), got {spec!r}")
    kind = spec.get("type")
    if kind not in KINDS:
        raise SpaceError(f"{where}.type: expected one of {', '.join(KINDS)}, got {kind!r}")
    allowed = {"type", "choices"} if kind == "categorical" else {"type", "low", "high", "step"}
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise SpaceError(f"{where}: unknown field(s) {', '.join(unknown)} for a {kind} parameter "
                         f"(expected {', '.join(sorted(allowed))})")
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise SpaceError(f"{where}.choices: expected a non-empty list of values, got {choices!r}")
        for choice in choices:
            if choice is not None and not isinstance(choice, (str, int, float, bool)):
                raise SpaceError(f"{where}.choices: expected strings, numbers, booleans or null, "
                                 f"got {choice!r}")
        return Param(key, "categorical", choices=tuple(choices))
    low, high, step = spec.get("low"), spec.get("high"), spec.get("step")
    for name, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise SpaceError(f"{where}.{name}: expected a number, got {value!r}")
    if kind == "int" and not (isinstance(low, int) and isinstance(high, int)):
        raise SpaceError(f"{where}: expected whole numbers for low and high of an int parameter")
    if not low <= high:
        raise SpaceError(f"{where}: expected low <= high, got low={low}, high={high}")
    if kind == "log-float" and not low > 0:
        raise SpaceError(f"{where}.low: a log-float parameter needs low > 0, got {low}")
    if step is not None:
        if kind == "log-float":
            raise SpaceError(f"{where}.step: a log-float parameter takes no step")
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not step > 0:
            raise SpaceError(f"{where}.step: expected a positive number, got {step!r}")
        if kind == "int" and not isinstance(step, int):
            raise SpaceError(f"{where}.step: expected a whole number for an int parameter, got {step!r}")
    if kind != "int":
        low, high = float(low), float(high)
    return Param(key, kind, low=low, high=high, step=step)


def parse_space(space: Any) -> list[Param]:
    """The parameters of a sweep file's ``space`` mapping, in the file's order."""
    if not isinstance(space, dict) or not space:
        raise SpaceError(f"space: expected a mapping of config keys to parameters, got {space!r}")
    return [parse_param(key, spec) for key, spec in space.items()]


def _class_name(component: Any) -> str | None:
    if isinstance(component, dict) and isinstance(component.get("class_path"), str):
        return component["class_path"].rsplit(".", 1)[-1]
    return None


def with_values(config: dict[str, Any], values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``config`` with each ``key: value`` of ``values`` set (module docstring's rules).

    Raises:
        SpaceError: a key runs into a value that is not a mapping, or names a component the list
            does not hold.
    """
    config = copy.deepcopy(config)
    for key, value in values.items():
        parts = key.split(".")
        node: Any = config
        for index, part in enumerate(parts[:-1]):
            node = _step(node, part, key, index, create=True)
        last = parts[-1]
        if not isinstance(node, (dict, list)):
            where = ".".join(parts[:-1])
            raise SpaceError(f"space.{key}: {where} is not a mapping in the base config")
        if isinstance(node, list):
            node = _step(node, last, key, len(parts) - 1, create=False)
            _set_component(node, value, key)
            continue
        if _class_name(node) is not None and last not in ("class_path", "init_args"):
            node = node.setdefault("init_args", {})
        if isinstance(node.get(last), list):
            raise SpaceError(f"space.{key}: a list in the base config; name one of its components by its "
                             f"class ({key}.CLASS.ARGUMENT)")
        if _class_name(node.get(last)) is not None and isinstance(value, str):
            node[last] = {"class_path": value}  # another class: its own defaults, not the base's arguments
        else:
            node[last] = value
    return config


def _step(node: Any, part: str, key: str, index: int, *, create: bool) -> Any:
    if isinstance(node, list):
        matches = [item for item in node if _class_name(item) == part]
        if len(matches) != 1:
            held = ", ".join(filter(None, (_class_name(item) for item in node))) or "none"
            what = "no" if not matches else "more than one"
            raise SpaceError(f"space.{key}: {what} component {part!r} in {'.'.join(key.split('.')[:index])} "
                             f"of the base config (it holds: {held})")
        return matches[0]
    if not isinstance(node, dict):
        where = ".".join(key.split(".")[:index])
        raise SpaceError(f"space.{key}: {where} is not a mapping in the base config")
    if _class_name(node) is not None and part not in ("class_path", "init_args"):
        node = node.setdefault("init_args", {})
    if part not in node or node[part] is None:
        if not create:
            raise SpaceError(f"space.{key}: no {part!r} in the base config")
        node[part] = {}
    return node[part]


def _set_component(component: dict[str, Any], value: Any, key: str) -> None:
    if not isinstance(value, str):
        raise SpaceError(f"space.{key}: a component in a list takes a class name, got {value!r}")
    component.clear()
    component["class_path"] = value


def trial_seed(sweep_seed: int, study: str, number: int) -> int:
    """The ``seed_everything`` of trial ``number``: a hash of the sweep's seed, the study's name and the
    number, so that trials differ from each other and a repeated sweep repeats them."""
    digest = hashlib.sha256(f"{sweep_seed}:{study}:{number}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF
