"""What the viewer draws in 3D besides the rendered frame: training cameras, the scene box and
the sampler's occupied space."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import viser
from torch import Tensor

from nerf_lightning.cameras.geometry import Cameras
from nerf_lightning.core.types import SceneBox
from nerf_lightning.viewer.cameras import vertical_fov, viser_pose

MAX_FRUSTUMS = 300
"""Training cameras drawn at most (evenly picked): each frustum is a scene node with an image."""
THUMBNAIL_SIDE = 64
"""Long side of a frustum's thumbnail in pixels."""


def thumbnail(image: Tensor, side: int = THUMBNAIL_SIDE) -> np.ndarray:
    """``[h, w, 3]`` uint8 of an ``[H, W, 3]`` float image, its long side ``side`` (strided: cheap,
    and a thumbnail needs no filtering)."""
    height, width = image.shape[:2]
    step = max(1, -(-max(height, width) // side))
    small = image[::step, ::step].float().clamp(0, 1)
    return (small * 255).round().to(torch.uint8).cpu().numpy()


def box_edges(box: SceneBox) -> np.ndarray:
    """``[12, 2, 3]`` the box's edges as line segments."""
    lower, upper = box.lower.float().cpu().numpy(), box.upper.float().cpu().numpy()
    corners = np.array([[(upper if (i >> a) & 1 else lower)[a] for a in range(3)] for i in range(8)])
    edges = [(i, i | (1 << a)) for i in range(8) for a in range(3) if not (i >> a) & 1]
    return np.stack([corners[[i, j]] for i, j in edges])


def draw_scene_box(server: viser.ViserServer, box: SceneBox) -> None:
    """The scene box as a wireframe; its diagonal sets the scale of the other markers."""
    server.scene.add_line_segments("/scene_box", box_edges(box), colors=(90, 90, 90),
                                   thickness=2.0, thickness_units="screen")


def draw_cameras(server: viser.ViserServer, cameras: Cameras, images: Sequence[Tensor], scale: float
                 ) -> list[viser.CameraFrustumHandle]:
    """Frustums of (at most :data:`MAX_FRUSTUMS` of) ``cameras``, each showing its image."""
    count = len(cameras)
    picks = np.linspace(0, count - 1, min(count, MAX_FRUSTUMS)).round().astype(int) if count else []
    handles = []
    for index in np.unique(picks):
        wxyz, position = viser_pose(cameras.camera_to_world[index])
        aspect = float(cameras.width[index]) / float(cameras.height[index])
        handles.append(server.scene.add_camera_frustum(
            f"/cameras/{index:05d}", fov=vertical_fov(cameras, int(index)), aspect=aspect, scale=scale,
            thickness=1.5, thickness_units="screen", color=(40, 90, 200), image=thumbnail(images[index]),
            format="jpeg", wxyz=wxyz, position=position))
    return handles


def draw_points(server: viser.ViserServer, points: Tensor | None, size: float, visible: bool
                ) -> viser.PointCloudHandle | None:
    """The sampler's occupied space as a point cloud, replacing the previous one; ``None`` (and no
    cloud) when ``points`` is ``None`` or empty."""
    if points is None or points.numel() == 0:
        server.scene.remove_by_name("/occupied")
        return None
    return server.scene.add_point_cloud("/occupied", points.float().cpu().numpy(), colors=(255, 140, 0),
                                        point_size=size, point_shape="square", visible=visible)
