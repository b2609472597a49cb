"""The standalone renderer of a trained model, assembled from its field's and sampler's hooks only.

Export knows no field or sampler class: it asks ``model.field.standalone()`` for the torch-only
field and ``model.sampler.standalone(field)`` for the torch-only sampler (which may query that
field's density), and composes them with the volume rendering
(:class:`~nerf_lightning.export.standalone.StandaloneRenderer`). A field or sampler without the
hook is refused by name, never replaced by something else.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from torch import nn

from nerf_lightning.export.common import ExportError
from nerf_lightning.export.standalone import StandaloneRenderer
from nerf_lightning.fields import RadianceField
from nerf_lightning.samplers import Sampler
from nerf_lightning.system.module import NerfModule

FORMAT_VERSION = 2  # 2: sampler and field modules from the standalone() hooks
HOOK_DOCS = "docs/writing-a-sampler.md#export"


def _class_path(obj: object) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def refusal(kind: str, obj: nn.Module, base: type) -> str:
    """The one-line reason ``obj`` (the model's ``kind``, ``"sampler"`` or ``"field"``) cannot be exported."""
    name = f"{kind} {type(obj).__name__!r} ({_class_path(obj)})"
    if getattr(type(obj), "standalone", None) is getattr(base, "standalone", None):
        return f"{name} has no standalone() hook; see {HOOK_DOCS}"
    return f"{name} cannot be exported: its standalone() hook returned None; see {HOOK_DOCS}"


def _owned(module: nn.Module) -> nn.Module:
    """``module`` on the CPU, in evaluation mode, without gradients (hooks return copies)."""
    module = module.cpu().eval()
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    return module


def standalone_parts(model: NerfModule) -> tuple[nn.Module, nn.Module]:
    """``(field, sampler)``: the torch-only modules the model's hooks return, on the CPU.

    Raises:
        ExportError: the field or the sampler has no hook (or its hook returned ``None``); one line
            naming its class.
    """
    field_module = model.field.standalone()
    if field_module is None:
        raise ExportError(refusal("field", model.field, RadianceField))
    field_module = _owned(field_module)
    sampler_module = model.sampler.standalone(field_module)
    if sampler_module is None:
        raise ExportError(refusal("sampler", model.sampler, Sampler))
    return field_module, _owned(sampler_module)


def build_standalone(model: NerfModule, background: tuple[float, float, float],
                     source: dict[str, Any] | None = None) -> StandaloneRenderer:
    """An eager :class:`StandaloneRenderer` of ``model`` on the CPU, from the hooks.

    Args:
        model: the trained system (its field, sampler and renderer are read, not changed).
        background: the dataset's background colour (the default of ``forward``).
        source: recorded in the module's metadata (e.g. the checkpoint path and step).
    """
    field, sampler = standalone_parts(model)
    override = model.renderer.background_override
    colour = list(override if override is not None else background)
    info = {
        "format": "nerf-lightning standalone renderer",
        "format_version": FORMAT_VERSION,
        "field": type(model.field).__name__,
        "sampler": type(model.sampler).__name__,
        "field_module": type(field).__name__,
        "sampler_module": type(sampler).__name__,
        "background": colour,
        "background_fixed": override is not None,
        "chunk_rays": model.eval_chunk_rays,
        "scene_bounds": model.field.scene_bounds.detach().cpu().tolist(),
        "torch": torch.__version__,
        **(source or {}),
    }
    renderer = StandaloneRenderer(
        field, sampler, background=torch.tensor(colour, dtype=torch.float32),
        background_fixed=override is not None, chunk_rays=model.eval_chunk_rays,
        scene_bounds=model.field.scene_bounds.detach().cpu(), info=json.dumps(info),
    )
    return renderer.eval()


def renderer_info(renderer: StandaloneRenderer, **extra: Any) -> dict[str, Any]:
    """The renderer's metadata as a dictionary, with ``extra`` entries added."""
    return {**json.loads(renderer.info), **extra}
