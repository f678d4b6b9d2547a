"""Sampling math: filters, the pi_inf log-prob of the sampled token, greedy decoding, seeding."""

from __future__ import annotations

import math

import pytest
import torch

from services.policy.sampling import compute_filtered_logits, compute_sample

LOGITS = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]]))


def test_temperature_only_divides_the_logits():
    z = compute_filtered_logits(torch.tensor([[2.0, 1.0, -4.0]]), 2.0, 0, 1.0)
    assert z.tolist() == [[1.0, 0.5, -2.0]]


def test_top_k_keeps_the_k_largest():
    z = compute_filtered_logits(LOGITS, 1.0, 2, 1.0)
    assert torch.isinf(z[0, 2:]).all() and torch.isfinite(z[0, :2]).all()
    probs = torch.softmax(z, -1)[0]
    assert probs[:2].tolist() == pytest.approx([2 / 3, 1 / 3])


@pytest.mark.parametrize(
    "top_p, kept",
    [(0.5, 1), (0.51, 2), (0.75, 2), (0.76, 3), (0.9, 3), (0.91, 4), (1.0, 4)],
)
def test_top_p_keeps_the_smallest_set_reaching_the_mass(top_p, kept):
    # probabilities 0.5, 0.25, 0.15, 0.1: mass before each token is 0, 0.5, 0.75, 0.9
    z = compute_filtered_logits(LOGITS, 1.0, 0, top_p)
    assert int(torch.isfinite(z).sum()) == kept


def test_top_p_filters_in_any_vocabulary_order():
    shuffled = LOGITS[:, [2, 0, 3, 1]]  # 0.15, 0.5, 0.1, 0.25
    z = compute_filtered_logits(shuffled, 1.0, 0, 0.7)
    assert torch.isfinite(z[0]).tolist() == [False, True, False, True]


def test_sampled_logprob_is_under_the_filtered_distribution():
    gen = torch.Generator().manual_seed(0)
    tokens, lp = compute_sample(LOGITS.repeat(200, 1), 1.0, 2, 1.0, gen)
    assert set(tokens.tolist()) == {0, 1}
    expected = {0: math.log(2 / 3), 1: math.log(1 / 3)}
    for t, v in zip(tokens.tolist(), lp.tolist()):
        assert v == pytest.approx(expected[t], abs=1e-6)


def test_temperature_changes_the_returned_logprob():
    gen = torch.Generator().manual_seed(0)
    tokens, lp = compute_sample(LOGITS, 0.5, 0, 1.0, gen)
    tempered = torch.log_softmax(LOGITS / 0.5, -1)[0, tokens[0]]
    assert lp[0].item() == pytest.approx(tempered.item(), abs=1e-6)


def test_greedy_returns_argmax_with_untempered_logprob():
    tokens, lp = compute_sample(LOGITS[:, [3, 1, 0, 2]], 0.0, 1, 0.1)
    assert tokens.tolist() == [2]
    assert lp.item() == pytest.approx(math.log(0.5), abs=1e-6)


def test_same_seed_same_samples_and_frequencies_follow_the_distribution():
    logits = LOGITS.repeat(4000, 1)
    a, _ = compute_sample(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(7))
    b, _ = compute_sample(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(7))
    c, _ = compute_sample(logits, 1.0, 0, 1.0, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)
    freq = torch.bincount(a, minlength=4).float() / len(a)
    assert freq.tolist() == pytest.approx([0.5, 0.25, 0.15, 0.1], abs=0.03)


def test_inverse_cdf_draws_follow_the_distribution_and_never_a_zero_probability_token():
    from services.policy.sampling import inverse_cdf

    probs = torch.tensor([[0.5, 0.0, 0.25, 0.15, 0.1, 0.0]]).repeat(20000, 1)
    u = torch.rand(20000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    tokens = inverse_cdf(probs, u)
    freq = torch.bincount(tokens, minlength=6).double() / len(tokens)
    assert freq.tolist() == pytest.approx([0.5, 0.0, 0.25, 0.15, 0.1, 0.0], abs=0.015)
    # the edges: u = 0 is the first token with mass, u just below 1 the last (never the zero tail)
    edge = inverse_cdf(probs[:3], torch.tensor([0.0, 0.5, 1.0 - 1e-16], dtype=torch.float64))
    assert edge.tolist() == [0, 2, 4]


def test_shared_uniforms_draw_the_same_token_from_nearby_distributions():
    """Common random numbers: most rows keep their token when the distribution moves a little."""
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(4000, 16, generator=gen)
    u = torch.rand(4000, generator=gen, dtype=torch.float64)
    a, _ = compute_sample(logits, 1.0, 0, 1.0, uniforms=u)
    b, _ = compute_sample(logits + 0.05 * torch.randn(4000, 16, generator=gen), 1.0, 0, 1.0, uniforms=u)
    c, _ = compute_sample(logits, 1.0, 0, 1.0, uniforms=torch.rand(4000, generator=gen, dtype=torch.float64))
    assert (a == b).float().mean() > 0.9 > (a == c).float().mean()


def test_row_uniforms_are_keyed_by_seed_prompt_and_sample_not_by_the_batch():
    from services.policy.sampling import row_uniforms

    p, q = [5, 6, 7], [8, 9]
    alone = row_uniforms([p], 2, seed=3, steps=6)
    batch = row_uniforms([q, p, p], 2, seed=3, steps=6)
    assert alone.shape == (2, 6) and batch.shape == (6, 6)
    assert torch.equal(batch[2:4], alone), "p's rows do not depend on q sharing the request"
    assert not torch.equal(batch[4:6], alone), "a repeated prompt draws new samples"
    assert not torch.equal(alone[0], alone[1]), "the n samples of a prompt differ"
    assert not torch.equal(row_uniforms([p], 2, seed=4, steps=6), alone)
    assert float(batch.min()) >= 0.0 and float(batch.max()) < 1.0
