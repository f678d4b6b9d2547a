"""The cascade losses against values worked out by hand on small tensors (DESIGN.md section 3)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from services.trainer.losses import (
    KL_ESTIMATORS,
    LOSSES,
    LossInputs,
    LossParams,
    clamp_log_ratio,
    compute_bt_loss,
    compute_grpo_loss,
    compute_k3_kl,
    compute_mopd_loss,
    compute_mopd_weights,
    compute_sft_loss,
    compute_tis_weights,
    count_units,
)

D = torch.float64


def t(rows):
    return torch.tensor(rows, dtype=D)


def leaf(rows):
    return t(rows).requires_grad_(True)


def test_registry_names_and_kinds():
    assert set(LOSSES) == {"sft", "grpo", "mopd", "bt"}
    assert {s.model_kind for n, s in LOSSES.items() if n != "bt"} == {"causal_lm"}
    assert LOSSES["bt"].model_kind == "sequence_classifier"
    assert LOSSES["grpo"].requires_when == {"kl_coef": "reference_logprobs", "tis_cap": "inference_logprobs"}
    assert LOSSES["mopd"].unit == "sequences" and LOSSES["bt"].unit == "pairs"


def test_sft_is_masked_token_mean_and_gradient():
    lp = leaf([[0.0, -1.0, -2.0, -4.0], [0.0, -0.5, -7.0, -3.0]])
    mask = t([[0, 1, 1, 0], [0, 1, 0, 0]])
    out = compute_sft_loss(LossInputs(mask=mask, logprobs=lp), LossParams())
    assert out.loss.item() == pytest.approx((1.0 + 2.0 + 0.5) / 3)
    out.loss.backward()
    assert torch.allclose(lp.grad, -mask / 3)
    assert out.weight == 3


def test_grpo_token_level_normalisation():
    lp = leaf([[0.0, -1.0, -2.0], [0.0, -0.5, -9.0]])
    mask = t([[0, 1, 1], [0, 1, 0]])
    adv = t([2.0, -1.0])
    out = compute_grpo_loss(LossInputs(mask=mask, logprobs=lp, advantages=adv), LossParams())
    # -(1/3) * (2 * (-1 - 2) + (-1) * (-0.5)) = 5.5 / 3
    assert out.loss.item() == pytest.approx(5.5 / 3)
    out.loss.backward()
    assert torch.allclose(lp.grad, -mask * adv[:, None] / 3)
    assert "kl" not in out.metrics


def test_k3_estimator_values():
    lp, ref = t([-1.0, -1.0]), t([-1.0, -1.0 + math.log(2.0)])
    term, value = compute_k3_kl(lp, clamp_log_ratio(lp, ref, None))
    assert value.tolist() == pytest.approx([0.0, 2.0 - math.log(2.0) - 1.0]) and torch.equal(term, value)


def test_grpo_with_k3_adds_beta_times_k3_and_its_gradient():
    lp = leaf([[0.0, -1.0, -2.0]])
    mask = t([[0, 1, 1]])
    ref = t([[123.0, -1.0 + math.log(2.0), -2.0]])  # position 0 is masked: its garbage is ignored
    beta = 0.5
    inputs = LossInputs(mask=mask, logprobs=lp, advantages=t([0.0]), reference_logprobs=ref)
    out = compute_grpo_loss(inputs, LossParams(kl_coef=beta, kl_estimator="k3"))
    k3 = 2.0 - math.log(2.0) - 1.0
    assert out.loss.item() == pytest.approx(beta * k3 / 2)
    assert out.metrics["kl"] == pytest.approx(k3 / 2)
    out.loss.backward()
    # d k3 / d lp = 1 - exp(ref - lp)
    assert lp.grad.tolist()[0] == pytest.approx([0.0, beta * (1 - 2.0) / 2, 0.0])
    no_beta = compute_grpo_loss(inputs, LossParams(kl_coef=0.0, kl_estimator="k3"))
    assert no_beta.loss.item() == pytest.approx(0.0) and no_beta.metrics["kl"] == pytest.approx(k3 / 2)


def test_default_kl_estimator_is_k2():
    assert LossParams().kl_estimator == "k2" and set(KL_ESTIMATORS) == {"k1", "k2", "k3"}


def _expected_kl_gradient(name: str, theta: Tensor, ref_logp: Tensor, clamp=None) -> Tensor:
    """E_{y ~ pi}[grad_theta term(y)] by exact enumeration of the vocabulary, pi = softmax(theta)."""
    grads = []
    for y in range(theta.shape[0]):
        th = theta.detach().clone().requires_grad_(True)
        lp = torch.log_softmax(th, dim=0)[y]
        term, _ = KL_ESTIMATORS[name](lp, clamp_log_ratio(lp, ref_logp[y], clamp))
        (g,) = torch.autograd.grad(term, th)
        grads.append(g)
    pi = torch.softmax(theta.detach(), dim=0)
    return sum(p * g for p, g in zip(pi, grads))


def _true_kl_gradient(theta: Tensor, ref_logp: Tensor, reverse: bool) -> Tensor:
    th = theta.detach().clone().requires_grad_(True)
    logp = torch.log_softmax(th, dim=0)
    p, q = logp.exp(), ref_logp.exp()
    kl = (p * (logp - ref_logp)).sum() if reverse else (q * (ref_logp - logp)).sum()
    (g,) = torch.autograd.grad(kl, th)
    return g


@pytest.mark.parametrize("name, reverse", [("k1", True), ("k2", True), ("k3", False)])
def test_kl_estimator_expected_gradient_by_exact_enumeration(name, reverse):
    """k1 and k2: E[grad] = grad KL(pi || pi_ref); k3: E[grad] = grad KL(pi_ref || pi), not the reverse KL's."""
    gen = torch.Generator().manual_seed(3)
    theta = torch.randn(7, generator=gen, dtype=D)
    ref_logp = torch.log_softmax(torch.randn(7, generator=gen, dtype=D), dim=0)
    got = _expected_kl_gradient(name, theta, ref_logp)
    assert torch.allclose(got, _true_kl_gradient(theta, ref_logp, reverse), atol=1e-12)
    other = _true_kl_gradient(theta, ref_logp, not reverse)
    assert (got - other).abs().max() > 1e-3  # the two KLs' gradients differ here: the test can tell them apart


