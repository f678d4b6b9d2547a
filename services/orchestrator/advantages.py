"""GRPO advantages, dynamic filtering, the overlong rule, error-verdict masking and MOPD's batch (DESIGN.md section 3).

Pure numpy on [P, G] arrays (P prompts, G responses per prompt). `compute_group_batch` is GRPO's
batch, `compute_mopd_batch` MOPD's; both apply the overlong rule through OVERLONG_RULES only. A sample whose verdict is `error`
(the verifier failed) is *invalid*: it is left out of its group's statistics and out of the loss,
and counted — never scored 0. This module knows nothing about gRPC, tokens or the trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from services.common.errors import InvalidArgument

DEFAULT_EPS = 1e-6


def _check_2d(name: str, a: np.ndarray, shape: tuple[int, ...] | None = None) -> None:
    if a.ndim != 2:
        raise InvalidArgument(name, f"expected a [prompts, rollouts] array, got shape {a.shape}")
    if shape is not None and a.shape != shape:
        raise InvalidArgument(name, f"shape {a.shape} differs from rewards' {shape}")


def compute_grpo_advantages(
    rewards: np.ndarray, valid: np.ndarray | None = None, eps: float = DEFAULT_EPS
) -> np.ndarray:
    """Group-normalised advantages: Â_ij = (r_ij − mean_i) / (std_i + ε), over the valid samples of group i.

    mean_i and std_i use only samples with valid[i, j] (std is the sample standard deviation,
    ddof = 1, as in verl and TRL). Invalid samples, and groups with fewer than 2 valid samples,
    get Â = 0. Shapes: rewards [P, G] -> advantages [P, G] (float64).
    """
    r = np.asarray(rewards, dtype=np.float64)
    _check_2d("rewards", r)
    v = np.ones_like(r, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    _check_2d("valid", v, r.shape)
    if not np.all(np.isfinite(r[v])):
        raise InvalidArgument("rewards", "contains NaN or infinity among valid samples")
    if eps < 0:
        raise InvalidArgument("eps", f"must be >= 0 (got {eps})")
    n = v.sum(axis=1, keepdims=True)
    safe_n = np.maximum(n, 1)
    mean = np.where(v, r, 0.0).sum(axis=1, keepdims=True) / safe_n
    sq = np.where(v, (r - mean) ** 2, 0.0).sum(axis=1, keepdims=True)
    std = np.sqrt(sq / np.maximum(n - 1, 1))
    adv = (r - mean) / (std + eps) if eps > 0 else np.divide(r - mean, std, out=np.zeros_like(r), where=std > 0)
    return np.where(v & (n >= 2), adv, 0.0)


@dataclass(frozen=True)
class GroupFilter:
    """Which groups dynamic filtering keeps, and why the others went."""

    kept: np.ndarray
    """Indices of the kept groups (int64, ascending)."""
    dropped_zero_variance: int
    """Groups whose valid rewards are all equal (all correct / all wrong)."""
    dropped_too_few_valid: int
    """Groups with fewer than 2 valid samples (e.g. every verifier call errored)."""


def compute_dynamic_filter(rewards: np.ndarray, valid: np.ndarray | None = None) -> GroupFilter:
    """Keep group i iff it has ≥ 2 valid samples and max_j r_ij ≠ min_j r_ij over its valid samples.

    A zero-variance group has Â = 0 for every sample, so it adds no gradient but dilutes the
    token normalisation; dropping it is DAPO's dynamic sampling without the resampling.
    """
    r = np.asarray(rewards, dtype=np.float64)
    _check_2d("rewards", r)
    v = np.ones_like(r, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    _check_2d("valid", v, r.shape)
    n = v.sum(axis=1)
    hi = np.where(v, r, -np.inf).max(axis=1)
    lo = np.where(v, r, np.inf).min(axis=1)
    enough = n >= 2
    varied = enough & (hi > lo)
    return GroupFilter(
        kept=np.flatnonzero(varied).astype(np.int64),
        dropped_zero_variance=int((enough & ~varied).sum()),
        dropped_too_few_valid=int((~enough).sum()),
    )


OverlongRule = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""(rewards, truncated, loss_mask) -> (rewards, loss_mask); never changes which samples are valid."""


def overlong_filter(rewards: np.ndarray, truncated: np.ndarray, loss_mask: np.ndarray):
    """Overlong filtering: loss_mask_ij ← loss_mask_ij ∧ ¬truncated_ij; rewards unchanged (they still count in the group)."""
    return rewards, loss_mask & ~truncated


def overlong_zero_reward(rewards: np.ndarray, truncated: np.ndarray, loss_mask: np.ndarray):
    """Overlong penalty: r_ij ← 0 where truncated_ij; the sample stays in the loss."""
    return np.where(truncated, 0.0, rewards), loss_mask


def overlong_none(rewards: np.ndarray, truncated: np.ndarray, loss_mask: np.ndarray):
    """No overlong rule: truncated responses are treated like any other."""
    return rewards, loss_mask


OVERLONG_RULES: dict[str, OverlongRule] = {
    "filter": overlong_filter, "zero_reward": overlong_zero_reward, "none": overlong_none,
}


