"""Learning-rate schedules: the one implementation, pure functions of a 0-based step.

The orchestrator computes each step's rate from the stage's `optimizer.schedule` and sends it with
TrainStep; the trainer's own schedule (used when no rate is sent) calls the same functions, so a
rate means the same thing wherever it is applied. This module knows nothing about configs,
optimizers or services.
"""

from __future__ import annotations

import math


def constant_lr(step: int, lr: float) -> float:
    """lr_t = lr."""
    return lr


def linear_warmup_lr(step: int, lr: float, warmup_steps: int, start_lr: float = 0.0) -> float:
    """lr_t = start_lr + (lr - start_lr) * min(1, t / W), W = warmup_steps >= 1.
    The paper's MOPD: start 2e-7, lr 2e-6, W 30 -> step 0 at 2e-7, step 30 onwards at 2e-6."""
    return start_lr + (lr - start_lr) * min(1.0, step / warmup_steps)


def cosine_lr(step: int, lr: float, total_steps: int, warmup_steps: int = 0, min_lr: float = 0.0) -> float:
    """Linear warm-up from 0, then cosine decay to min_lr at the last step (t = total_steps - 1):

    t < W:  lr_t = lr * (t + 1) / W   (no step at rate 0)
    else:   lr_t = min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,  p = min(1, (t - W) / max(1, total - 1 - W))
    """
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    span = max(1, total_steps - 1 - warmup_steps)
    p = min(1.0, (step - warmup_steps) / span)
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * p)) / 2
