"""What the callbacks read or set on the module they observe and on the trainer's data module, declared.

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
ImageRenderingModule   ``sampler``, ``eval_chunk_rays``, ``render_image``   ``Viewer``
ResizableBatches       ``rays_per_batch`` (set between steps)               ``SampleBudget``
RayErrorObserver       ``observe_ray_errors``                               ``ErrorFeedback`` (optional)
NamedSplits            ``splits`` (view names in reports)                   ``EvalReport``,
                                                                            ``PredictionWriter``
                                                                            (optional)
=====================  ==================================================  ==========================

Optional ones are used when the data module has them and skipped otherwise (:func:`conforms`).

The check is by member name, with ``hasattr``, not ``isinstance`` of a ``runtime_checkable``
protocol: from Python 3.12 on that ``isinstance`` looks members up statically, and an ``nn.Module``
keeps its submodules (``field``, ``sampler``) where a static lookup does not see them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol, TypeGuard, TypeVar

import torch
from torch import Tensor

if TYPE_CHECKING:  # annotations only: the protocols name these types, they need none of them at run time
    from nerf_lightning.core.types import PackedSamples, Rays
    from nerf_lightning.data.batch import RayBatch
    from nerf_lightning.fields import RadianceField
    from nerf_lightning.rendering.renderer import RenderOutput
    from nerf_lightning.samplers import Sampler
    from nerf_lightning.scenes.scene import SceneSplit
    from nerf_lightning.system.module import ImageRender
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

    def render_rays(self, rays: Rays, background: Tensor, generator: torch.Generator | None = None,
                    max_samples: int | None = None, image_indices: Tensor | None = None,
                    ) -> tuple[RenderOutput, PackedSamples]:
        """Sample, query the field and render the rays."""
        ...


class ImageRenderingModule(Protocol):
    """A module that renders whole images and has a sampler to show."""

    sampler: Sampler
    eval_chunk_rays: int

    def render_image(self, batch: RayBatch) -> ImageRender:
        """Render a whole-image batch."""
        ...


# ------------------------------------------------------------------------ the data module's side
class ResizableBatches(Protocol):
    """A data module whose training batches take their size from ``rays_per_batch`` at every step."""

    rays_per_batch: int


class RayErrorObserver(Protocol):
    """A data module that draws pixels by recent error and is told each step's per-ray errors."""

    def observe_ray_errors(self, batch: RayBatch, errors: Tensor) -> None:
        """Per-ray errors ``[R']`` of the leading rays of a training ``batch``."""
        ...


class NamedSplits(Protocol):
    """A data module whose loaded splits (``train``, ``val``, ``test``) name their images."""

    splits: Mapping[str, SceneSplit]


# -------------------------------------------------------------------------------------- checks
def members(protocol: type) -> tuple[str, ...]:
    """The attribute and method names ``protocol`` declares (its own and its protocol bases')."""
    names: list[str] = []
    for cls in reversed(protocol.__mro__):
        if cls is object or cls is Protocol or not getattr(cls, "_is_protocol", False):
            continue
        names += list(vars(cls).get("__annotations__", {}))
        names += [name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")]
    return tuple(dict.fromkeys(names))


def missing(obj: object, protocol: type) -> list[str]:
    """The members of ``protocol`` that ``obj`` lacks (empty: it conforms)."""
    return [name for name in members(protocol) if not hasattr(obj, name)]


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
