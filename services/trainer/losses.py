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
    """GRPO: coefficient beta of the KL-to-reference term, >= 0 (0 = no KL)."""
    eps_low: float = 0.5
    """MOPD: importance ratios below this are truncated (weight 0)."""
    eps_high: float = 2.0
    """MOPD: importance ratios above this are truncated (weight 0)."""
    grpo_alpha: float = 0.0
    """MOPD: weight of an added sequence-level GRPO advantage (0 = pure distillation)."""
    temperature: float = 1.0
    """Sampling temperature the batch was drawn at; log pi_train is taken on logits / T (0 = greedy:
    the untempered softmax, as the sampler reports it). Read by the engine, not by the losses."""
    top_p: float = 1.0
    """Sampling nucleus (1 = none); read by the engine."""
    top_k: int = 0
    """Sampling top-k (0 = none); read by the engine."""
    kl_estimator: str = "k2"
    """GRPO: the KL_ESTIMATORS entry the KL term uses (k1, k2, k3)."""
    kl_clamp: float | None = None
    """GRPO: clamp of the per-token log-ratio log pi - log pi_ref to [-c, c] (None = no clamp)."""
    tis_cap: float | None = None
    """GRPO: truncated importance sampling cap (None = off), see `compute_tis_weights`."""


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


def clamp_log_ratio(logprobs: Tensor, reference_logprobs: Tensor, clamp: float | None) -> Tensor:
    """d_t = log pi_train - log pi_ref, clamped to [-clamp, clamp] when `clamp` is given (a clamped
    token's KL term then has zero gradient, as verl's clamp gives)."""
    d = logprobs - reference_logprobs
    return d if clamp is None else d.clamp(-clamp, clamp)


def compute_k1_kl(logprobs: Tensor, d: Tensor) -> tuple[Tensor, Tensor]:
    """k1, in the reward: a per-token penalty -beta sg[d_t] added to the advantage, d_t = log pi - log pi_ref.
    Loss term (before beta) sg[d_t] log pi_train(y_t); value k1_t = d_t (unbiased for KL(pi || pi_ref),
    can be negative). Gradient sg[d_t] grad log pi(y_t): E_{y~pi}[d_y grad log pi(y)] = grad KL(pi || pi_ref)
    (the reverse KL's gradient)."""
    return d.detach() * logprobs, d.detach()


def compute_k2_kl(logprobs: Tensor, d: Tensor) -> tuple[Tensor, Tensor]:
    """k2 as a loss: k2_t = 1/2 d_t^2, d_t = log pi - log pi_ref. Gradient d_t grad log pi(y_t), so
    E_{y~pi}[grad k2] = grad KL(pi || pi_ref) (reverse KL), the same expected gradient as k1."""
    k2 = 0.5 * d * d
    return k2, k2.detach()


def compute_k3_kl(logprobs: Tensor, d: Tensor) -> tuple[Tensor, Tensor]:
    """k3 as a loss (Schulman 2020): k3_t = exp(-d_t) + d_t - 1 = pi_ref/pi - log(pi_ref/pi) - 1 >= 0,
    an unbiased estimate of the *value* KL(pi || pi_ref). Its gradient is (1 - pi_ref/pi) grad log pi,
    whose expectation under pi is -sum_y pi_ref(y) grad log pi(y) = grad KL(pi_ref || pi): the
    forward KL's gradient, not the reverse KL's."""
    k3 = torch.exp(-d) + d - 1.0
    return k3, k3.detach()


KlEstimator = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]
KL_ESTIMATORS: dict[str, KlEstimator] = {"k1": compute_k1_kl, "k2": compute_k2_kl, "k3": compute_k3_kl}
"""name -> fn(logprobs, d) -> (per-token loss term with gradient, per-token KL estimate, detached);
d = clamp_log_ratio(logprobs, reference_logprobs, kl_clamp) carries log pi_train's gradient."""


def compute_tis_weights(logprobs: Tensor, inference_logprobs: Tensor, cap: float) -> Tensor:
    """Truncated importance sampling (GRPO): w_t = sg[min(pi_train(y_t) / pi_inf(y_t), cap)]
    = min(exp(log pi_train - log pi_inf), cap), detached; corrects for sampling from pi_inf."""
    return torch.exp(logprobs.detach() - inference_logprobs).clamp(max=cap)


@register(
    "grpo", unit="tokens", model_kind="causal_lm", requires=("loss_mask", "advantages"),
    requires_when={"kl_coef": "reference_logprobs", "tis_cap": "inference_logprobs"},
)
def compute_grpo_loss(inputs: LossInputs, params: LossParams) -> LossOutputs:
    """GRPO, token-level (Cascade): L = -(1/N) sum_i sum_t w_it A_i log pi_train(y_it | s_it)
    + beta (1/N) sum_i sum_t kl_it, N = sum_i |y_i|, |y_i| = sum_t m_it.
    w_it = 1, or with tis_cap the truncated importance weight of `compute_tis_weights`; kl_it is the
    loss term of KL_ESTIMATORS[kl_estimator] on d = log pi_train - log pi_ref (clamped by kl_clamp),
    only when beta = kl_coef > 0 (k1 is then exactly the per-token reward penalty -beta sg[d_t] added to
    A_i). `kl` (mean estimate over masked tokens) is reported whenever a reference is given."""
    m, lp = inputs.mask, inputs.logprobs
    n = _norm(inputs, "tokens")
    pg = inputs.advantages[:, None] * lp
    if params.tis_cap is not None:
        safe_inf = torch.where(m > 0, inputs.inference_logprobs, lp.detach())  # masked: w = 1
        pg = compute_tis_weights(lp, safe_inf, params.tis_cap) * pg
    loss = -(m * pg).sum() / n
    metrics: dict[str, float] = {}
    if inputs.reference_logprobs is not None:
        ref = torch.where(m > 0, inputs.reference_logprobs, lp.detach())  # masked: d = 0
        term, value = KL_ESTIMATORS[params.kl_estimator](lp, clamp_log_ratio(lp, ref, params.kl_clamp))
        if params.kl_coef > 0:
            loss = loss + params.kl_coef * (m * term).sum() / n
        metrics["kl"] = _masked_mean(value, m)
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
