"""Drawing training pixels among those a mask keeps (nerfstudio's ``mask_path``; ``SceneSplit.masks``).

Masked pixels must never be training targets: not down-weighted, simply never drawn. The kept pixels of
all training images are stored as *runs* of consecutive kept pixels in the packed pixel order (image
after image, row-major): a mask is mostly large regions, so a few runs per image row describe it, far
less memory than a list of kept pixel indices (a 1080p capture of 50 images has 100 M pixels). A draw
is then a uniform integer below the number of kept pixels mapped through the runs' cumulative lengths.

Everything runs on the training device with fixed-size tensors: no host synchronisation per batch.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KeptPixels:
    """Uniform draws among the pixels a packed mask keeps.

    Args:
        masks: ``[P]`` bool, ``True`` for pixels that may be drawn (global pixel order).
        device: where draws happen.

    Raises:
        ValueError: the mask keeps no pixel at all.
    """

    def __init__(self, masks: Tensor, device: torch.device | str = "cpu") -> None:
        flags = masks.to(torch.int8).cpu()
        edges = torch.diff(flags, prepend=flags.new_zeros(1), append=flags.new_zeros(1))  # [P + 1]
        starts = torch.nonzero(edges == 1)[:, 0]  # [M] first pixel of each run
        ends = torch.nonzero(edges == -1)[:, 0]  # [M] one past its last pixel
        lengths = ends - starts
        self.num_kept = int(lengths.sum())
        if self.num_kept == 0:
            raise ValueError("the masks keep no pixel at all")
        self.starts = starts.to(device)
        self.cumulative = lengths.cumsum(0).to(device)  # [M] kept pixels up to the end of each run
        self.lengths = lengths.to(device)
        self.masks = masks.to(device=device, dtype=torch.bool)

    def sample(self, count: int, generator: torch.Generator | None = None) -> Tensor:
        """``[count]`` int64 global pixel indices, uniform over the kept pixels."""
        draws = torch.randint(0, self.num_kept, (count,), device=self.starts.device, generator=generator)
        run = torch.searchsorted(self.cumulative, draws, right=True)  # [count]
        return self.starts[run] + (draws - (self.cumulative[run] - self.lengths[run]))

    def replace_masked(self, pixels: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """``pixels`` ``[B]`` with every masked one replaced by a uniform draw among the kept pixels.

        For draws made without the mask (error-driven selection picks tiles, then pixels in them): the
        batch keeps its size and no masked pixel remains.
        """
        return torch.where(self.masks[pixels], pixels, self.sample(pixels.shape[0], generator))
