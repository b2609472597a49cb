"""Frozen copies of modules for the exported twins of fields and samplers.

Shared by ``fields/`` and ``samplers/`` (a sampler's twin may own a network of its own, such as the
proposal or coarse networks), so it lives beside the other shared pieces rather than in either.
"""

from __future__ import annotations

import copy

from torch import nn


def frozen_copy(module: nn.Module) -> nn.Module:
    """A CPU float32 copy of ``module`` in evaluation mode, without gradients: the export owns its
    weights, so later training of the original cannot change an exported module."""
    module = copy.deepcopy(module).float().cpu().eval()
    for parameter in module.parameters():
        parameter.requires_grad_(False)
    return module