def test_kl_clamp_bounds_the_log_ratio_and_stops_its_gradient():
    lp = leaf([[0.0, -1.0, -9.0]])
    ref = t([[0.0, -1.2, -1.0]])  # d = 0.2 (inside), -8 (clamped to -1)
    mask = t([[0, 1, 1]])
    inputs = LossInputs(mask=mask, logprobs=lp, advantages=t([0.0]), reference_logprobs=ref)
    out = compute_grpo_loss(inputs, LossParams(kl_coef=1.0, kl_estimator="k2", kl_clamp=1.0))
    assert out.metrics["kl"] == pytest.approx((0.5 * 0.2**2 + 0.5 * 1.0) / 2)
    out.loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([0.0, 0.2 / 2, 0.0])
    lp2 = leaf([[0.0, -1.0, -9.0]])
    k1 = compute_grpo_loss(LossInputs(mask=mask, logprobs=lp2, advantages=t([0.0]), reference_logprobs=ref),
                           LossParams(kl_coef=1.0, kl_estimator="k1", kl_clamp=1.0))
    k1.loss.backward()  # k1: the clamped penalty is detached, the gradient still flows through log pi
    assert lp2.grad.tolist()[0] == pytest.approx([0.0, 0.2 / 2, -1.0 / 2])
    assert k1.metrics["kl"] == pytest.approx((0.2 - 1.0) / 2)


