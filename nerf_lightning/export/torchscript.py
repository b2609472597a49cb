"""``--format torchscript``: a standalone TorchScript renderer of a trained model.

The model's weights are copied into the torch-only classes of
:mod:`nerf_lightning.export.standalone`, which are scripted (``torch.jit.script``) and saved;
``torch.jit.load`` then renders rays without this package::

    renderer = torch.jit.load("model.pt")
    rgb, depth, opacity = renderer(origins, directions, near, far)   # [R, 3], [R], [R]

Fields: ``HashGridField`` and ``PositionalEncodingField``. Samplers: ``OccupancyGrid`` (its
bitfield, marching and early termination, as in evaluation) and ``Uniform`` are reproduced
exactly; any other sampler is replaced by ``uniform_samples`` equal intervals per ray, an
approximation that ``--verify`` measures.
"""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nerf_lightning.export.common import ExportError
from nerf_lightning.export.standalone import (
    FrequencyRadiance,
    HashGridEncoder,
    HashGridRadiance,
    OccupancyMarcher,
    StandaloneRenderer,
    UniformMarcher,
)
from nerf_lightning.fields import HashGridField, PositionalEncodingField
from nerf_lightning.files import atomic_path
from nerf_lightning.module import NerfModule
from nerf_lightning.samplers import OccupancyGrid, Uniform

FORMAT_VERSION = 1
DEFAULT_UNIFORM_SAMPLES = 256


def _frozen(module: nn.Module) -> nn.Module:
    """A CPU float32 copy of ``module`` without gradients."""
    module = copy.deepcopy(module).float().cpu()
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    return module


def standalone_field(field: nn.Module) -> nn.Module:
    """The torch-only twin of a trained ``field`` (weights copied, on the CPU)."""
    bounds = field.scene_bounds.detach().float().cpu()
    if isinstance(field, HashGridField):
        encoding = field.encoding
        encoder = HashGridEncoder(
            table=encoding.table.detach().float().cpu(),
            resolutions=encoding.resolutions.cpu(),
            axis_strides=encoding.axis_strides.cpu(),
            level_offsets=encoding.level_offsets.cpu(),
            num_dense_levels=encoding.num_dense_levels,
            hash_mask=encoding.hash_mask,
        )
        return HashGridRadiance(encoder, _frozen(field.density_mlp), _frozen(field.color_mlp), bounds)
    if isinstance(field, PositionalEncodingField):
        if not (field.position_encoding.include_input and field.direction_encoding.include_input):
            raise ExportError("torchscript export expects frequency encodings that include their input")
        trunk = _frozen(field.trunk)
        assert isinstance(trunk, nn.ModuleList)
        return FrequencyRadiance(
            field.position_encoding.scales.cpu(), field.direction_encoding.scales.cpu(), trunk,
            field.skip_layer, _frozen(field.density_head), _frozen(field.feature_head),
            _frozen(field.color_head), bounds,
        )
    raise ExportError(
        f"torchscript export supports HashGridField and PositionalEncodingField, not {type(field).__name__}"
    )


