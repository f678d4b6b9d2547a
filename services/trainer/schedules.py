"""The trainer's own learning-rate schedule (used when TrainStep sends no rate), in an explicit registry.

Each schedule is `fn(step, config) -> lr` where `step` counts optimizer steps already taken
(0 for the first update); the math is services.common.lr_schedules, the same functions the
orchestrator computes the rates it sends with, so one schedule means one thing everywhere. `build_lr_lambda` turns one into the multiplier a torch `LambdaLR`
wants, so DeepSpeed saves and restores the schedule with the checkpoint. This module knows
nothing of optimizers' internals, engines or services.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.common import lr_schedules


class ScheduleConfig(BaseModel):
    """A learning-rate schedule (one per stage)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "constant"
    """One of SCHEDULES: constant, linear_warmup, cosine."""
    lr: float = Field(default=3e-6, gt=0)
    """Peak learning rate (after warm-up). The paper's RL stages use 3e-6, MOPD 2e-6."""
    warmup_steps: int = Field(default=0, ge=0)
    """Steps of linear warm-up: from warmup_start_lr to lr (linear_warmup, >= 1; MOPD: 30), or from 0
    with no step at rate 0 (cosine: lr * (t + 1) / W)."""
    warmup_start_lr: float = Field(default=0.0, ge=0)
    """linear_warmup: learning rate of the first step of warm-up. MOPD: 2e-7."""
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
        if self.name == "linear_warmup" and self.warmup_steps < 1:
            raise ValueError("linear_warmup: warmup_steps must be >= 1")
        if self.name != "linear_warmup" and self.warmup_start_lr:
            raise ValueError(f"warmup_start_lr is a linear_warmup setting; {self.name} warms up from 0 "
                             "(lr * (t + 1) / warmup_steps): leave it unset")
        return self


def compute_constant_lr(step: int, cfg: ScheduleConfig) -> float:
    """lr_t = lr (lr_schedules.constant_lr)."""
    return lr_schedules.constant_lr(step, cfg.lr)


def compute_linear_warmup_lr(step: int, cfg: ScheduleConfig) -> float:
    """lr_t = start + (lr - start) * min(1, t / W) (lr_schedules.linear_warmup_lr)."""
    return lr_schedules.linear_warmup_lr(step, cfg.lr, cfg.warmup_steps, cfg.warmup_start_lr)


def compute_cosine_lr(step: int, cfg: ScheduleConfig) -> float:
    """lr_schedules.cosine_lr with its last step at `total_steps`: warm-up lr * (t + 1) / W, then
    min + (lr - min) * (1 + cos(pi * p)) / 2, p = (t - W) / (total - W) clipped to 1."""
    return lr_schedules.cosine_lr(step, cfg.lr, cfg.total_steps + 1, cfg.warmup_steps, cfg.min_lr)


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