def test_k1_is_the_per_token_reward_penalty():
    """k1 with beta = GRPO with the advantage A_i - beta sg[log pi - log pi_ref]_t, token by token."""
    lp = leaf([[0.0, -1.0, -2.0, -0.3]])
    ref = t([[0.0, -0.5, -2.5, -0.3]])
    mask, adv, beta = t([[0, 1, 1, 1]]), t([0.7]), 0.25
    out = compute_grpo_loss(LossInputs(mask=mask, logprobs=lp, advantages=adv, reference_logprobs=ref),
                            LossParams(kl_coef=beta, kl_estimator="k1"))
    out.loss.backward()
    per_token_adv = adv[:, None] - beta * (lp.detach() - ref)
    assert torch.allclose(lp.grad, -mask * per_token_adv / 3)


@pytest.mark.parametrize("train, inf, cap, weight", [
    (-1.0, -1.0, 2.0, 1.0),  # equal: 1
    (-1.0, -1.5, 2.0, math.exp(0.5)),  # under the cap
    (-1.0, -3.0, 2.0, 2.0),  # e^2 capped
    (-3.0, -1.0, 2.0, math.exp(-2.0)),  # below 1: never raised
])
def test_tis_weight_table(train, inf, cap, weight):
    assert compute_tis_weights(t([train]), t([inf]), cap).item() == pytest.approx(weight)


def test_grpo_tis_multiplies_each_token_loss_detached():
    lp = leaf([[0.0, -1.0, -2.0]])
    inf = t([[0.0, -1.5, -5.0]])  # w = e^0.5, cap 2 (e^3 capped)
    mask, adv = t([[0, 1, 1]]), t([1.0])
    out = compute_grpo_loss(LossInputs(mask=mask, logprobs=lp, advantages=adv, inference_logprobs=inf), LossParams(tis_cap=2.0))
    w = [math.exp(0.5), 2.0]
    assert out.loss.item() == pytest.approx(-(w[0] * -1.0 + w[1] * -2.0) / 2)
    out.loss.backward()
    assert lp.grad.tolist()[0] == pytest.approx([0.0, -w[0] / 2, -w[1] / 2])
    plain = compute_grpo_loss(LossInputs(mask=mask, logprobs=lp, advantages=adv, inference_logprobs=inf), LossParams())
    assert plain.loss.item() == pytest.approx(3.0 / 2)  # off by default


def test_mopd_hand_computed_loss_gradient_and_metrics():
    lp = leaf([[0.0, -1.0, -2.0, -0.5]])
    inf = t([[0.0, -1.5, -1.0, -0.5]])  # r = e^0.5 = 1.6487 (kept), e^-1 = 0.368 (< 0.5, cut), 1 (kept)
    teacher = t([[0.0, -0.5, -3.0, -1.0]])  # a = 0.5, -1.0, -0.5
    mask = t([[0, 1, 1, 1]])
    out = compute_mopd_loss(LossInputs(mask=mask, logprobs=lp, inference_logprobs=inf, teacher_logprobs=teacher), LossParams())
    w = [math.exp(0.5), 0.0, 1.0]
    a = [0.5, -1.0, -0.5]
    expected = -(w[0] * a[0] * -1.0 + w[2] * a[2] * -0.5) / 3
    assert out.loss.item() == pytest.approx(expected)
    out.loss.backward()
    # stop-gradients on r_t and a_t: dL/dlog pi_train = -w_t a_t / |V|
    assert lp.grad.tolist()[0] == pytest.approx([0.0] + [-wi * ai / 3 for wi, ai in zip(w, a)])
    assert out.metrics["advantage_mean"] == pytest.approx(sum(a) / 3)
    assert out.metrics["truncated_fraction"] == pytest.approx(1 / 3)


