"""Per-image appearance embeddings (NeRF-W's appearance codes, as nerfacto uses them) and per-image
colour corrections.

Phone photos of one scene differ in exposure and white balance. A colour head that sees a
learned code of the photo a ray comes from can explain those differences per photo instead of
baking them into the scene as floaters and colour shifts. A code fed to the colour head can change
any colour anywhere in one photo, which also lets it fit what a photo alone shows; a colour
correction (:func:`correct_colors`: one affine map of colour per photo, 12 numbers) makes the same
change to every colour of the photo, about as exposure and white balance do (an affine map of encoded
colour, not a gain in linear light).

Evaluation policy (docs/real-scenes.md, "Appearance codes, colour corrections and evaluation"): views
that are not training images (validation, test, rendered paths, exports) have no code of their own and
get the mean of the training codes; ``test/psnr`` and ``test/ssim`` are scored that way. Training photos
scored for the train-test gap get their own, as they were fitted. NeRF-W's option,
reported separately and only when asked (the ``AppearanceHalfFit`` callback): fit one fresh code
to a test image's left half, the field frozen, and score its right half with that code.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

COLOR_CORRECTION_DIM = 12
"""Numbers per photo of a colour correction: a ``3 x 3`` matrix (added to the identity) and an offset."""


def correct_colors(rgb: Tensor, corrections: Tensor) -> Tensor:
    """``[S, 3]``: colours ``rgb [S, 3]`` through each sample's affine map ``corrections [S, 12]``:
    ``(I + M) @ rgb + b`` with ``M`` the first nine numbers (row after row) and ``b`` the last three.
    A zero correction is the identity."""
    matrix = corrections[:, :9].view(-1, 3, 3)
    return rgb + torch.einsum("sij,sj->si", matrix, rgb) + corrections[:, 9:]


class AppearanceEmbedding(nn.Module):
    """A ``[N, dim]`` table of codes, one per training image, zero at the start.

    The table is empty until :meth:`resize` gives it one row per training image (the field's
    ``set_num_images``); a checkpoint brings its own number of rows (``_load_from_state_dict``).
    Zero initial codes let every image start from the same colour head and learn only how it
    differs, so the mean code stays a typical appearance.

    Evaluation policy: a view without image indices (not a training image) is rendered with
    :meth:`mean_code`. :meth:`evaluation_code` replaces that code for a while with one given
    ``[dim]`` tensor (which may require a gradient): NeRF-W's test-time fit of a code to half of a
    test image (:mod:`nerf_lightning.evaluation.appearance_fit`) renders through it without
    touching the table.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.codes = nn.Parameter(torch.zeros(0, dim))
        self._evaluation_code: Tensor | None = None  # not state: a stand-in only while evaluating

    @property
    def num_images(self) -> int:
        return self.codes.shape[0]

    def resize(self, num_images: int) -> None:
        """One zero code per training image (a new parameter: call it before the optimizer is built)."""
        if num_images != self.num_images:
            self.codes = nn.Parameter(self.codes.new_zeros(num_images, self.dim))

    def forward(self, image_indices: Tensor | None, num_samples: int) -> Tensor:
        """``[S, dim]`` codes of the samples' images ``image_indices [S]``, or, when ``image_indices``
        is ``None``, the evaluation code for every sample: the mean code (zeros while the table is
        empty), or the one :meth:`evaluation_code` put in place."""
        if image_indices is not None:
            return self.codes.index_select(0, image_indices)  # index_select: its backward adds in order
        code = self._evaluation_code if self._evaluation_code is not None else self.mean_code()
        return code.expand(num_samples, -1)

    @contextmanager
    def evaluation_code(self, code: Tensor) -> Iterator[None]:
        """Within the block, views without image indices get ``code [dim]`` instead of the mean code.

        Gradients flow into ``code`` (not into the table); the previous evaluation code comes back
        at the end, also on an error.
        """
        if code.shape != (self.dim,):
            raise ValueError(f"AppearanceEmbedding.evaluation_code: expected a code of shape [{self.dim}], "
                             f"got {list(code.shape)}")
        previous, self._evaluation_code = self._evaluation_code, code
        try:
            yield
        finally:
            self._evaluation_code = previous

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
