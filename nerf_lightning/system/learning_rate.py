"""The learning-rate schedule of the training system: constant, then 10x lower every ``steps`` steps,
down to a floor.

A constant rate keeps the young field learning fast; lowered afterwards, the same steps settle finer
detail (on the demo scene a decay starting a few hundred steps in ended higher and reached a given
PSNR sooner than a constant rate, while a decay from step 0 reached it later; the measurements are
in benchmarks/RESULTS.md). The floor keeps a
run with many more steps than the schedule was chosen for (a GPU's, in the same wall time) from
stalling at a vanishing rate.
"""

from __future__ import annotations

import torch


def check_decay(steps: int, start: int, floor: float) -> None:
    """Raises ``ValueError`` (one line naming ``NerfModule``'s parameter) for a schedule that cannot be
    meant."""
    if steps < 0 or start < 0:
        raise ValueError(f"learning_rate_decay_steps and learning_rate_decay_start must be >= 0, got {steps} "
                         f"and {start}")
    if not 0.0 <= floor <= 1.0:
        raise ValueError(f"learning_rate_decay_floor must be a fraction in [0, 1], got {floor}")


def decay_factor(step: int, steps: int, start: int, floor: float) -> float:
    """The rate at ``step`` as a fraction of the initial one: ``1`` until ``start``, then
    ``0.1 ** ((step - start) / steps)``, never below ``floor``; always ``1`` when ``steps`` is 0."""
    if steps <= 0:
        return 1.0
    return max(0.1 ** (max(step - start, 0) / steps), floor)


def decay_scheduler(optimizer: torch.optim.Optimizer, steps: int, start: int,
                    floor: float) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step scheduler of every parameter group of ``optimizer`` by :func:`decay_factor`: a
    function of the step alone (not a running product), so a resumed run continues it exactly."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: decay_factor(step, steps, start, floor))