def test_mopd_mean_over_sequences_skips_empty_rows_and_ignores_masked_garbage():
    lp = leaf([[0.0, -1.0, -1.0], [0.0, -2.0, -5.0], [0.0, -3.0, -3.0]])
    mask = t([[0, 1, 1], [0, 1, 0], [0, 0, 0]])
    inf = torch.where(mask > 0, lp.detach(), t(1e30))  # r = 1 on trained tokens; huge garbage elsewhere
    teacher = lp.detach() + 0.25
    out = compute_mopd_loss(LossInputs(mask=mask, logprobs=lp, inference_logprobs=inf, teacher_logprobs=teacher), LossParams())
    # per sequence: -(1/|V|) sum 0.25 * lp ; S = 2 (the empty row does not count)
    expected = -((0.25 * -2.0) / 2 + (0.25 * -2.0) / 1) / 2
    assert torch.isfinite(out.loss) and out.loss.item() == pytest.approx(expected)
    out.loss.backward()
    assert lp.grad.flatten().tolist() == pytest.approx([0, -0.25 / 4, -0.25 / 4, 0, -0.25 / 2, 0, 0, 0, 0])
    assert count_units("sequences", mask) == 2


@pytest.mark.parametrize(
    ("log_ratio", "low", "high", "kept"),
    [
        (0.0, 1.0, 1.0, True),  # both bounds inclusive
        (1e-6, 1.0, 1.0, False),
        (-1e-6, 1.0, 1.0, False),
        (math.log(2.0) - 1e-4, 0.5, 2.0, True),
        (math.log(2.0) + 1e-4, 0.5, 2.0, False),
        (math.log(0.5) + 1e-4, 0.5, 2.0, True),
        (math.log(0.5) - 1e-4, 0.5, 2.0, False),
    ],
)
def test_mopd_truncation_edges(log_ratio, low, high, kept):
    lp = t([-1.0])
    w, k = compute_mopd_weights(lp, lp - log_ratio, low, high)
    assert bool(k[0]) is kept
    assert w[0].item() == pytest.approx(math.exp(log_ratio) if kept else 0.0)


def test_mopd_grpo_alpha_adds_sequence_advantage():
    lp = leaf([[0.0, -1.0]])
    mask, same = t([[0, 1]]), lp.detach()
    inputs = LossInputs(mask=mask, logprobs=lp, inference_logprobs=same, teacher_logprobs=same, advantages=t([3.0]))
    out = compute_mopd_loss(inputs, LossParams(grpo_alpha=0.5))
    assert out.loss.item() == pytest.approx(-(0.5 * 3.0 * -1.0))  # a = 0, w = 1


def test_bradley_terry():
    r = leaf([1.0, 0.0, 2.0])
    pairs = torch.tensor([[0, 1], [1, 2]])
    out = compute_bt_loss(LossInputs(mask=t([[1.0]]), rewards=r, pairs=pairs), LossParams())
    sp = lambda x: math.log1p(math.exp(x))
    assert out.loss.item() == pytest.approx((sp(-1.0) + sp(2.0)) / 2)
    assert out.metrics == pytest.approx({"accuracy": 0.5, "margin": -0.5})
    out.loss.backward()
    s = lambda x: 1 / (1 + math.exp(-x))  # dL/d r_c = -sigmoid(-(r_c - r_r)) / P
    assert r.grad.tolist() == pytest.approx([-s(-1.0) / 2, (s(-1.0) - s(2.0)) / 2, s(2.0) / 2])


@pytest.mark.parametrize("name", ["sft", "grpo", "mopd"])
def test_shards_with_the_batch_denominator_sum_to_the_batch_loss(name):
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(4, 5, generator=g, dtype=D)
    mask = (torch.rand(4, 5, generator=g) > 0.3).to(D)
    mask[:, 0] = 0
    mask[0, 1] = 1
    extra = {"advantages": torch.randn(4, generator=g, dtype=D), "inference_logprobs": lp - 0.1, "teacher_logprobs": lp - 0.3}
    spec = LOSSES[name]
    full = spec.fn(LossInputs(mask=mask, logprobs=lp, **extra), LossParams()).loss.item()
    n = count_units(spec.unit, mask)
    parts = 0.0
    for rows in ([0, 2], [1, 3]):
        sub = {k: v[rows] for k, v in extra.items()}
        parts += spec.fn(LossInputs(mask=mask[rows], logprobs=lp[rows], denominator=n, **sub), LossParams()).loss.item()
    assert parts == pytest.approx(full)
