"""A loaded split of a scene: cameras plus decoded, background-composited images."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from nerf_lightning.data.cameras import Cameras


@dataclass
class SceneSplit:
    """Images of one split (``train``, ``val`` or ``test``) and their cameras.

    Attributes:
        cameras: ``N`` cameras, already scaled to the stored image size.
        images: ``N`` tensors ``[H_i, W_i, 3]`` float32 in ``[0, 1]``, alpha already composited
            over the background; ``H_i, W_i`` equal ``cameras.height[i], cameras.width[i]``.
        names: ``N`` image paths relative to the dataset root (for messages and reports).
        source: the file the split was read from (for messages).
        depth_range: ``(near, far)`` depths along the optical axis, in world units, between which
            all content lies (forward-facing captures such as LLFF); ``None`` when unknown.
        world_scale, world_transform: how the loader normalised the capture's world: a point ``x``
            of the capture maps to ``world_transform[:, :3] @ (world_scale * x) + world_transform[:, 3]``
            (``world_transform`` ``[3, 4]``; ``None`` means the identity).
    """

    cameras: Cameras
    images: list[Tensor]
    names: list[str]
    source: str
    depth_range: tuple[float, float] | None = None
    world_scale: float = 1.0
    world_transform: Tensor | None = None

    def __len__(self) -> int:
        return len(self.images)