@dataclass(frozen=True)
class GroupBatch:
    """Advantages and loss mask of one GRPO batch, with the counts the ledger records."""

    advantages: np.ndarray
    """[P, G] float64; 0 wherever loss_mask is False."""
    loss_mask: np.ndarray
    """[P, G] bool: the samples the trainer learns from."""
    rewards: np.ndarray
    """[P, G] float64 after the overlong rule (the values the advantages came from)."""
    metrics: dict[str, float]


def compute_group_batch(
    rewards: np.ndarray,
    errored: np.ndarray,
    truncated: np.ndarray,
    overlong: str = "none",
    dynamic_filtering: bool = True,
    eps: float = DEFAULT_EPS,
) -> GroupBatch:
    """The orchestrator's step 4: error masking, overlong rule, advantages, dynamic filtering.

    valid = ¬errored; (r, mask) = overlong_rule(r, truncated, valid);
    Â = compute_grpo_advantages(r, valid); mask ∧= group kept (when dynamic filtering); Â ← Â·mask.
    """
    r = np.asarray(rewards, dtype=np.float64)
    _check_2d("rewards", r)
    err = np.asarray(errored, dtype=bool)
    trunc = np.asarray(truncated, dtype=bool)
    _check_2d("errored", err, r.shape)
    _check_2d("truncated", trunc, r.shape)
    if overlong not in OVERLONG_RULES:
        raise InvalidArgument("overlong", f"unknown rule {overlong!r}; use one of {', '.join(OVERLONG_RULES)}")
    valid = ~err
    r = np.where(valid, r, 0.0)  # errored rewards carry no meaning; never used below
    r, mask = OVERLONG_RULES[overlong](r, trunc, valid.copy())
    overlong_masked = int((valid & ~mask).sum())
    adv = compute_grpo_advantages(r, valid, eps)
    filt = compute_dynamic_filter(r, valid)
    if dynamic_filtering:
        keep = np.zeros(r.shape[0], dtype=bool)
        keep[filt.kept] = True
        mask = mask & keep[:, None]
    adv = np.where(mask, adv, 0.0)
    metrics = {
        "samples": float(r.size),
        "error_masked": float(err.sum()),
        "truncated": float(trunc.sum()),
        "overlong_masked": float(overlong_masked),
        "groups": float(r.shape[0]),
        "groups_kept": float(len(filt.kept)) if dynamic_filtering else float(r.shape[0]),
        "groups_dropped_zero_variance": float(filt.dropped_zero_variance) if dynamic_filtering else 0.0,
        "groups_dropped_too_few_valid": float(filt.dropped_too_few_valid) if dynamic_filtering else 0.0,
        "trained_samples": float(mask.sum()),
    }
    return GroupBatch(advantages=adv, loss_mask=mask, rewards=r, metrics=metrics)


@dataclass(frozen=True)
class MopdBatch:
    """The samples MOPD's distillation loss learns from, and the optional outcome advantage."""

    loss_mask: np.ndarray
    """[P, G] bool: the samples the trainer learns from."""
    advantages: np.ndarray | None
    """[P, G] float64 GRPO outcome advantages (0 off the mask), or None for pure distillation."""
    metrics: dict[str, float]


def compute_mopd_batch(
    empty: np.ndarray,
    truncated: np.ndarray,
    overlong: str = "none",
    rewards: np.ndarray | None = None,
    errored: np.ndarray | None = None,
    eps: float = DEFAULT_EPS,
) -> MopdBatch:
    """MOPD's batch: mask = ¬empty, then the overlong rule on the mask (`filter` drops truncated
    samples; the teacher's advantage needs no reward, so `zero_reward` and `none` keep them).

    With `rewards` (grpo_alpha > 0): the outcome advantage is compute_group_batch(rewards, errored,
    truncated, overlong, dynamic_filtering=False) — the overlong rule then also shapes the rewards —
    and mask ∧= the group batch's mask (errored samples and the overlong rule's drops). Â ← Â·mask.
    """
    empty_ = np.asarray(empty, dtype=bool)
    trunc = np.asarray(truncated, dtype=bool)
    _check_2d("empty", empty_)
    _check_2d("truncated", trunc, empty_.shape)
    if overlong not in OVERLONG_RULES:
        raise InvalidArgument("overlong", f"unknown rule {overlong!r}; use one of {', '.join(OVERLONG_RULES)}")
    _, mask = OVERLONG_RULES[overlong](np.zeros(empty_.shape), trunc, ~empty_)
    metrics: dict[str, float] = {"samples": float(mask.size), "empty": float(empty_.sum()), "truncated": float(trunc.sum())}
    adv = None
    if rewards is not None:
        err = np.zeros(empty_.shape, dtype=bool) if errored is None else np.asarray(errored, dtype=bool)
        group = compute_group_batch(rewards, err, trunc, overlong=overlong, dynamic_filtering=False, eps=eps)
        metrics.update(group.metrics)
        mask = mask & group.loss_mask
        adv = np.where(mask, group.advantages, 0.0)
    metrics["trained_samples"] = float(mask.sum())
    return MopdBatch(loss_mask=mask, advantages=adv, metrics=metrics)
