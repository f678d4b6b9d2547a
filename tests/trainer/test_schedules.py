"""Learning-rate schedules: hand-computed points, the MOPD warm-up, and config errors."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from services.trainer.schedules import SCHEDULES, ScheduleConfig, build_lr_lambda, compute_lr


def test_registry():
    assert set(SCHEDULES) == {"constant", "linear_warmup", "cosine"}


def test_constant():
    cfg = ScheduleConfig(name="constant", lr=3e-6, warmup_steps=5)
    assert [compute_lr(s, cfg) for s in (0, 10, 10_000)] == [3e-6] * 3


def test_mopd_linear_warmup_2e7_to_2e6_over_30_steps():
    cfg = ScheduleConfig(name="linear_warmup", lr=2e-6, warmup_start_lr=2e-7, warmup_steps=30)
    assert compute_lr(0, cfg) == pytest.approx(2e-7)
    assert compute_lr(15, cfg) == pytest.approx(2e-7 + 1.8e-6 / 2)
    assert compute_lr(29, cfg) == pytest.approx(2e-7 + 1.8e-6 * 29 / 30)
    assert compute_lr(30, cfg) == pytest.approx(2e-6) and compute_lr(500, cfg) == pytest.approx(2e-6)


def test_cosine_with_warmup():
    cfg = ScheduleConfig(name="cosine", lr=1.0, warmup_steps=10, total_steps=110, min_lr=0.1)
    assert compute_lr(0, cfg) == pytest.approx(0.1), "warm-up from 0 with no step at rate 0: lr * (t + 1) / W"
    assert compute_lr(5, cfg) == pytest.approx(0.6)
    assert compute_lr(10, cfg) == pytest.approx(1.0)
    assert compute_lr(60, cfg) == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi / 2)) / 2)
    assert compute_lr(110, cfg) == pytest.approx(0.1) and compute_lr(1000, cfg) == pytest.approx(0.1)


def test_lambda_drives_torch_scheduler():
    cfg = ScheduleConfig(name="linear_warmup", lr=2e-6, warmup_start_lr=2e-7, warmup_steps=30)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, build_lr_lambda(cfg))
    seen = []
    for _ in range(31):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen[0] == pytest.approx(2e-7) and seen[30] == pytest.approx(2e-6)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"name": "triangle"}, "triangle"),
        ({"lr": 0}, "lr"),
        ({"name": "cosine", "warmup_steps": 10, "total_steps": 10}, "warmup_steps"),
        ({"name": "cosine", "warmup_steps": 2, "warmup_start_lr": 1e-7}, "warmup_start_lr"),
        ({"name": "linear_warmup"}, "warmup_steps"),
    ],
)
def test_bad_config_says_what_to_fix(kwargs, needle):
    with pytest.raises(ValidationError, match=needle):
        ScheduleConfig(**kwargs)


def test_the_trainer_and_the_orchestrator_share_one_schedule():
    """The rate the orchestrator sends and the one the trainer computes unsent agree at every step
    (cosine: the stage's last step t = steps - 1 is the trainer's total_steps)."""
    from services.orchestrator.cascade_config import OptimizerConfig

    opt = OptimizerConfig.model_validate({"lr": 1.0, "schedule": {"type": "cosine", "warmup_steps": 3, "min_lr": 0.1}})
    cfg = ScheduleConfig(name="cosine", lr=1.0, warmup_steps=3, total_steps=19, min_lr=0.1)
    assert [compute_lr(t, cfg) for t in range(20)] == pytest.approx([opt.lr_at(t, 20) for t in range(20)])
    opt = OptimizerConfig.model_validate({"lr": 2e-6, "schedule": {"type": "linear_warmup", "warmup_steps": 30,
                                                                   "start_lr": 2e-7}})
    cfg = ScheduleConfig(name="linear_warmup", lr=2e-6, warmup_steps=30, warmup_start_lr=2e-7)
    assert [compute_lr(t, cfg) for t in range(40)] == pytest.approx([opt.lr_at(t, 40) for t in range(40)])
