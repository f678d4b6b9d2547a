import numpy as np
import pytest

from services.common.errors import InvalidArgument
from services.orchestrator import intervals
from services.orchestrator.intervals import FAILS, HOLDS, NOT_SHOWN, Interval


def _pair(n, shift, seed=1):
    rng = np.random.default_rng(seed)
    base = rng.uniform(0, 1, n)  # prompt difficulty, shared by both checkpoints
    return np.clip(base + shift + rng.normal(0, 0.1, n), 0, 1), base


@pytest.mark.parametrize("shift, direction, threshold, expected", [
    (0.2, 1, 0.05, HOLDS),       # a known rise, well past its threshold
    (0.0, 1, 0.0, NOT_SHOWN),    # no difference: the interval straddles zero
    (-0.2, 1, 0.0, FAILS),       # the claimed rise is a drop
    (-0.2, -1, 0.05, HOLDS),     # a claimed drop that is one
    (0.2, -1, 0.0, FAILS),       # a claimed drop that is a rise
    (0.03, 1, 0.05, NOT_SHOWN),  # above zero, but by less than the claim's threshold
])
def test_verdicts_from_the_paired_interval(shift, direction, threshold, expected):
    a, b = _pair(200, shift)
    ci = intervals.paired_bootstrap(a, b)
    assert ci.low <= ci.estimate <= ci.high
    assert intervals.verdict(ci, direction, threshold) == expected


def test_bootstrap_matches_the_normal_interval_on_many_prompts():
    a, b = _pair(4000, 0.05)
    boot, normal = intervals.paired_bootstrap(a, b), intervals.normal_interval(a, b)
    assert boot.estimate == pytest.approx(normal.estimate)
    half = (normal.high - normal.low) / 2
    assert abs(boot.low - normal.low) < 0.1 * half and abs(boot.high - normal.high) < 0.1 * half


def test_pairing_cancels_the_prompt_spread():
    """The shared difficulty spread makes an unpaired comparison blind to a 0.05 rise; paired, it shows."""
    a, b = _pair(100, 0.05)
    paired = intervals.paired_bootstrap(a, b)
    unpaired_half = 1.96 * np.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size)
    assert paired.low > 0 and paired.estimate - unpaired_half < 0


def test_seeded_and_the_ratio_agrees_with_the_scaled_difference():
    a, b = _pair(64, -0.05, seed=3)
    assert intervals.paired_bootstrap(a, b, seed=7) == intervals.paired_bootstrap(a, b, seed=7)
    ratio = intervals.paired_ratio_bootstrap(a, b)
    diff = intervals.paired_bootstrap(a, b, scale=0.9)
    assert ratio.estimate == pytest.approx(a.mean() / b.mean())
    assert (ratio.low >= 0.9) == (diff.low >= 0) and (ratio.high >= 0.9) == (diff.high >= 0)


def test_identical_scores_give_a_zero_width_interval_not_shown():
    ci = intervals.paired_bootstrap([0.5, 1.0], [0.5, 1.0])
    assert (ci.low, ci.high) == (0.0, 0.0) and intervals.verdict(ci) == NOT_SHOWN
    assert intervals.verdict(None) == NOT_SHOWN


@pytest.mark.parametrize("call, field", [
    (lambda: intervals.paired_bootstrap([1.0], [1.0, 0.0]), "scores"),
    (lambda: intervals.paired_bootstrap([], []), "scores"),
    (lambda: intervals.paired_bootstrap([float("nan")], [0.0]), "scores"),
    (lambda: intervals.paired_bootstrap([1.0], [0.0], resamples=0), "resamples"),
    (lambda: intervals.paired_bootstrap([1.0], [0.0], level=1.0), "level"),
    (lambda: intervals.verdict(Interval(0, 0, 0, 1), direction=0), "direction"),
    (lambda: intervals.verdict(Interval(0, 0, 0, 1), threshold=-1), "threshold"),
])
def test_bad_input_names_its_field(call, field):
    with pytest.raises(InvalidArgument, match=field):
        call()


def test_paired_scores_take_the_prompts_both_scored():
    assert intervals.paired_scores({"t1": 1.0, "t2": 0.5, "t3": 0.0}, {"t2": 0.25, "t1": 0.0}) == ([1.0, 0.5], [0.0, 0.25])
