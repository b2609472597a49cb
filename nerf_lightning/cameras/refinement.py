"""Per-frame camera pose refinement: an ``SO(3) x R^3`` correction for each training image.

Poses from structure-from-motion (phone captures, COLMAP) are a little off, and a radiance field
trained on them blurs what the cameras disagree on. :class:`CameraRefinement` learns, with the
field, one small rigid correction per training image and applies it to that image's rays before
they are sampled (nerfstudio's ``SO3xR3`` camera optimiser does the same).

Convention (one place; :meth:`CameraRefinement.correct_rays` and
:meth:`CameraRefinement.corrected_poses` both follow it). Camera ``i`` has the parameters
``p_i = (w_i, u_i)``: ``w_i`` ``[3]`` an axis-angle rotation (radians, world axes) and ``u_i`` ``[3]``
a translation (world units). With
``R_delta = exp(w_i)`` and the given camera-to-world ``[R | t]`` (``t`` the camera centre), the
corrected camera-to-world is::

    [R' | t'] = [R_delta @ R | t + u_i]

that is, the camera turns about its own centre by ``R_delta`` (expressed in world axes: a
left-multiplied rotation that leaves the centre where it is) and its centre then moves by ``u_i``.
For a ray of that camera (origin ``o = t``, unit direction ``d = R @ d_camera``)::

    o' = o + u_i,    d' = R_delta @ d     (still unit length; near and far are kept as given)

Zero parameters are the identity, which is where the table starts. (nerfstudio multiplies its
correction on the right, ``c2w @ [R_delta | u]``: rotation and translation in camera axes. Both
parametrise the same poses; world axes make ``u`` a plain world displacement and leave the centre
fixed under a pure rotation.)
"""

from __future__ import annotations

import math
from typing import Any

import torch
from kornia.geometry.conversions import axis_angle_to_rotation_matrix
from torch import Tensor, nn

from nerf_lightning.core.constructor_spec import RecordsConstructorArguments
from nerf_lightning.core.types import Rays


def so3_exp(axis_angle: Tensor) -> Tensor:
    """Rotation matrices ``[..., 3, 3]`` of axis-angle vectors ``[..., 3]`` (radians; the exponential map).

    Rodrigues' formula, with a Taylor series below ``|w| = 1e-3`` so that the value and the gradient
    are exact and finite at zero (kornia's ``axis_angle_to_rotation_matrix``, whose ``sqrt`` never
    sees a zero radicand: the gradient at the identity is the analytic one, not NaN). Right-hand rule:
    ``(0, 0, pi / 2)`` turns ``+x`` into ``+y``. Elementwise ``torch.where``, no host synchronisation.
    """
    return axis_angle_to_rotation_matrix(axis_angle)