def standalone_marcher(sampler: nn.Module,
                       uniform_samples: int) -> tuple[nn.Module, dict[str, Any], str | None]:
    """The torch-only sampler for ``sampler``, its early-termination settings and a note when approximate.

    Returns ``(marcher, early_stop_settings, note)``; ``note`` is ``None`` when the sampler is
    reproduced exactly.
    """
    no_early_stop = {"early_stop": False, "early_stop_eps": 0.0, "alpha_threshold": 0.0}
    if isinstance(sampler, OccupancyGrid):
        sampler._refresh_coarse()  # the coarse dilated grid exactly as evaluation builds it
        assert sampler._coarse is not None
        marcher = OccupancyMarcher(
            occupied=sampler.occupied.cpu(), coarse=sampler._coarse.cpu(), bounds=sampler.bounds.cpu(),
            steps_per_diagonal=sampler.steps_per_diagonal, step_size=sampler.step_size,
            steps_per_segment=sampler._steps_per_segment, coarse_factor=sampler.COARSE_FACTOR,
        )
        # In evaluation the density pass runs when the last measurement left it on.
        run_pass = sampler._early_stop_active and sampler.early_stop_eps > 0.0
        return marcher, {"early_stop": run_pass, "early_stop_eps": sampler.early_stop_eps,
                         "alpha_threshold": sampler.alpha_threshold}, None
    if isinstance(sampler, Uniform):
        return UniformMarcher(sampler.num_samples), no_early_stop, None
    note = (f"the {type(sampler).__name__} sampler has no standalone version: the module samples "
            f"{uniform_samples} equal intervals per ray instead (an approximation; check it with --verify)")
    return UniformMarcher(uniform_samples), no_early_stop, note


def build_standalone(model: NerfModule, background: tuple[float, float, float],
                     uniform_samples: int = DEFAULT_UNIFORM_SAMPLES,
                     source: dict[str, Any] | None = None) -> tuple[StandaloneRenderer, str | None]:
    """An eager (not yet scripted) :class:`StandaloneRenderer` of ``model`` on the CPU, and the
    sampler note of :func:`standalone_marcher`.

    Args:
        model: the trained system (its field, sampler and renderer are read, not changed).
        background: the dataset's background colour (the default of ``forward``).
        uniform_samples: intervals per ray for samplers without a standalone version.
        source: recorded in the module's ``metadata()`` (e.g. the checkpoint path and step).
    """
    field = standalone_field(model.field)
    marcher, early_stop, note = standalone_marcher(model.sampler, uniform_samples)
    override = model.renderer.background_override
    info = {
        "format": "nerf-lightning standalone renderer",
        "format_version": FORMAT_VERSION,
        "field": type(model.field).__name__,
        "sampler": type(model.sampler).__name__,
        "marcher": type(marcher).__name__,
        "background": list(override if override is not None else background),
        "scene_bounds": model.field.scene_bounds.detach().cpu().tolist(),
        "inputs": "origins [R,3], directions [R,3] unit, near [R], far [R], background [3]|[R,3]|None",
        "outputs": "rgb [R,3] in [0,1], depth [R], opacity [R]",
        "torch": torch.__version__,
        **(source or {}),
    }
    if note is not None:
        info["approximation"] = note
    renderer = StandaloneRenderer(
        field, marcher,
        background=torch.tensor(override if override is not None else background, dtype=torch.float32),
        background_fixed=override is not None, chunk_rays=model.eval_chunk_rays,
        scene_bounds=model.field.scene_bounds.detach().cpu(), info=json.dumps(info), **early_stop,
    )
    return renderer.eval(), note


# torch 2.13 marks TorchScript deprecated (in favour of torch.export) but scripts, saves and loads
# it as before; the warning says nothing about this module, so it is not repeated to users.
JIT_DEPRECATION = r".*torch\.jit.*deprecated"


def script_standalone(renderer: StandaloneRenderer) -> torch.jit.ScriptModule:
    """``torch.jit.script`` of a standalone renderer."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=JIT_DEPRECATION, category=DeprecationWarning)
        return torch.jit.script(renderer)


def export_torchscript(model: NerfModule, background: tuple[float, float, float], out: Path,
                       uniform_samples: int = DEFAULT_UNIFORM_SAMPLES,
                       source: dict[str, Any] | None = None) -> str | None:
    """Script ``model``'s standalone renderer and save it to ``out`` atomically; returns the sampler note."""
    renderer, note = build_standalone(model, background, uniform_samples, source)
    scripted = script_standalone(renderer)
    with atomic_path(out) as temporary, warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=JIT_DEPRECATION, category=DeprecationWarning)
        torch.jit.save(scripted, str(temporary))
    return note
