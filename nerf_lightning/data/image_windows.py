"""Training pixels drawn from a rotating window of images, so that a batch's reads stay local.

The training pixels are stored image after image (the image cache's entry, memory-mapped). Uniformly
random pixels across all images touch a new page of that map for almost every ray: while the whole
entry fits in the page cache that costs nothing, but once the cache is larger than the memory a process
may use, every step reads thousands of scattered pages from disk. Drawing a stretch of steps from a
few images instead bounds the pages a stretch touches to those images' (nerfstudio's
``num_images_to_sample_from`` makes the same trade).

The rules:

* **Windows of images, cycles of windows.** Window ``w`` holds ``K`` images (``images_per_window``).
  The windows of one *cycle* are consecutive slices of a random permutation of all ``N`` training
  images, so every image is in a window once per cycle (the last window of a cycle is filled up from
  the permutation's start); the permutation is drawn afresh for each cycle from the run seed and the
  cycle's number alone, on the CPU, so it is the same on every rank and at every resume.
* **Uniform inside a window.** A ray's pixel is uniform over all pixels of the window's images (a
  larger image gets proportionally more rays, as without windows). Over a whole cycle each pixel is
  drawn about as often as uniformly over all images; within a window the batch sees ``K`` images only,
  which is the bias this trades for local reads (measured on the demo scene: ``docs/data.md``).
* **Who uses which window** is the caller's choice (:meth:`ImageWindows.sample` takes the window's
  number): the data module gives step ``s`` of rank ``r`` of ``W`` ranks the window
  ``(s // window_steps) * W + r``, so the ranks of a step train on different images: each rank reads
  only its own shard of the images.

Everything per batch is a function of its arguments: no state, nothing to checkpoint; the draws on
the device need no host synchronisation.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nerf_lightning.data.seeding import derive_seed

_CYCLE_STREAM = 7


class ImageWindows:
    """Uniform pixel draws from the images of a numbered window.

    Args:
        offsets: ``[N + 1]`` int64 first global pixel index of each training image (and the total).
        images_per_window: ``K``, the images of one window (``1 <= K``; at most ``N`` are used).
        seed: the run seed the cycles' permutations are drawn from.
        device: where draws happen (the training device).
    """

    def __init__(self, offsets: Tensor, images_per_window: int, seed: int,
                 device: torch.device | str = "cpu") -> None:
        if images_per_window < 1:
            raise ValueError(f"images_per_window must be a positive number of images, "
                             f"got {images_per_window}")
        host = offsets.detach().to("cpu", torch.int64)
        self.num_images = host.numel() - 1
        if self.num_images < 1:
            raise ValueError("no training image to draw pixels from")
        self.images_per_window = min(int(images_per_window), self.num_images)
        self.windows_per_cycle = -(-self.num_images // self.images_per_window)
        self.seed = seed
        self.device = torch.device(device)
        self._starts = host[:-1].to(self.device)  # [N]
        self._sizes = (host[1:] - host[:-1]).to(self.device)  # [N] pixels of each image

    def images(self, window: int) -> Tensor:
        """``[K]`` int64 (CPU) the training images of window ``window`` (any integer >= 0)."""
        cycle, slot = divmod(int(window), self.windows_per_cycle)
        generator = torch.Generator().manual_seed(derive_seed(self.seed, cycle, _CYCLE_STREAM))
        order = torch.randperm(self.num_images, generator=generator)  # [N]
        first = slot * self.images_per_window
        return order[(first + torch.arange(self.images_per_window)) % self.num_images]

    def sample(self, count: int, window: int, generator: torch.Generator | None = None) -> Tensor:
        """``[count]`` int64 global pixel indices, uniform over the pixels of window ``window``'s images."""
        chosen = self.images(window).to(self.device, non_blocking=True)  # [K]
        sizes = self._sizes[chosen]  # [K]
        cumulative = sizes.cumsum(0)  # [K]
        draws = torch.rand(count, device=self.device, generator=generator, dtype=torch.float64)  # [count]
        # A uniform index below the window's pixel count, without reading that count on the host.
        index = (draws * cumulative[-1].double()).long().clamp_max(cumulative[-1] - 1)  # [count]
        image = torch.searchsorted(cumulative, index, right=True)  # [count] position in the window
        return self._starts[chosen[image]] + index - (cumulative[image] - sizes[image])
