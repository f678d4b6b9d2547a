"""The cascade losses as pure functions (DESIGN.md section 3) and the registry that names them.

Every loss has one signature, `fn(inputs: LossInputs, params: LossParams) -> LossOutputs`, and is
registered under the name a `TrainStep` request uses (`sft`, `grpo`, `mopd`, `bt`). Token arrays
are (B, T), aligned with the tokens: `logprobs[i, t] = log pi_train(y_i,t | s_t)`, computed from
the logits at position t - 1; column 0 has no prediction and the caller masks it out. A position
with mask 0 contributes nothing (its value, even garbage, is multiplied by an exact 0 and never
enters an exp).

Data parallelism: when `inputs` is one rank's shard, `inputs.denominator` carries the normaliser
of the whole batch (tokens, sequences or pairs, per the spec's `unit`), so the shard losses sum
to the full-batch loss. This module knows nothing of models, engines, the wire format or ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

UNITS = ("tokens", "sequences", "pairs")


@dataclass(frozen=True)
class LossParams:
    """Per-loss parameters; the defaults are DESIGN.md section 3's."""

    kl_coef: float = 0.0
    """GRPO: coefficient beta of the k3 KL-to-reference term, >= 0 (0 = no KL)."""
    eps_low: float = 0.5
    """MOPD: importance ratios below this are truncated (weight 0)."""
    eps_high: float = 2.0
    """MOPD: importance ratios above this are truncated (weight 0)."""
    grpo_alpha: float = 0.0
    """MOPD: weight of an added sequence-level GRPO advantage (0 = pure distillation)."""


@dataclass(frozen=True)
class LossInputs:
    """Tensors a loss reads; a loss requires only the fields its spec lists."""

    mask: Tensor
    """(B, T) float, 1 on trained tokens (V(y)), 0 elsewhere (including column 0 and padding)."""
    logprobs: Tensor | None = None
    """(B, T) log pi_train of each token, with gradient."""
    advantages: Tensor | None = None
    """(B,) one advantage per sequence."""
    inference_logprobs: Tensor | None = None
    """(B, T) log pi_inf of each sampled token."""
    teacher_logprobs: Tensor | None = None
    """(B, T) log pi_teacher of each sampled token."""
    reference_logprobs: Tensor | None = None
    """(B, T) log pi_ref of each token."""
    rewards: Tensor | None = None
    """(B,) scalar score of each sequence (sequence-classifier head), with gradient."""
    pairs: Tensor | None = None
    """(P, 2) long: row indices (chosen, rejected)."""
    denominator: float | None = None
    """Whole-batch normaliser when this is a shard; None = this batch's own count."""


@dataclass
class LossOutputs:
    loss: Tensor
    """Scalar loss with gradient."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Means over `weight` units (masked tokens, or pairs for `bt`)."""
    weight: float = 0.0
    """How many units the metric means are taken over (to combine shards)."""


LossFn = Callable[[LossInputs, LossParams], LossOutputs]


@dataclass(frozen=True)
class LossSpec:
    """One registered loss: its function and what it needs."""

    name: str
    fn: LossFn
    unit: str
    """What the normaliser counts: tokens, sequences or pairs."""
    model_kind: str
    """`causal_lm` or `sequence_classifier`."""
    requires: tuple[str, ...]
    """Batch fields (TrainBatch names) that must be present."""
    requires_when: dict[str, str] = field(default_factory=dict)
    """LossParams field -> batch field required when that parameter is non-zero."""


LOSSES: dict[str, LossSpec] = {}


def register(name: str, *, unit: str, model_kind: str, requires: tuple[str, ...], requires_when=None):
    """Decorator: add `fn` to LOSSES under `name`."""
    assert unit in UNITS, unit

    def deco(fn: LossFn) -> LossFn:
        LOSSES[name] = LossSpec(name, fn, unit, model_kind, requires, dict(requires_when or {}))
        return fn

    return deco


def count_units(unit: str, mask: Tensor, pairs: Tensor | None = None) -> float:
    """Normaliser of a batch: sum of the mask (tokens), rows with >= 1 masked token (sequences), or pairs."""
    if unit == "tokens":
        return float(mask.sum())
    if unit == "sequences":
        return float((mask.sum(dim=1) > 0).sum())
    return float(0 if pairs is None else pairs.shape[0])


def _norm(inputs: LossInputs, unit: str) -> float:
    n = inputs.denominator if inputs.denominator is not None else count_units(unit, inputs.mask, inputs.pairs)
    return max(float(n), 1.0)


def _masked_mean(values: Tensor, mask: Tensor) -> float:
    return float((values * mask).sum() / mask.sum().clamp(min=1.0))


@register("sft", unit="tokens", model_kind="causal_lm", requires=("loss_mask",))
def compute_sft_loss(inputs: LossInputs, params: LossParams) -> LossOutputs:
    """Token cross-entropy on trained tokens: L = -(1/N) sum_i sum_t m_it log pi_train(y_it | s_it),
    N = sum_i sum_t m_it."""
    m, lp = inputs.mask, inputs.logprobs
    loss = -(m * lp).sum() / _norm(inputs, "tokens")
    return LossOutputs(loss, {}, float(m.sum()))


