"""Grouped-query attention without the cache copy: the same samples, to the bit, as transformers' `sdpa`."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.common.modelio import load_causal_lm
from services.policy.backends import attention
from services.policy.backends.base import SamplingConfig
from services.policy.backends.hf import HfBackend


@pytest.fixture(scope="module")
def backends(tiny_model_dir):
    """(grouped, stock): the `hf` backend as served on CPU, and one whose model keeps `sdpa`."""
    grouped = HfBackend(tiny_model_dir)
    stock = HfBackend(tiny_model_dir)
    stock.model.set_attn_implementation("sdpa")
    return grouped, stock


@pytest.fixture(scope="module")
def prompts(backends):
    tok = backends[0].tokenizer
    texts = ["Compute 12 + 30.", "Name a colour", "Write one long sentence about rivers and the sea, please.",
             "Reply in JSON with the keys name and age, for a person called Ada who is 36."]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def test_the_tiny_model_is_grouped_and_the_cpu_backend_switches_it(backends):
    grouped, stock = backends
    cfg = grouped.model.config
    assert cfg.num_key_value_heads < cfg.num_attention_heads, "the test needs a model with grouped key/value heads"
    assert grouped.grouped_attention and cfg._attn_implementation == attention.NAME
    assert stock.model.config._attn_implementation == "sdpa"


def often_drawn(backend, prompts, params) -> int:
    """A token the samples drew at many different steps (but not first)."""
    steps: dict[int, set[int]] = {}
    for s in backend.generate(prompts, 2, params):
        for t, tok in enumerate(s.token_ids.tolist()[1:-1], start=1):
            steps.setdefault(tok, set()).add(t)
    return max(steps, key=lambda k: (len(steps[k]), -min(steps[k])))


@pytest.mark.parametrize("temperature, n", [(1.0, 4), (0.0, 1), (0.7, 3)])
def test_samples_and_logprobs_equal_stock_sdpa_to_the_bit(backends, prompts, temperature, n):
    """Prompts of different lengths (a padding mask at every step), rows ending at different steps
    (the cache pruned), sampled and greedy: the tokens and the float32 log-probs are identical."""
    grouped, stock = backends
    params = SamplingConfig(max_tokens=24, temperature=temperature, seed=5)
    saved = grouped.eos_ids
    eos = sorted({*saved, often_drawn(stock, prompts, params)})  # the untrained model rarely ends a row
    for backend in backends:
        backend.eos_ids = eos
    try:
        a, b = grouped.generate(prompts, max(n, 2), params), stock.generate(prompts, max(n, 2), params)
    finally:
        for backend in backends:
            backend.eos_ids = saved
    assert len({len(s.token_ids) for s in a}) > 1  # rows ended at different steps: the cache was pruned
    for x, y in zip(a, b, strict=True):
        assert x.token_ids.tolist() == y.token_ids.tolist()
        assert np.array_equal(x.logprobs, y.logprobs)


def test_a_full_forward_with_a_padding_mask_equals_stock_sdpa(backends, prompts):
    grouped, stock = backends
    ids = torch.tensor([[grouped.pad_id] * 3 + prompts[0][:8], prompts[2][:11]])
    mask = (ids != grouped.pad_id).long()
    with torch.no_grad():
        a = grouped.model(input_ids=ids, attention_mask=mask).logits
        b = stock.model(input_ids=ids, attention_mask=mask).logits
    assert torch.equal(a[mask.bool()], b[mask.bool()])


def test_a_model_without_grouped_heads_is_left_on_sdpa(tiny_model_dir):
    model = load_causal_lm(tiny_model_dir)
    model.config.num_key_value_heads = model.config.num_attention_heads  # as an ungrouped model reports
    assert not attention.use_grouped_attention(model)
    assert model.config._attn_implementation == "sdpa"
