"""A stage's `optimizer.schedule` shapes and the rate each gives (through services.common.lr_schedules)."""

from __future__ import annotations

import typing

import pytest

from services.common import lr_schedules
from services.orchestrator.cascade_schedules import (
    SCHEDULE_TYPES,
    ConstantSchedule,
    CosineSchedule,
    LinearWarmupSchedule,
    schedule_lr,
)


def test_registry_names_every_shape_by_its_type():
    assert set(SCHEDULE_TYPES) == {"constant", "linear_warmup", "cosine"}
    for name, cls in SCHEDULE_TYPES.items():
        assert typing.get_args(cls.model_fields["type"].annotation) == (name,)


@pytest.mark.parametrize(("schedule", "expected"), [
    (ConstantSchedule(), lambda t: 1e-3),
    (LinearWarmupSchedule(type="linear_warmup", warmup_steps=4, start_lr=1e-4),
     lambda t: lr_schedules.linear_warmup_lr(t, 1e-3, 4, 1e-4)),
    (CosineSchedule(type="cosine", warmup_steps=2, min_lr=1e-5),
     lambda t: lr_schedules.cosine_lr(t, 1e-3, 10, 2, 1e-5)),
])
def test_each_shape_is_the_shared_formula(schedule, expected):
    assert [schedule_lr(schedule, 1e-3, t, 10) for t in range(10)] == pytest.approx([expected(t) for t in range(10)])


def test_a_warm_up_needs_a_step():
    with pytest.raises(ValueError, match="warmup_steps"):
        LinearWarmupSchedule(type="linear_warmup", warmup_steps=0)
