"""Teacher log-prob math: hand values, token-budget plans, and shared-prompt scoring == a plain forward."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.modelio import load_causal_lm, load_tokenizer
from services.teacher.scoring import (
    batch_cost,
    compute_token_logprobs,
    compute_topk,
    plan_batches,
    score_shared,
    score_whole,
)


def test_token_logprobs_by_hand():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]))
    assert compute_token_logprobs(logits, torch.tensor([0, 2])).tolist() == pytest.approx([math.log(0.5), math.log(0.8)], abs=1e-6)
    # temperature 2: softmax(log p / 2) ~ sqrt(p)
    s = [math.sqrt(0.5), math.sqrt(0.25), math.sqrt(0.25)]
    assert compute_token_logprobs(logits[:1], torch.tensor([1]), 2.0).item() == pytest.approx(math.log(s[1] / sum(s)), abs=1e-6)


def test_topk_by_hand():
    ids, vals = compute_topk(torch.log(torch.tensor([[0.1, 0.6, 0.3]])), 2)
    assert ids.tolist() == [[1, 2]] and vals.tolist()[0] == pytest.approx([math.log(0.6), math.log(0.3)], abs=1e-6)


def test_plan_shares_each_prompt_and_respects_the_budget():
    p_lens, c_lens = [10, 4], [3, 5, 2, 6, 6]
    plan = plan_batches(p_lens, c_lens, [0, 0, 0, 1, 1], max_batch_tokens=1000)
    assert len(plan) == 1 and sorted(g.prompt for g in plan[0]) == [0, 1]
    assert batch_cost(plan[0], p_lens, c_lens) == 2 * 10 + 5 * 6
    tight = plan_batches(p_lens, c_lens, [0, 0, 0, 1, 1], max_batch_tokens=25)
    for batch in tight:
        assert batch_cost(batch, p_lens, c_lens) <= 25
    assert sorted(c for b in tight for g in b for c in g.completions) == [0, 1, 2, 3, 4]


def test_plan_without_sharing_has_one_completion_per_group():
    plan = plan_batches([4, 4], [2, 2, 2], [0, 0, 1], max_batch_tokens=12, share_prompt=False)
    assert all(len(g.completions) == 1 for b in plan for g in b)
    assert [len(b) for b in plan] == [2, 1]  # 2 x 6 padded tokens fit, a third does not


def test_a_sequence_longer_than_the_budget_gets_its_own_batch():
    plan = plan_batches([50, 2], [50, 1], [0, 1], max_batch_tokens=16)
    assert len(plan) == 2 and {len(b) for b in plan} == {1}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=6), st.data())
def test_plan_covers_every_completion_once_within_budget(p_lens, data):
    n = data.draw(st.integers(1, 20))
    c_lens = data.draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))
    index = data.draw(st.lists(st.integers(0, len(p_lens) - 1), min_size=n, max_size=n))
    budget = data.draw(st.integers(16, 400))
    for share in (True, False):
        plan = plan_batches(p_lens, c_lens, index, budget, share)
        seen = sorted(c for b in plan for g in b for c in g.completions)
        assert seen == list(range(n))
        for b in plan:
            assert all(index[c] == g.prompt for g in b for c in g.completions)
            if share and len(b) > 1:
                assert batch_cost(b, p_lens, c_lens) <= budget
            if not share and len(b) > 1:
                assert len(b) * max(p_lens[g.prompt] + c_lens[g.completions[0]] for g in b) <= budget


def cache_keyword(model) -> str:
    """The forward argument carrying the KV cache: `cache` in new transformers, `past_key_values` before."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_causal_lm(tiny_model_dir), load_tokenizer(tiny_model_dir).pad_token_id


@pytest.fixture(scope="module")
def batch():
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, 600, size=n).astype(np.int32) for n in (6, 19, 11)]
    completions = [rng.integers(1, 600, size=n).astype(np.int32) for n in (4, 9, 1, 13, 7, 0, 5, 8)]
    return prompts, completions, [0, 0, 1, 1, 1, 2, 2, 0]


def plain_forward(m, prompt, completion, temperature=1.0):
    ids = torch.tensor(np.concatenate([prompt, completion]).astype(np.int64))[None]
    with torch.no_grad():
        logits = m(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1)


@pytest.mark.parametrize("share", [True, False])
@pytest.mark.parametrize("budget", [24, 64, 10_000])
def test_scores_equal_a_plain_forward(model, batch, share, budget):
    m, pad = model
    prompts, completions, index = batch
    plan = plan_batches([len(p) for p in prompts], [len(c) for c in completions], index, budget, share)
    got = {}
    for b in plan:
        if share:
            got.update(score_shared(m, prompts, completions, b, pad_id=pad, cache_kw=cache_keyword(m), top_k=4, temperature=0.8))
        else:
            got.update(score_whole(m, prompts, completions, index, b, pad_id=pad, top_k=4, temperature=0.8))
    assert sorted(got) == list(range(len(completions)))
    for c, comp in enumerate(completions):
        ref = plain_forward(m, prompts[index[c]], comp, 0.8)
        lp = ref.gather(-1, torch.tensor(comp.astype(np.int64))[:, None])[:, 0] if len(comp) else torch.zeros(0)
        np.testing.assert_allclose(got[c].logprobs, lp.numpy(), atol=1e-4)
        vals, ids = torch.topk(ref, 4, -1) if len(comp) else (torch.zeros(0, 4), torch.zeros(0, 4, dtype=torch.long))
        np.testing.assert_allclose(got[c].topk_logprobs, vals.reshape(-1).numpy(), atol=1e-4)
        assert got[c].topk_ids.tolist() == ids.reshape(-1).tolist()
