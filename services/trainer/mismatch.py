"""The train/inference mismatch of one step, as pure functions (DESIGN.md section 5).

With d_t = log pi_train(y_t | s_t) - log pi_inf(y_t | s_t) on the valid loss tokens V (mask 1):

    mismatch_mean = (1/|V|) sum_{t in V} |d_t|
    mismatch_p99  = the 99th percentile of |d_t| over V (linear interpolation between order statistics)
    mismatch_max  = max_{t in V} |d_t|
    window_dropped_fraction = (1/|V|) #{t in V : exp(d_t) < eps_low or exp(d_t) > eps_high}
                              (MOPD's truncation window, (0.5, 2) unless the step sets another)
    kl_inf_train  = (1/S) sum_{i} sum_{t in V_i} -d_t   over the S sequences with |V_i| > 0:
                    the sampled-token estimate of KL(pi_inf || pi_train) per sequence, y ~ pi_inf.

A step's tokens arrive in pieces (micro-batches, data-parallel ranks): `collect` takes one piece to
flat arrays, `combine` joins pieces and `summarize` turns them into the metrics, so the figures are
those of the whole batch whatever the split. Nothing here knows of models or ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from torch import Tensor

METRICS = ("mismatch_mean", "mismatch_p99", "mismatch_max", "window_dropped_fraction", "kl_inf_train")


@dataclass(frozen=True)
class MismatchPiece:
    token_d: np.ndarray
    """float64 d_t of every valid token of the piece, flat."""
    sequence_sums: np.ndarray
    """float64 sum_t -d_t of every sequence of the piece with at least one valid token."""


def collect(logprobs: Tensor, inference_logprobs: Tensor, mask: Tensor) -> MismatchPiece:
    """(B, T) log pi_train, log pi_inf and mask of whole rows -> the piece's d_t and per-sequence sums."""
    keep = mask > 0
    d = (logprobs.detach().double() - inference_logprobs.double()).masked_fill(~keep, 0.0)
    rows = keep.any(dim=1)
    return MismatchPiece(d[keep].cpu().numpy(), (-d.sum(dim=1))[rows].cpu().numpy())


def combine(pieces: list[MismatchPiece]) -> MismatchPiece:
    """One piece of all `pieces` (in any order: every metric is order-free)."""
    return MismatchPiece(
        np.concatenate([p.token_d for p in pieces]) if pieces else np.zeros(0),
        np.concatenate([p.sequence_sums for p in pieces]) if pieces else np.zeros(0),
    )


def summarize(piece: MismatchPiece, eps_low: float = 0.5, eps_high: float = 2.0) -> dict[str, float]:
    """The module docstring's five metrics; {} when the piece has no valid token."""
    d = piece.token_d
    if d.size == 0:
        return {}
    a = np.abs(d)
    ratio = np.exp(d)
    return {
        "mismatch_mean": float(a.mean()),
        "mismatch_p99": float(np.percentile(a, 99)),
        "mismatch_max": float(a.max()),
        "window_dropped_fraction": float(((ratio < eps_low) | (ratio > eps_high)).mean()),
        "kl_inf_train": float(piece.sequence_sums.mean()) if piece.sequence_sums.size else 0.0,
    }

