"""Paired confidence intervals for the method's claims, and the verdict they give.

Two checkpoints scored on the same n validation prompts with the same random numbers give paired
per-prompt scores a_i, b_i (each an avg@k). The claim is about the mean difference
    D = mean_i (a_i - c * b_i)        (c = 1 for a gain or a drop; c = 0.9 for "≥ 90 % of the teacher")
and its uncertainty comes from which prompts were drawn. The paired percentile bootstrap: draw B
resamples of n prompt indices with replacement (seeded), each giving D*_b = mean over the resample
of (a - c b); the interval is the (α/2, 1 - α/2) quantiles of the D*_b (α = 1 - level). Pairing
matters: the prompt-to-prompt spread, shared by both checkpoints, cancels in a_i - b_i.

A claim `holds` when its interval excludes zero in the claimed direction and its figure is at least
the claim's threshold (the issue's "raises by ≥ 0.05 absolute, interval above zero"), `fails` when
the interval excludes zero the other way, and is `not shown` otherwise. Pure functions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from services.common.errors import InvalidArgument

HOLDS, NOT_SHOWN, FAILS = "holds", "not shown", "fails"
VERDICTS = (HOLDS, NOT_SHOWN, FAILS)
RESAMPLES = 2000
LEVEL = 0.95
SEED = 0


@dataclass(frozen=True)
class Interval:
    """`estimate` = D on the prompts themselves; [low, high] its `level` interval; n prompts."""

    estimate: float
    low: float
    high: float
    n: int
    level: float = LEVEL

    def __str__(self) -> str:
        return f"{self.estimate:+.2f} [{self.low:+.2f}, {self.high:+.2f}]"


def _paired(a, b, scale: float) -> np.ndarray:
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.ndim != 1 or a.shape != b.shape:
        raise InvalidArgument("scores", f"need two 1-d score vectors of one length (got {a.shape} and {b.shape})")
    if a.size == 0:
        raise InvalidArgument("scores", "need at least one prompt scored by both checkpoints")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise InvalidArgument("scores", "every per-prompt score must be finite")
    return a - scale * b


def _check(resamples: int, level: float) -> None:
    if resamples < 1:
        raise InvalidArgument("resamples", f"must be >= 1 (got {resamples})")
    if not 0 < level < 1:
        raise InvalidArgument("level", f"must lie strictly between 0 and 1 (got {level})")


def resample_indices(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n) prompt indices drawn with replacement from a generator seeded with `seed`."""
    return np.random.default_rng(seed).integers(0, n, size=(resamples, n))


def paired_bootstrap(a, b, *, scale: float = 1.0, resamples: int = RESAMPLES, level: float = LEVEL,
                     seed: int = SEED) -> Interval:
    """Percentile bootstrap interval of D = mean_i (a_i - scale * b_i) over paired prompts i."""
    _check(resamples, level)
    d = _paired(a, b, scale)
    means = d[resample_indices(d.size, resamples, seed)].mean(axis=1)
    alpha = 1.0 - level
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return Interval(float(d.mean()), float(low), float(high), int(d.size), level)


def paired_ratio_bootstrap(a, b, *, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED) -> Interval:
    """Percentile bootstrap interval of R = mean(a) / mean(b) over paired prompts, drawn with the same
    resamples (same seed) as `paired_bootstrap`, so R*_b ≥ c exactly when D*_b(scale=c) ≥ 0 for every
    resample with mean(b*) > 0; a resample with mean(b*) = 0 counts as R* = 1 (nothing to match)."""
    _check(resamples, level)
    _paired(a, b, 1.0)
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    idx = resample_indices(a.size, resamples, seed)
    num, den = a[idx].mean(axis=1), b[idx].mean(axis=1)
    ratios = np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0)
    alpha = 1.0 - level
    low, high = np.quantile(ratios, [alpha / 2, 1 - alpha / 2])
    estimate = float(a.mean() / b.mean()) if b.mean() > 0 else 1.0
    return Interval(estimate, float(low), float(high), int(a.size), level)


def normal_interval(a, b, *, scale: float = 1.0, level: float = LEVEL) -> Interval:
    """Closed form: D ± z_{1-α/2} · s_d / sqrt(n), s_d the sample standard deviation of the differences
    (what the bootstrap approaches for large n; a check on it, not used for verdicts)."""
    _check(1, level)
    d = _paired(a, b, scale)
    half = NormalDist().inv_cdf(1 - (1 - level) / 2) * (float(d.std(ddof=1)) if d.size > 1 else 0.0) / np.sqrt(d.size)
    return Interval(float(d.mean()), float(d.mean() - half), float(d.mean() + half), int(d.size), level)


def verdict(interval: Interval | None, direction: int = 1, threshold: float = 0.0) -> str:
    """`holds` when direction·[low, high] lies above zero and direction·estimate ≥ threshold;
    `fails` when it lies below zero; `not shown` otherwise (and without an interval)."""
    if direction not in (1, -1):
        raise InvalidArgument("direction", f"must be 1 (a rise) or -1 (a drop) (got {direction})")
    if threshold < 0:
        raise InvalidArgument("threshold", f"must be >= 0 (got {threshold})")
    if interval is None:
        return NOT_SHOWN
    lo, hi = sorted((direction * interval.low, direction * interval.high))
    if lo > 0 and direction * interval.estimate >= threshold - 1e-12:
        return HOLDS
    if hi < 0:
        return FAILS
    return NOT_SHOWN


def paired_scores(a: dict[str, float], b: dict[str, float]) -> tuple[list[float], list[float]]:
    """The scores of the prompts (task ids) both `a` and `b` scored, in one order."""
    common = sorted(set(a) & set(b))
    return [a[k] for k in common], [b[k] for k in common]
