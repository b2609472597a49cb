"""Per-image appearance embeddings (NeRF-W's appearance codes, as nerfacto uses them).

Phone photos of one scene differ in exposure and white balance. A colour head that sees a
learned code of the photo a ray comes from can explain those differences per photo instead of
baking them into the scene as floaters and colour shifts. Views that are not training images
(validation, test, rendered paths) have no code of their own; they get the mean of the training
codes: the evaluation policy, documented in docs/real-scenes.md.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


class AppearanceEmbedding(nn.Module):
    """A ``[N, dim]`` table of codes, one per training image, zero at the start.

    The table is empty until :meth:`resize` gives it one row per training image (the field's
    ``set_num_images``); a checkpoint brings its own number of rows (``_load_from_state_dict``).
    Zero initial codes let every image start from the same colour head and learn only how it
    differs, so the mean code stays a typical appearance.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.codes = nn.Parameter(torch.zeros(0, dim))

    @property
    def num_images(self) -> int:
        return self.codes.shape[0]

    def resize(self, num_images: int) -> None:
        """One zero code per training image (a new parameter: call it before the optimizer is built)."""
        if num_images != self.num_images:
            self.codes = nn.Parameter(self.codes.new_zeros(num_images, self.dim))

    def forward(self, image_indices: Tensor | None, num_samples: int) -> Tensor:
        """``[S, dim]`` codes of the samples' images ``image_indices [S]``, or the mean code for
        every sample when ``image_indices`` is ``None`` (zeros while the table is empty)."""
        if image_indices is not None:
            return self.codes.index_select(0, image_indices)  # index_select: its backward adds in order
        return self.mean_code().expand(num_samples, -1)

    def mean_code(self) -> Tensor:
        """``[dim]`` the evaluation code: the mean of the training codes."""
        if self.num_images == 0:
            return self.codes.new_zeros(self.dim)
        return self.codes.mean(dim=0)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        saved = state_dict.get(prefix + "codes")
        if saved is not None and saved.shape[0] != self.num_images:
            self.resize(saved.shape[0])  # a checkpoint of a run on another number of images
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
