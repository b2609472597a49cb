"""``--format pt2``: the standalone renderer as a ``torch.export`` program (the deployable format).

The renderer is assembled from the model's hooks (:mod:`nerf_lightning.export.assemble`), traced
with ``torch.export.export`` for any number of rays and saved with ``torch.export.save``; torch
alone loads it::

    program = torch.export.load("scene.pt2", extra_files={"metadata.json": ""})
    renderer = program.module()
    rgb, depth, opacity = renderer(origins, directions, near, far, background)  # [R,3], [R], [R]

What ``torch.export`` (torch 2.13, non-strict) expresses here, and what it does not:

- the ray count is one named dimension (``Dim("rays")``) shared by the four ray inputs, range
  ``[0, inf)``: one program renders any ``R``, 0 and 1 included;
- a fixed number of samples per ray (``Uniform``, ``Hierarchical``, ``Proposal``, plugins such as
  ``Disparity``) is ``S = N R``; ``OccupancyGrid``'s data-dependent count (``nonzero`` in its
  marching and its early termination) becomes unbacked sizes that need no ``torch._check`` hint.
  Python code must not branch on them: ``exclusive_sum_per_ray``'s former ``if values.numel() == 0``
  failed with ``GuardOnDataDependentSymNode: Could not guard on data-dependent expression Eq(u0, 0)``
  and now pads instead;
- not expressible: the TorchScript renderer's loop over chunks, ``range(0, R, chunk_rays)``,
  specialises ``R`` ("Constraints violated (rays)! ... your code specialized it to be a constant"),
  so the program renders every ray it is given at once and callers chunk (``chunk_rays`` in the
  metadata, as ``--verify`` does); an optional argument is fixed when traced (a program traced with
  ``background=None`` accepts a tensor there and silently ignores it), so ``background`` is a
  required ``[3]`` tensor; a saved program has one entry point, so there is no ``density()`` and
  ``metadata()`` is the ``metadata.json`` extra file; it is traced on the CPU, and runs elsewhere
  after ``torch.export.passes.move_to_device_pass`` (:func:`load_pt2` does it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from nerf_lightning.export.assemble import build_standalone, renderer_info
from nerf_lightning.export.common import ExportError
from nerf_lightning.export.standalone import RenderAll, StandaloneRenderer
from nerf_lightning.files.atomic import atomic_path
from nerf_lightning.system.module import NerfModule

METADATA_FILE = "metadata.json"
EXAMPLE_RAYS = 16  # the example batch traced; any R works afterwards (not 0 or 1: those specialise)


def example_rays(bounds: Tensor, count: int = EXAMPLE_RAYS) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``count`` deterministic rays towards the box ``bounds [2, 3]``: ``(origins, directions, near,
    far)``."""
    generator = torch.Generator().manual_seed(0)
    center = 0.5 * (bounds[0] + bounds[1])
    radius = float((bounds[1] - bounds[0]).norm())
    origins = center + radius * nn.functional.normalize(torch.randn(count, 3, generator=generator), dim=-1)
    directions = nn.functional.normalize(center - origins, dim=-1)
    near = torch.full((count,), 0.5 * radius)
    return origins, directions, near, near + radius


def _dynamic_shapes() -> dict[str, Any]:
    rays = torch.export.Dim("rays")
    return {"origins": {0: rays}, "directions": {0: rays}, "near": {0: rays}, "far": {0: rays},
            "background": None}


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _blame(renderer: StandaloneRenderer, example: tuple[Tensor, ...]) -> str:
    """Which part ``torch.export`` cannot trace: the sampler's module, the field's, or their composition."""
    origins, directions, near, far = example[:4]
    try:
        with torch.no_grad():
            torch.export.export(renderer.sampler, (origins, directions, near, far),
                                dynamic_shapes=[{0: torch.export.Dim("rays")}] * 4)
    except Exception as error:
        return f"the sampler's standalone module {type(renderer.sampler).__name__} ({_first_line(error)})"
    try:
        with torch.no_grad():
            points = torch.export.Dim("points")
            torch.export.export(renderer.field, (origins, directions),
                                dynamic_shapes=[{0: points}, {0: points}])
    except Exception as error:
        return f"the field's standalone module {type(renderer.field).__name__} ({_first_line(error)})"
    return "the renderer"


def trace_renderer(renderer: StandaloneRenderer) -> torch.export.ExportedProgram:
    """``torch.export.export`` of :class:`RenderAll` of ``renderer`` for any number of rays.

    Raises:
        ExportError: ``torch.export`` cannot trace it; one line naming the module at fault.
    """
    example = (*example_rays(renderer.scene_bounds), renderer.background.clone())
    try:
        with torch.no_grad():
            return torch.export.export(RenderAll(renderer).eval(), example, dynamic_shapes=_dynamic_shapes())
    except Exception as error:
        info = json.loads(renderer.info)
        raise ExportError(
            f"torch.export cannot trace {_blame(renderer, example)} of sampler {info['sampler']!r} and field "
            f"{info['field']!r}: {_first_line(error)}; --format torchscript is the (deprecated) alternative"
        ) from error


def export_pt2(model: NerfModule, background: tuple[float, float, float], out: Path,
               source: dict[str, Any] | None = None) -> dict[str, Any]:
    """Trace ``model``'s standalone renderer and save it to ``out`` (``.pt2``) atomically.

    Returns:
        The metadata stored in the file (``metadata.json``).

    Raises:
        ExportError: no hook on the field or sampler, or ``torch.export`` cannot trace a module.
    """
    renderer = build_standalone(model, background, source)
    program = trace_renderer(renderer)
    info = renderer_info(
        renderer, program="torch.export",
        inputs="origins [R,3], directions [R,3] unit, near [R], far [R], background [3]",
        outputs="rgb [R,3] in [0,1], depth [R], opacity [R]",
    )
    with atomic_path(out) as temporary:
        torch.export.save(program, temporary, extra_files={METADATA_FILE: json.dumps(info)})
    return info


def load_pt2(path: Path | str, device: str | torch.device = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """``(renderer, metadata)`` of a saved program, its weights moved to ``device``."""
    extra = {METADATA_FILE: ""}
    program = torch.export.load(str(path), extra_files=extra)
    if torch.device(device).type != "cpu":  # traced on the CPU: its weights and constants move
        from torch.export.passes import move_to_device_pass

        program = move_to_device_pass(program, str(device))
    return program.module(), json.loads(extra[METADATA_FILE])