def compute_k3_kl(logprobs: Tensor, reference_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(pi_train || pi_ref) on the sampled token (Schulman 2020):
    k3_t = exp(d_t) - d_t - 1 with d_t = log pi_ref - log pi_train; unbiased, always >= 0."""
    d = reference_logprobs - logprobs
    return torch.exp(d) - d - 1.0


@register(
    "grpo", unit="tokens", model_kind="causal_lm", requires=("loss_mask", "advantages"),
    requires_when={"kl_coef": "reference_logprobs"},
)
def compute_grpo_loss(inputs: LossInputs, params: LossParams) -> LossOutputs:
    """GRPO, token-level (Cascade): L = -(1/sum_i |y_i|) sum_i sum_t A_i log pi_train(y_it | s_it)
    + beta (1/sum_i |y_i|) sum_i sum_t k3_it, the KL term only when beta = kl_coef > 0;
    |y_i| = sum_t m_it. `kl` (mean k3 over masked tokens) is reported whenever a reference is given."""
    m, lp = inputs.mask, inputs.logprobs
    n = _norm(inputs, "tokens")
    loss = -(m * inputs.advantages[:, None] * lp).sum() / n
    metrics: dict[str, float] = {}
    if inputs.reference_logprobs is not None:
        ref = torch.where(m > 0, inputs.reference_logprobs, lp.detach())  # masked: d = 0, k3 = 0
        k3 = compute_k3_kl(lp, ref)
        if params.kl_coef > 0:
            loss = loss + params.kl_coef * (m * k3).sum() / n
        metrics["kl"] = _masked_mean(k3.detach(), m)
    return LossOutputs(loss, metrics, float(m.sum()))


def compute_mopd_weights(logprobs: Tensor, inference_logprobs: Tensor, eps_low: float, eps_high: float):
    """Truncated importance weights: r_t = exp(log pi_train - log pi_inf),
    w_t = sg[r_t] * 1[eps_low <= r_t <= eps_high]. Returns (w, kept) with `kept` the indicator."""
    r = torch.exp(logprobs.detach() - inference_logprobs)
    kept = (r >= eps_low) & (r <= eps_high)
    return r * kept, kept


@register(
    "mopd", unit="sequences", model_kind="causal_lm", requires=("loss_mask", "inference_logprobs", "teacher_logprobs"),
    requires_when={"grpo_alpha": "advantages"},
)
def compute_mopd_loss(inputs: LossInputs, params: LossParams) -> LossOutputs:
    """MOPD (Nemotron-Cascade 2, section 4.4), on the sampled token only:
    a_t = log pi_teacher - log pi_train, r_t = pi_train / pi_inf, w_t = sg[r_t] 1[eps_low <= r_t <= eps_high],
    L = -(1/S) sum_y (1/|V(y)|) sum_{t in V(y)} w_t sg[a_t] log pi_train(y_t | s_t),
    S = sequences with |V(y)| > 0. With grpo_alpha, sg[a_t] becomes sg[a_t] + alpha A_i.
    Hence dL/d log pi_train(y_t) = -w_t a_t / (S |V(y)|)."""
    m, lp = inputs.mask, inputs.logprobs
    safe_inf = torch.where(m > 0, inputs.inference_logprobs, lp.detach())  # masked: r = 1, never overflows
    w, kept = compute_mopd_weights(lp, safe_inf, params.eps_low, params.eps_high)
    a = (inputs.teacher_logprobs - lp).detach() * m
    adv = a + params.grpo_alpha * inputs.advantages[:, None] if params.grpo_alpha else a
    per_seq = (m * w * adv * lp).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)
    loss = -per_seq.sum() / _norm(inputs, "sequences")
    metrics = {"advantage_mean": _masked_mean(a, m), "truncated_fraction": _masked_mean((~kept).float(), m)}
    return LossOutputs(loss, metrics, float(m.sum()))


@register("bt", unit="pairs", model_kind="sequence_classifier", requires=("preference_pairs",))
def compute_bt_loss(inputs: LossInputs, params: LossParams) -> LossOutputs:
    """Bradley-Terry: L = (1/P) sum_p -log sigmoid(r_chosen_p - r_rejected_p) = (1/P) sum_p softplus(-(r_c - r_r)).
    Metrics: `accuracy` (fraction of pairs with r_c > r_r) and `margin` (mean r_c - r_r)."""
    r, pairs = inputs.rewards, inputs.pairs
    diff = r[pairs[:, 0]] - r[pairs[:, 1]]
    loss = torch.nn.functional.softplus(-diff).sum() / _norm(inputs, "pairs")
    p = max(int(pairs.shape[0]), 1)
    metrics = {"accuracy": float((diff > 0).float().sum()) / p, "margin": float(diff.detach().sum()) / p}
    return LossOutputs(loss, metrics, float(pairs.shape[0]))
