"""The one learning-rate schedule implementation against hand-computed points."""

from __future__ import annotations

import math

import pytest

from services.common.lr_schedules import constant_lr, cosine_lr, linear_warmup_lr


def test_constant():
    assert [constant_lr(t, 3e-6) for t in (0, 7, 10_000)] == [3e-6] * 3


def test_linear_warmup_the_papers_mopd():
    assert linear_warmup_lr(0, 2e-6, 30, 2e-7) == pytest.approx(2e-7)
    assert linear_warmup_lr(15, 2e-6, 30, 2e-7) == pytest.approx(2e-7 + 1.8e-6 / 2)
    assert linear_warmup_lr(30, 2e-6, 30, 2e-7) == linear_warmup_lr(500, 2e-6, 30, 2e-7) == pytest.approx(2e-6)


def test_cosine_warms_up_without_a_step_at_zero_then_decays_to_min_at_the_last_step():
    # 11 steps, warm-up 2: t = 0, 1 -> 0.5, 1.0; decay over t = 2..10 (span 8)
    assert cosine_lr(0, 1.0, 11, 2, 0.1) == pytest.approx(0.5) and cosine_lr(1, 1.0, 11, 2, 0.1) == pytest.approx(1.0)
    assert cosine_lr(2, 1.0, 11, 2, 0.1) == pytest.approx(1.0)
    assert cosine_lr(6, 1.0, 11, 2, 0.1) == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi / 2)) / 2)
    assert cosine_lr(10, 1.0, 11, 2, 0.1) == pytest.approx(0.1) and cosine_lr(50, 1.0, 11, 2, 0.1) == pytest.approx(0.1)


def test_cosine_of_a_one_step_stage_is_the_peak():
    assert cosine_lr(0, 1.0, 1) == pytest.approx(1.0)
