"""Learning-rate schedules of a cascade stage (`optimizer.schedule`): the YAML shapes and the rate they give.

A stage's schedule is one of SCHEDULE_TYPES, told apart by `type`; `schedule_lr` turns one into
the rate of a 0-based step with services.common.lr_schedules, the implementation the trainer's own
schedule uses too. This module knows nothing about loading files, stages or the services.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.common import lr_schedules


class StrictModel(BaseModel):
    """Unknown keys are errors, so a misspelt option never silently falls back to a default; each field's
    docstring is its description (the cascade file's documentation)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class ConstantSchedule(StrictModel):
    """The learning rate is `lr` at every step."""

    type: Literal["constant"] = "constant"


class LinearWarmupSchedule(StrictModel):
    """Linear warm-up from `start_lr` to `lr` over `warmup_steps`, then constant (the paper's MOPD)."""

    type: Literal["linear_warmup"]
    warmup_steps: int = Field(ge=1)
    """Steps over which the rate climbs from start_lr to lr."""
    start_lr: float = Field(default=0.0, ge=0)
    """Learning rate at step 0."""


class CosineSchedule(StrictModel):
    """Optional linear warm-up, then cosine decay from `lr` to `min_lr` at the stage's last step."""

    type: Literal["cosine"]
    warmup_steps: int = Field(default=0, ge=0)
    """Steps of linear warm-up from 0 before the decay starts; 0 disables warm-up."""
    min_lr: float = Field(default=0.0, ge=0)
    """Learning rate reached at the last step."""


Schedule = Annotated[ConstantSchedule | LinearWarmupSchedule | CosineSchedule, Field(discriminator="type")]
SCHEDULE_TYPES: dict[str, type[StrictModel]] = {
    "constant": ConstantSchedule, "linear_warmup": LinearWarmupSchedule, "cosine": CosineSchedule,
}


def schedule_lr(schedule: ConstantSchedule | LinearWarmupSchedule | CosineSchedule, lr: float, step: int,
                total_steps: int) -> float:
    """Learning rate at 0-based `step` of a stage of `total_steps` steps with peak rate `lr`.

    constant:      lr
    linear_warmup: start_lr + (lr - start_lr) * min(1, step / warmup_steps)
    cosine:        lr * (step + 1) / warmup_steps during warm-up (no step at rate 0), then
                   min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2, p = (step - warmup) / (total - 1 - warmup)
    """
    if isinstance(schedule, LinearWarmupSchedule):
        return lr_schedules.linear_warmup_lr(step, lr, schedule.warmup_steps, schedule.start_lr)
    if isinstance(schedule, CosineSchedule):
        return lr_schedules.cosine_lr(step, lr, total_steps, schedule.warmup_steps, schedule.min_lr)
    return lr_schedules.constant_lr(step, lr)
