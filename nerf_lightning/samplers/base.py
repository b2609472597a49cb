"""The sampler contract shared by built-in and third-party samplers.

See ``docs/samplers.md`` for the full description written for plugin authors.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor, nn

from nerf_lightning.core.constructor_spec import RecordsConstructorArguments
from nerf_lightning.core.types import DensityFn, PackedSamples, Rays, SceneBox


class Sampler(RecordsConstructorArguments, nn.Module, ABC):
    """Decides where along each ray the field is evaluated.

    A sampler is an ``nn.Module``: buffers it registers travel with checkpoints and devices,
    parameters it owns are trained by the system's optimizer, and ``self.training`` tells
    training from evaluation. Every constructor argument must have a default, and should be a
    plain value (number, string, bool, ``None``, lists and dicts of them): the arguments are
    recorded when the sampler is built and go into checkpoints, so that
    ``NerfModule.load_from_checkpoint`` can rebuild the sampler (:mod:`nerf_lightning.core.constructor_spec`).

    The training system calls, in this order, on every training step:

    1. ``update(step, density_fn, generator=...)``: periodic upkeep (default: nothing);
    2. ``forward(rays, density_fn, generator=...)``: the samples for this batch;
    3. ``auxiliary_loss(samples, weights)``: an extra loss term, or ``None`` (default).

    ``standalone(field)`` (optional) makes the sampler exportable.

    At evaluation only ``forward`` is called (under ``torch.no_grad``), once per chunk of rays.
    Change buffers in ``update``, not in ``forward``: only what ``update`` writes is kept
    identical across data-parallel ranks (docs/samplers.md, "May forward change buffers?").
    """

    def set_scene_box(self, box: SceneBox) -> None:
        """Receive the scene's bounding box when the model is set up (default: ignore it).

        Called before the first ``update`` or ``forward`` and before a checkpoint is restored,
        but not at all for a sampler used without a data module: until then there is no box, so
        keep it in a buffer that ``__init__`` gives a usable value.
        """

    def update(self, step: int, density_fn: DensityFn, *, generator: torch.Generator | None = None) -> None:
        """Periodic upkeep before the samples of training step ``step`` are drawn.

        ``generator`` is the step's source of randomness (as for ``forward``).
        """

    @abstractmethod
    def forward(
        self, rays: Rays, density_fn: DensityFn | None = None, *, generator: torch.Generator | None = None
    ) -> PackedSamples:
        """Place samples along ``rays``.

        Args:
            rays: ``R`` rays with ``near``/``far`` bounds (``far <= near`` for rays that miss).
            density_fn: the field's density ``[S, 3] -> [S]``, for samplers that look at it.
            generator: the source of randomness to use (reproducible stratification); ``None``
                means torch's default generator.

        Returns:
            ``PackedSamples`` for ``R = len(rays)`` rays (``R`` may be 0), each interval within
            ``[near, far]`` of its ray up to float rounding; rays with ``far <= near`` get no
            samples or zero-length ones.
        """

    def standalone(self, field: nn.Module) -> nn.Module | None:
        """A torch-only copy of this sampler in evaluation mode, for ``nerf-lightning export``;
        ``None`` (the default) when the sampler cannot be exported, which export refuses by name.

        The module's ``forward(origins [R, 3], directions [R, 3], near [R], far [R])`` returns
        ``(t_starts [S], t_ends [S], ray_indices [S] int64)``: the packed samples that
        ``forward(rays, field.density)`` gives in evaluation mode, deterministically, under the same
        rules (grouped by ray, sorted, inside ``[near, far]``). ``field`` is the exported field's own
        torch-only module (``density(positions [S, 3]) -> [S]``): keep it as a submodule and call
        ``field.density`` where the sampler would call ``density_fn`` (it is shared with the
        renderer, not copied). Copy every tensor the module keeps (later training must not change
        it), and write code that ``torch.export`` can trace (and ``torch.jit.script`` compile, for
        the TorchScript format). See docs/writing-a-sampler.md#export.
        """
        return None

    def occupied_points(self, max_points: int) -> Tensor | None:
        """World positions ``[N, 3]`` (``N <= max_points``) of the space this sampler considers occupied,
        for display (the viewer's point cloud); ``None`` (the default) when it keeps no such notion.

        Called between training steps or on a trained model, never while sampling; it must not change
        the sampler's state.
        """
        return None

    def auxiliary_loss(self, samples: PackedSamples, weights: Tensor) -> Tensor | None:
        """An extra training loss (a 0-dim tensor) or ``None`` (default).

        ``samples`` are those the last ``forward`` returned, or those of its leading
        ``samples.num_rays`` rays only when the step's sample ceiling cut the batch (slice any
        per-ray state kept from ``forward`` to ``[:samples.num_rays]``), and ``weights [S]`` their
        rendering weights; the weights carry gradients to the field, so detach them unless the
        loss should train the field.
        """
        return None
