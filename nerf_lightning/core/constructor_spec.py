"""How a field, sampler or renderer was built, as plain values a checkpoint can hold.

``NerfModule`` takes its field, sampler and renderer as ``nn.Module`` objects. For
``NerfModule.load_from_checkpoint(path)`` to rebuild them, the module's hyperparameters hold one
*spec* per component in LightningCLI's own form::

    {"class_path": "nerf_lightning.samplers.occupancy.grid.OccupancyGrid",
     "init_args": {"resolution": 16, "steps_per_diagonal": 512, ...}}

with only plain values (``str``, ``int``, ``float``, ``bool``, ``None`` and lists and string-keyed
dicts of them; a component argument that is itself such a component becomes a nested spec). So a
checkpoint still loads with ``torch.load(weights_only=True)`` (no pickled class), a config parser
reads the specs like a config file, and the weights then come from the ``state_dict``.

The arguments are recorded when the object is created, by :class:`RecordsConstructorArguments`
(a base of ``RadianceField``, ``Sampler`` and ``VolumeRenderer``), whatever creates it: Python code,
LightningCLI, a plugin. Recording in ``__new__``, which receives the constructor's arguments before
``__init__`` runs, means no field or sampler (built-in or plugin) has to store its arguments itself.
"""

from __future__ import annotations

import inspect
import os
import warnings
from typing import Any

INSTANTIATOR = "lightning.pytorch.cli.instantiate_module"
"""The builder ``load_from_checkpoint`` calls with the hyperparameters when they name it (a
Lightning-trusted one): it parses component specs as LightningCLI parses a config."""


class NotRecordableError(ValueError):
    """A component's constructor arguments cannot be written as plain values."""


class RecordsConstructorArguments:
    """Records the arguments each instance was constructed with (see :func:`component_spec`).

    ``_constructor_arguments`` holds every named ``__init__`` parameter (defaults filled in), or
    ``None`` when the call could not be bound: ``copy``/``pickle`` call ``__new__`` without the
    arguments and then restore the original's attributes, recorded arguments included.
    """

    _constructor_arguments: dict[str, Any] | None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        instance = super().__new__(cls)  # object.__new__ refuses extra arguments
        try:
            bound = inspect.signature(cls.__init__).bind(instance, *args, **kwargs)
        except TypeError:
            arguments = None
        else:
            bound.apply_defaults()
            arguments = dict(list(bound.arguments.items())[1:])  # without self
        # Plain object attribute: nn.Module.__setattr__ needs __init__ to have run first.
        object.__setattr__(instance, "_constructor_arguments", arguments)
        return instance


def class_path(cls: type) -> str:
    """The import path of ``cls`` (``package.module.Class``)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def component_spec(component: object) -> dict[str, Any]:
    """``{"class_path": ..., "init_args": {...}}`` of a component, in plain values.

    Raises:
        NotRecordableError: the component does not record its arguments, its class cannot be
            imported by name, or an argument is not a plain value; the message says which.
    """
    cls = type(component)
    arguments = getattr(component, "_constructor_arguments", None)
    if not isinstance(component, RecordsConstructorArguments):
        raise NotRecordableError(f"{class_path(cls)} does not subclass RecordsConstructorArguments")
    if arguments is None:
        raise NotRecordableError(f"the arguments {class_path(cls)} was constructed with were not recorded")
    if "<locals>" in cls.__qualname__:
        raise NotRecordableError(f"{class_path(cls)} is defined inside a function and cannot be imported")
    parameters = inspect.signature(cls.__init__).parameters
    init_args: dict[str, Any] = {}
    for name, value in arguments.items():
        kind = parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            if value:
                raise NotRecordableError(f"{class_path(cls)} was given extra positional arguments *{name}")
        elif kind is inspect.Parameter.VAR_KEYWORD:
            init_args.update({key: _plain(item, f"{class_path(cls)}({key}=...)")
                              for key, item in value.items()})
        else:
            init_args[name] = _plain(value, f"{class_path(cls)}({name}=...)")
    return {"class_path": class_path(cls), "init_args": init_args}


def component_hparams(components: dict[str, object]) -> dict[str, dict[str, Any] | None]:
    """The :func:`component_spec` of each named component; ``None``, with a warning, for one that
    cannot be recorded (``load_from_checkpoint`` then needs it passed in, e.g. ``field=MyField(...)``)."""
    specs: dict[str, dict[str, Any] | None] = {}
    for name, component in components.items():
        try:
            specs[name] = component_spec(component)
        except NotRecordableError as error:
            warnings.warn(f"{name} is not recorded in the model's hyperparameters ({error}); pass it to "
                          f"NerfModule.load_from_checkpoint({name}=...) to load a checkpoint", stacklevel=3)
            specs[name] = None
    return specs


def _plain(value: Any, where: str) -> Any:
    """``value`` as plain values (tuples become lists, paths strings, components specs)."""
    if value is None or type(value) in (bool, int, float, str):  # no subclass: an IntEnum pickles its class
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, (list, tuple)):
        return [_plain(item, where) for item in value]
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return {key: _plain(item, where) for key, item in value.items()}
    if isinstance(value, RecordsConstructorArguments):
        return component_spec(value)
    raise NotRecordableError(f"{where}: a {type(value).__name__} is not a plain value")
