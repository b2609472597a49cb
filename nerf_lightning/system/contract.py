"""What the callbacks and the module itself read or set on the module and its data module, declared.

Each callback names the protocol it relies on and checks it once, in its ``setup``, with
:func:`require`: attached to a module (or a data module) without those members it stops there with one
line naming the callback, the members that are missing and the protocol, rather than looking
attributes up by name while training runs. :class:`~nerf_lightning.system.module.NerfModule` and
:class:`~nerf_lightning.data.datamodule.NerfDataModule` implement every protocol here
(``tests/callbacks/test_callback_contract.py`` checks that, and each callback's refusal).

=====================  ==================================================  ==========================
protocol               members                                              relied on by
=====================  ==================================================  ==========================
SampleCeilingModule    ``step_sample_limit`` (set before each step)         ``SampleBudget``
StageTimedModule       ``stage_timer`` (enabled while it runs)              ``Telemetry``
RayRenderingModule     ``field``, ``eval_chunk_rays``, ``render_rays``      ``AppearanceHalfFit``
ImageRenderingModule   ``sampler``, ``eval_chunk_rays``, ``render_image``   ``Viewer``;
                                                                            ``EvalReport`` (optional)
ResizableBatches       ``rays_per_batch`` (set between steps)               ``SampleBudget``
RayErrorObserver       ``observe_ray_errors``                               ``ErrorFeedback`` (optional)
DataWaitReporting      ``data_wait_s`` (the latest batch's wait)            ``Telemetry`` (optional)
SceneDescribing        ``scene_box``, ``pixel_footprint``,                  ``NerfModule.setup``
                       ``num_train_images``                                 (optional)
ScoredSplit            ``test_split`` (the split ``test`` scores)           ``EvalReport`` (optional)
ImageBatches           ``num_train_images``, ``image_batch``                ``EvalReport`` (optional)
NamedSplits            ``splits`` (view names in reports)                   ``EvalReport``,
                                                                            ``PredictionWriter``
                                                                            (optional)
RecordedData           ``root``, ``fingerprint``, ``frame_record``          ``RunRecorder`` (optional)
=====================  ==================================================  ==========================

Optional ones are used when the module or data module has them and skipped otherwise
(:func:`conforms`). A method must also take, by name, every optional or keyword-only parameter its
protocol names (callers pass those by name: ``image_batch(..., as_fitted=True)``); one that does not
counts as missing, named ``image_batch(as_fitted=...)``. Required positional parameters may have any
names.

The check is by member name, with ``hasattr``, not ``isinstance`` of a ``runtime_checkable``
protocol: from Python 3.12 on that ``isinstance`` looks members up statically, and an ``nn.Module``
keeps its submodules (``field``, ``sampler``) where a static lookup does not see them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from inspect import Parameter, signature
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard, TypeVar

import torch
from torch import Tensor

if TYPE_CHECKING:  # annotations only: the protocols name these types, they need none of them at run time
    from nerf_lightning.core.types import PackedSamples, Rays, SceneBox
    from nerf_lightning.data.batch import RayBatch
    from nerf_lightning.fields import RadianceField
    from nerf_lightning.rendering.renderer import RenderOutput
    from nerf_lightning.samplers import Sampler
    from nerf_lightning.scenes.scene import SceneSplit
    from nerf_lightning.system.image_render import ImageRender
    from nerf_lightning.system.timing import StageTimer


T = TypeVar("T")


class CallbackContractError(TypeError):
    """A callback is attached to a module or data module without the members it relies on (one line)."""


# ----------------------------------------------------------------------------- the module's side
class SampleCeilingModule(Protocol):
    """A module whose training step keeps to a ceiling on the samples it sends to the field."""

    step_sample_limit: int | None
    """Largest number of samples a training step may send to the field (``None``: no ceiling); a
    step whose sampler places more trains on the leading rays that fit."""


class StageTimedModule(Protocol):
    """A module that times the stages of its training step with a :class:`StageTimer`."""

    stage_timer: StageTimer
    """Disabled unless a callback enables it; a disabled timer measures nothing and never waits."""


class RayRenderingModule(Protocol):
    """A module that renders any rays with its field (evaluation-time fits such as NeRF-W's)."""

    field: RadianceField
    eval_chunk_rays: int

    def render_rays(self, rays: Rays, background: Tensor) -> tuple[RenderOutput, PackedSamples]:
        """Sample, query the field and render the rays (as a view that is no training photo: with the
        field's mean per-image parameters)."""
        ...


class ImageRenderingModule(Protocol):
    """A module that renders whole images and has a sampler to show."""

    sampler: Sampler
    eval_chunk_rays: int

    def render_image(self, batch: RayBatch) -> ImageRender:
        """Render a whole-image batch; one whose rays name their training photo (``camera_indices``) with
        that photo's per-image parameters, as it was fitted."""
        ...


# ------------------------------------------------------------------------ the data module's side
class ResizableBatches(Protocol):
    """A data module whose training batches take their size from ``rays_per_batch`` at every step."""

    rays_per_batch: int


class DataWaitReporting(Protocol):
    """A data module that says how long the training thread waited for its latest training batch
    (``NerfDataModule``, whose batches may be prefetched on another thread)."""

    data_wait_s: float | None
    """Seconds the training thread was blocked making or waiting for the batch it was last handed
    (``None`` before the first)."""


class RayErrorObserver(Protocol):
    """A data module that draws pixels by recent error and is told each step's per-ray errors."""

    def observe_ray_errors(self, batch: RayBatch, errors: Tensor) -> None:
        """Per-ray errors ``[R']`` of the leading rays of a training ``batch``."""
        ...


class SceneDescribing(Protocol):
    """A data module that tells the module the scene it trains on, once its splits are loaded."""

    scene_box: SceneBox | None
    """The box the field and sampler work in (``None`` until the data module's ``setup``)."""

    pixel_footprint: float | None
    """World-space width of a training pixel at the content's centre (``None`` until ``setup``): what
    the field may size its finest detail to."""

    @property
    def num_train_images(self) -> int:
        """How many training photos there are: one appearance code and one camera correction each."""
        ...


class ScoredSplit(Protocol):
    """A data module whose ``test`` stage may score another split than ``test`` (the training views,
    to measure how much better those are reproduced than new ones)."""

    test_split: str


class ImageBatches(Protocol):
    """A data module that makes the whole-image batch of any view of its splits: the very batch its
    ``test`` stage hands the module for that view, so a callback scores views of another split (the
    training views beside the test views) exactly as the tested ones."""

    @property
    def num_train_images(self) -> int:
        """How many training photos there are."""
        ...

    def image_batch(self, split: str, index: int, device: torch.device, centres: bool = False,
                    as_fitted: bool = False) -> RayBatch:
        """Every pixel of image ``index`` of ``split`` (``train``, ``val``, ``test``), on ``device``;
        ``as_fitted`` (training photos): its rays name their training image, so the module renders it with
        that photo's per-image parameters (:meth:`ImageRenderingModule.render_image`)."""
        ...


class NamedSplits(Protocol):
    """A data module whose loaded splits (``train``, ``val``, ``test``) name their images."""

    splits: Mapping[str, SceneSplit]


class RecordedData(Protocol):
    """A data module whose source and training frame a run record names."""

    root: Path | None

    def fingerprint(self) -> str:
        """Digest of the dataset's files and the settings that decide its rays."""
        ...

    def frame_record(self) -> dict[str, Any] | None:
        """What normalising decided (the frame, the downscale chosen), JSON-ready; ``None`` when off."""
        ...


# -------------------------------------------------------------------------------------- checks
def members(protocol: type) -> tuple[str, ...]:
    """The attribute and method names ``protocol`` declares (its own and its protocol bases')."""
    names: list[str] = []
    for cls in reversed(protocol.__mro__):
        if cls is object or cls is Protocol or not getattr(cls, "_is_protocol", False):
            continue
        names += list(vars(cls).get("__annotations__", {}))
        names += [name for name, value in vars(cls).items()
                  if (callable(value) or isinstance(value, property)) and not name.startswith("_")]
    return tuple(dict.fromkeys(names))


def missing(obj: object, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks (empty: it conforms): a member it has not, or
    ``method(parameter=...)`` for each parameter a method of ``protocol`` names that ``obj``'s method does
    not take. A property is looked up on ``obj``'s class, not read: reading one may load data or fail
    before the object is set up."""
    lacking: list[str] = []
    for name in members(protocol):
        if _is_property(protocol, name):
            if not hasattr(type(obj), name):
                lacking.append(name)
        elif not hasattr(obj, name):
            lacking.append(name)
        elif callable(declared := _declared(protocol, name)):
            lacking += [f"{name}({parameter}=...)" for parameter in _untaken(declared, getattr(obj, name))]
    return lacking


def _declared(protocol: type, name: str) -> Any:
    return next((vars(cls)[name] for cls in protocol.__mro__ if name in vars(cls)), None)


@cache
def _by_name(declared: Callable[..., Any]) -> tuple[str, ...]:
    """The optional and keyword-only parameters of a protocol's method, read once: ``conforms`` may run on
    every training step (``ErrorFeedback``)."""
    return tuple(parameter.name for parameter in signature(declared).parameters.values()
                 if parameter.default is not Parameter.empty or parameter.kind is Parameter.KEYWORD_ONLY)


def _untaken(declared: Callable[..., Any], implemented: Any) -> list[str]:
    """The optional and keyword-only parameters of ``declared`` (a protocol's method), which callers pass
    by name, that ``implemented`` (the object's bound method) takes neither by name (a positional-only
    parameter does not count) nor through ``**kwargs``; all of them when ``implemented`` is not callable.
    Required positional parameters may have other names. Empty when a signature cannot be read (a
    builtin)."""
    by_name = _by_name(declared)
    if not by_name:
        return []
    if not callable(implemented):
        return list(by_name)
    try:
        taken = signature(implemented).parameters
    except (TypeError, ValueError):
        return []
    if any(parameter.kind is Parameter.VAR_KEYWORD for parameter in taken.values()):
        return []
    return [name for name in by_name if name not in taken or taken[name].kind is Parameter.POSITIONAL_ONLY]


def _is_property(protocol: type, name: str) -> bool:
    return any(isinstance(vars(cls).get(name), property) for cls in protocol.__mro__)


def conforms(obj: object, protocol: type[T]) -> TypeGuard[T]:
    """Whether ``obj`` has every member of ``protocol`` (``None`` has none)."""
    return obj is not None and not missing(obj, protocol)


def require(user: object, obj: object, protocol: type, role: str = "module") -> None:
    """Raise :class:`CallbackContractError` unless ``obj`` has every member of ``protocol``.

    Args:
        user: the callback that relies on the members (named in the message).
        obj: the LightningModule or data module it was attached to.
        protocol: one of the protocols of this module.
        role: ``"module"`` or ``"data module"``, for the message.
    """
    lacking = members(protocol) if obj is None else missing(obj, protocol)
    if not lacking:
        return
    what = "no data module" if obj is None else f"{type(obj).__name__}, which has no {', '.join(lacking)}"
    owner = "NerfModule" if role == "module" else "NerfDataModule"
    raise CallbackContractError(
        f"{type(user).__name__} needs a {role} with {', '.join(members(protocol))} "
        f"({__name__}.{protocol.__name__}, as {owner} has); it got {what}")