class CameraRefinement(RecordsConstructorArguments, nn.Module):
    """Learned ``SO(3) x R^3`` correction of each training camera (see the module docstring).

    Args:
        learning_rate: Adam's learning rate for the corrections (their own optimizer parameter group;
            the model's decay schedule applies to it too).
        penalty: weight of the squared-norm penalty ``penalty * mean_i |p_i|^2`` (rotation in radians,
            translation in world units) added to the training loss: it removes the freedom of moving
            every camera and the scene together. Its pull on one correction, ``2 * penalty / N`` times
            the correction (``N`` cameras), was far weaker at the default than the noise in that
            correction's gradient on the suite's tabletop scene, so it does not by itself hold
            corrections at zero (docs/camera-refinement.md).
        start_step: the corrections learn from this training step on. Before it the field is too
            wrong for its gradient to say where a camera is: each correction would follow whatever its
            images disagree with the early field on (Adam moves every parameter by about the learning
            rate per step, whatever the gradient's size), and the corrections wander off poses that
            were right.
        every: after ``start_step``, the corrections learn on every ``every``-th step and are applied
            as constants on the others. A learning step differentiates the loss with respect to every
            sample's position, through the field's encoding; the other steps cost what a step without
            refinement costs.

    Steps are ``global_step`` values, so a resumed run learns on the same steps as an uninterrupted one.

    The parameter ``corrections`` ``[N, 6]`` holds ``(w_x, w_y, w_z, u_x, u_y, u_z)`` per camera, zero
    at start. It is empty until training sizes it to the number of training images
    (:meth:`set_num_cameras`); a checkpoint's table loads whatever its size.
    """

    corrections: nn.Parameter

    def __init__(self, learning_rate: float = 1e-3, penalty: float = 1e-2, start_step: int = 300,
                 every: int = 4) -> None:
        super().__init__()
        if not (math.isfinite(learning_rate) and learning_rate > 0):
            raise ValueError(f"learning_rate must be a positive number, got {learning_rate}")
        if not (math.isfinite(penalty) and penalty >= 0):
            raise ValueError(f"penalty must be a number >= 0, got {penalty}")
        if isinstance(start_step, bool) or not isinstance(start_step, int) or start_step < 0:
            raise ValueError(f"start_step must be a whole number >= 0, got {start_step!r}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be a whole number >= 1, got {every!r}")
        self.learning_rate = learning_rate
        self.penalty = penalty
        self.start_step = start_step
        self.every = every
        self.corrections = nn.Parameter(torch.zeros(0, 6))

    @property
    def num_cameras(self) -> int:
        return self.corrections.shape[0]

    def set_num_cameras(self, num_cameras: int) -> None:
        """Size the table for ``num_cameras`` training images (before the optimizer is built).

        Keeps the table when it already has that size (a checkpoint's corrections survive a later
        ``setup``); otherwise a new zero table replaces it, on the same device.
        """
        if num_cameras != self.num_cameras:
            old = self.corrections
            self.corrections = nn.Parameter(old.new_zeros(num_cameras, 6), requires_grad=old.requires_grad)

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        # A checkpoint's table has as many rows as its run had training images, which the module that
        # load_from_checkpoint builds (an empty table) cannot know: resize first.
        saved = state_dict.get(prefix + "corrections")
        if isinstance(saved, Tensor) and saved.dim() == 2 and saved.shape[1] == 6:
            self.set_num_cameras(saved.shape[0])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def check_resumed_table(self, saved: Tensor | None) -> None:
        """Refuse a checkpoint's table ``saved`` ``[M, 6]`` that does not fit a table already sized for
        training (``fit --ckpt_path`` on a dataset with another number of training images): loading
        it would replace the parameter the optimizer already holds. An empty table (a model being
        rebuilt from the checkpoint) takes any size.

        Raises:
            ValueError: one line giving both sizes.
        """
        if saved is not None and self.num_cameras > 0 and saved.shape[0] != self.num_cameras:
            raise ValueError(f"the checkpoint's camera refinement holds {saved.shape[0]} corrections but the "
                             f"data has {self.num_cameras} training images; expected the dataset the "
                             "checkpoint was trained on")

    def learns_at(self, step: int) -> bool:
        """Whether the corrections learn on training step ``step`` (``start_step``, ``every``)."""
        return step >= self.start_step and (step - self.start_step) % self.every == 0

    def correct_rays(self, rays: Rays, camera_indices: Tensor, learn: bool = True) -> Rays:
        """``rays`` of the training cameras ``camera_indices`` moved by their cameras' corrections.

        (Not named ``apply``: that is ``nn.Module.apply(fn)``, which ``model.apply(init_fn)`` calls on
        every submodule.)

        Args:
            rays: ``R`` rays whose origins are their cameras' centres (pinhole rays, as
                :func:`~nerf_lightning.cameras.geometry.generate_rays` makes them).
            camera_indices: ``[R]`` int64 index of each ray's training image in ``[0, N)``.
            learn: gradients flow to ``corrections`` (``False``: the corrections are applied as
                constants, and nothing upstream of the rays needs a gradient).

        Returns:
            ``Rays`` with ``origins + u`` ``[R, 3]`` and ``R_delta @ directions`` ``[R, 3]``,
            ``near``/``far`` unchanged. Pure torch: no host synchronisation.
        """
        corrections = self.corrections if learn else self.corrections.detach()
        # [R, 6]. index_select, not table[indices]: its backward adds in index order however many CPU
        # threads run, so training stays bitwise repeatable (see nerf_lightning/rendering/packed.py).
        table = corrections.index_select(0, camera_indices)
        rotation = so3_exp(table[:, :3]).to(rays.directions.dtype)  # [R, 3, 3]
        directions = torch.einsum("rij,rj->ri", rotation, rays.directions)
        origins = rays.origins + table[:, 3:].to(rays.origins.dtype)
        return Rays(origins=origins, directions=directions, near=rays.near, far=rays.far)

    def penalty_loss(self) -> Tensor:
        """``penalty * mean_i |p_i|^2`` as a 0-dim tensor (zero for an empty table)."""
        if self.num_cameras == 0:
            return self.corrections.sum() * 0.0
        return self.penalty * self.corrections.square().sum(dim=-1).mean()

    def correction_sizes(self) -> tuple[Tensor, Tensor]:
        """Mean rotation angle (degrees) and mean translation length (world units) over the cameras,
        0-dim tensors (no gradient), for logging."""
        table = self.corrections.detach()
        if self.num_cameras == 0:
            zero = table.new_zeros(())
            return zero, zero
        return torch.rad2deg(table[:, :3].norm(dim=-1).mean()), table[:, 3:].norm(dim=-1).mean()

    @torch.no_grad()
    def corrected_poses(self, camera_to_world: Tensor) -> Tensor:
        """``[N, 3, 4]`` corrected camera-to-world matrices ``[R_delta @ R | t + u]`` of the given
        ``camera_to_world [N, 3, 4]`` of the training cameras (in the same world frame and dtype)."""
        if camera_to_world.shape != (self.num_cameras, 3, 4):
            raise ValueError(f"expected camera_to_world [{self.num_cameras}, 3, 4] (one per training "
                             f"camera), got {list(camera_to_world.shape)}")
        table = self.corrections.detach().to(device=camera_to_world.device, dtype=camera_to_world.dtype)
        rotation = so3_exp(table[:, :3])
        return torch.cat([rotation @ camera_to_world[:, :, :3],
                          (camera_to_world[:, :, 3] + table[:, 3:])[:, :, None]], dim=-1)
