"""The figures of bench/trl_compare.py: medians over timed steps (warm-up left out), tokens/s per run,
reward curves, scaling over the same rounds — checked against hand-computed values."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import trl_report as rep  # noqa: E402


def record(seconds: float, tokens: int = 0, reward: float | None = None, **phases: float) -> dict:
    return {"seconds": seconds, "tokens": tokens, "reward_mean": reward, "phases": phases}


RUN_A = [record(9.0, 100, 0.0, generated=5.0), record(2.0, 60, 0.25, generated=1.0), record(4.0, 60, 0.5, generated=2.0)]
RUN_B = [record(7.0, 100, 0.5, generated=4.0), record(3.0, 90, 0.25, generated=1.5)]


class TestMedians:
    def test_step_seconds_leave_out_each_runs_first_step(self):
        assert rep.step_seconds([RUN_A, RUN_B]) == pytest.approx(3.0)  # median of 2, 4, 3

    def test_phase_seconds_default_to_zero(self):
        assert rep.phase_seconds([RUN_A, RUN_B], "generated") == pytest.approx(1.5)
        assert rep.phase_seconds([RUN_A], "scored") == 0.0

    def test_tokens_per_second_is_per_run_then_median(self):
        # run A: 120 tokens / 6 s = 20; run B: 90 / 3 = 30 -> median 25
        assert rep.tokens_per_second([RUN_A, RUN_B]) == pytest.approx(25.0)

    def test_reward_curve_keeps_every_step_up_to_the_shortest_run(self):
        assert rep.reward_curve([RUN_A, RUN_B]) == pytest.approx([0.25, 0.25])

    def test_median_ignores_missing_values_and_is_nan_when_empty(self):
        assert rep.median([None, 1.0, 3.0]) == 2.0
        assert math.isnan(rep.median([None]))


class TestTables:
    @pytest.mark.parametrize(("a", "b", "text"), [(3.0, 2.0, "1.50x"), (1.0, 4.0, "0.25x"), (1.0, 0.0, "n/a")])
    def test_ratio(self, a, b, text):
        assert rep.ratio(a, b) == text

    def test_table_aligns_numbers_right(self):
        lines = rep.table(["what", "x"], [["a", "1"]])
        assert lines == ["| what | x |", "|---|---:|", "| a | 1 |"]

    def test_scaling_compares_the_same_rounds(self):
        grpo = {"cascade": [{"steps": RUN_A}, {"steps": [record(1.0), record(100.0)]}], "variant": [{"steps": RUN_B}]}
        mopd = {"cascade": [{"steps": RUN_B}], "variant": []}
        rows = rep.scaling(grpo, mopd)
        assert rows[2] == "| GRPO, 1 Celery worker | 1 | 3.00 | 0.333 |"  # round 2 (100 s) is not in the variant
        assert rows[3] == "| GRPO, 2 Celery workers | 1 | 3.00 | 0.333 |"
        assert len(rows) == 4  # header, rule, 2 GRPO rows; MOPD shares no round with a variant: no rows
