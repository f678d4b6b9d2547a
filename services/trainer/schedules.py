"""Learning-rate schedules: pure functions of the optimizer step, in an explicit registry.

Each schedule is `fn(step, config) -> lr` where `step` counts optimizer steps already taken
(0 for the first update). `build_lr_lambda` turns one into the multiplier a torch `LambdaLR`
wants, so DeepSpeed saves and restores the schedule with the checkpoint. This module knows
nothing of optimizers' internals, engines or services.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ScheduleConfig(BaseModel):
    """A learning-rate schedule (one per stage)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "constant"
    """One of SCHEDULES: constant, linear_warmup, cosine."""
    lr: float = Field(default=3e-6, gt=0)
    """Peak learning rate (after warm-up). The paper's RL stages use 3e-6, MOPD 2e-6."""
    warmup_steps: int = Field(default=0, ge=0)
    """Steps of linear warm-up from warmup_start_lr to lr (linear_warmup, cosine). MOPD: 30."""
    warmup_start_lr: float = Field(default=0.0, ge=0)
    """Learning rate of the first step of warm-up. MOPD: 2e-7."""
    total_steps: int = Field(default=1000, ge=1)
    """cosine: step at which the decay reaches min_lr (stays there afterwards)."""
    min_lr: float = Field(default=0.0, ge=0)
    """cosine: floor of the decay."""

    @model_validator(mode="after")
    def _check(self) -> ScheduleConfig:
        if self.name not in SCHEDULES:
            raise ValueError(f"schedule name {self.name!r} is not one of {', '.join(SCHEDULES)}")
        if self.name == "cosine" and self.warmup_steps >= self.total_steps:
            raise ValueError(f"cosine: warmup_steps ({self.warmup_steps}) must be below total_steps ({self.total_steps})")
        return self


def compute_constant_lr(step: int, cfg: ScheduleConfig) -> float:
    """lr_t = lr."""
    return cfg.lr


def compute_linear_warmup_lr(step: int, cfg: ScheduleConfig) -> float:
    """lr_t = start + (lr - start) * t / W for t < W, then lr (W = warmup_steps, start = warmup_start_lr).
    MOPD: start 2e-7, lr 2e-6, W 30 -> step 0 uses 2e-7, step 30 onwards 2e-6."""
    if step < cfg.warmup_steps:
        return cfg.warmup_start_lr + (cfg.lr - cfg.warmup_start_lr) * step / cfg.warmup_steps
    return cfg.lr


def compute_cosine_lr(step: int, cfg: ScheduleConfig) -> float:
    """Linear warm-up as above, then lr_t = min + (lr - min) * (1 + cos(pi * p)) / 2 with
    p = (t - W) / (total - W) clipped to [0, 1]."""
    if step < cfg.warmup_steps:
        return compute_linear_warmup_lr(step, cfg)
    p = min(max((step - cfg.warmup_steps) / (cfg.total_steps - cfg.warmup_steps), 0.0), 1.0)
    return cfg.min_lr + (cfg.lr - cfg.min_lr) * (1.0 + math.cos(math.pi * p)) / 2.0


SCHEDULES: dict[str, Callable[[int, ScheduleConfig], float]] = {
    "constant": compute_constant_lr,
    "linear_warmup": compute_linear_warmup_lr,
    "cosine": compute_cosine_lr,
}


def compute_lr(step: int, cfg: ScheduleConfig) -> float:
    """The learning rate of optimizer step `step` under `cfg`."""
    return SCHEDULES[cfg.name](step, cfg)


def build_lr_lambda(cfg: ScheduleConfig) -> Callable[[int], float]:
    """Multiplier of the optimizer's base lr (= cfg.lr) for torch.optim.lr_scheduler.LambdaLR."""
    return lambda step: compute_lr(step, cfg) / cfg.lr
