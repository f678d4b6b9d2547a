"""The `hf` backend against plain transformers: log-probs, filters, greedy, seeds, stops, pruning."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.policy.backends.base import FINISH_LENGTH, FINISH_STOP, SamplingConfig
from services.policy.backends.hf import HfBackend
from services.policy.sampling import compute_filtered_logits


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    return HfBackend(tiny_model_dir)


@pytest.fixture(scope="module")
def prompts(backend):
    tok = backend.tokenizer
    texts = ["Compute 12 + 30.", "Name a colour", "Write one long sentence about rivers and the sea, please."]
    return [tok.encode(t, add_special_tokens=False) for t in texts]


def teacher_forced(backend, prompt, sample) -> torch.Tensor:
    """Logits [len(sample), V] predicting each sampled token, from one unpadded forward."""
    ids = torch.tensor([list(prompt) + sample.token_ids.tolist()])
    with torch.no_grad():
        logits = backend.model(input_ids=ids).logits[0].float()
    return logits[len(prompt) - 1 : -1]


def test_logprobs_equal_a_teacher_forced_forward(backend, prompts):
    n = 2
    samples = backend.generate(prompts, n, SamplingConfig(max_tokens=12, temperature=1.0, seed=3))
    assert len(samples) == len(prompts) * n
    for i, s in enumerate(samples):
        logits = teacher_forced(backend, prompts[i // n], s)
        ref = torch.log_softmax(logits, -1).gather(-1, torch.as_tensor(s.token_ids, dtype=torch.long)[:, None])[:, 0]
        assert s.logprobs.dtype == np.float32 and s.token_ids.dtype == np.int32
        np.testing.assert_allclose(s.logprobs, ref.numpy(), atol=1e-4)


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 0, 1.0), (1.0, 20, 1.0), (1.3, 0, 0.8), (0.9, 50, 0.9)])
def test_logprobs_are_under_the_filtered_sampling_distribution(backend, prompts, temperature, top_k, top_p):
    params = SamplingConfig(max_tokens=8, temperature=temperature, top_k=top_k, top_p=top_p, seed=11)
    for i, s in enumerate(backend.generate(prompts, 2, params)):
        z = compute_filtered_logits(teacher_forced(backend, prompts[i // 2], s), temperature, top_k, top_p)
        ref = torch.log_softmax(z, -1).gather(-1, torch.as_tensor(s.token_ids, dtype=torch.long)[:, None])[:, 0]
        assert torch.isfinite(ref).all(), "a sampled token lies outside the filtered support"
        np.testing.assert_allclose(s.logprobs, ref.numpy(), atol=1e-4)


def test_greedy_matches_transformers_generate(backend, prompts):
    samples = backend.generate(prompts[:1], 1, SamplingConfig(max_tokens=10, temperature=0.0))
    ids = torch.tensor([prompts[0]])
    out = backend.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=10, pad_token_id=backend.pad_id)
    assert samples[0].token_ids.tolist() == out[0, len(prompts[0]) :].tolist()[: len(samples[0].token_ids)]
    logits = teacher_forced(backend, prompts[0], samples[0])
    ref = torch.log_softmax(logits, -1).gather(-1, torch.as_tensor(samples[0].token_ids, dtype=torch.long)[:, None])[:, 0]
    np.testing.assert_allclose(samples[0].logprobs, ref.numpy(), atol=1e-4)


def test_seed_makes_sampling_reproducible(backend, prompts):
    params = SamplingConfig(max_tokens=10, seed=42)
    a = backend.generate(prompts, 2, params)
    b = backend.generate(prompts, 2, params)
    c = backend.generate(prompts, 2, SamplingConfig(max_tokens=10, seed=43))
    assert [s.token_ids.tolist() for s in a] == [s.token_ids.tolist() for s in b]
    assert [s.token_ids.tolist() for s in a] != [s.token_ids.tolist() for s in c]


def test_a_prompts_samples_do_not_depend_on_the_rest_of_the_request(backend, prompts):
    """With one seed, the same prompt draws the same tokens alone or in a batch, at any position:
    an evaluation of one domain and of five score the same weights the same way."""
    params = SamplingConfig(max_tokens=10, temperature=1.0, seed=42)
    alone = backend.generate(prompts[1:2], 2, params)
    batched = backend.generate([prompts[2], prompts[1], prompts[0]], 2, params)
    assert [s.token_ids.tolist() for s in alone] == [s.token_ids.tolist() for s in batched[2:4]]
    np.testing.assert_allclose(alone[0].logprobs, batched[2].logprobs, atol=1e-4)


def test_a_prompt_is_prefilled_once_for_its_samples(backend, prompts, monkeypatch):
    """The prefill runs over the distinct prompts and repeats their cache for the n samples: the same
    next-token logits, cache and positions as a prefill of every sample's row, with n times fewer rows."""
    n = 3
    rows = [p for p in prompts for _ in range(n)]
    calls = []
    forward = backend._forward
    monkeypatch.setattr(backend, "_forward", lambda ids, *a: calls.append(ids.shape[0]) or forward(ids, *a))
    with torch.inference_mode():
        shared = backend._prefill(prompts, n)
        each = backend._prefill(rows, 1)
    assert calls == [len(prompts), len(rows)]
    for got, want in zip(shared[:3], each[:3]):  # logits, mask, positions
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for got, want in zip(shared[3].layers, each[3].layers):
        torch.testing.assert_close(got.keys, want.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.values, want.values, atol=1e-5, rtol=1e-5)


def test_eos_ends_rows_at_different_steps_and_pruning_keeps_logprobs_exact(backend, prompts):
    params = SamplingConfig(max_tokens=12, seed=5)
    free = backend.generate(prompts, 2, params)
    # declare a token that samples drew at different steps an end-of-sequence token
    steps: dict[int, set[int]] = {}
    for s in free:
        for t, tok in enumerate(s.token_ids.tolist()[:-1]):
            steps.setdefault(tok, set()).add(t)
    token = max(steps, key=lambda k: (len(steps[k]), -min(steps[k])))
    saved = backend.eos_ids
    backend.eos_ids = sorted({*saved, token})
    try:
        stopped = backend.generate(prompts, 2, params)
    finally:
        backend.eos_ids = saved
    assert stopped[0].token_ids.tolist()[: min(steps[token]) + 1] == free[0].token_ids.tolist()[: min(steps[token]) + 1]
    eos = set(backend.eos_ids) | {token}
    for i, s in enumerate(stopped):
        ids = s.token_ids.tolist()
        assert not eos & set(ids[:-1]), "generation continued past an end-of-sequence token"
        if ids[-1] in eos:
            assert s.finish_reason == FINISH_STOP
        else:
            assert s.finish_reason == FINISH_LENGTH and len(ids) == params.max_tokens
        logits = teacher_forced(backend, prompts[i // 2], s)
        ref = torch.log_softmax(logits, -1).gather(-1, torch.as_tensor(ids, dtype=torch.long)[:, None])[:, 0]
        np.testing.assert_allclose(s.logprobs, ref.numpy(), atol=1e-4)
    assert sum(s.finish_reason == FINISH_STOP for s in stopped) >= 1
    assert len({len(s.token_ids) for s in stopped}) > 1


def test_stop_string_ends_the_sample_and_stays_in_the_text(backend, prompts):
    params = SamplingConfig(max_tokens=16, seed=9)
    free = backend.generate(prompts[:1], 1, params)[0]
    ids = free.token_ids.tolist()
    tok = backend.tokenizer
    k = next(k for k in range(3, len(ids)) if tok.decode(ids[k : k + 1]).strip())
    stop = tok.decode(ids[k : k + 1]).strip()
    first = next(j for j in range(1, len(ids) + 1) if stop in tok.decode(ids[:j]))
    got = backend.generate(prompts[:1], 1, SamplingConfig(max_tokens=16, seed=9, stop=(stop,)))[0]
    assert got.token_ids.tolist() == ids[:first]
    assert got.finish_reason == FINISH_STOP
    assert stop in got.text


def test_length_finish_when_max_tokens_is_reached(backend, prompts):
    saved = backend.eos_ids
    backend.eos_ids = []
    try:
        samples = backend.generate(prompts, 1, SamplingConfig(max_tokens=5, seed=1))
    finally:
        backend.eos_ids = saved
    assert all(len(s.token_ids) == 5 and s.finish_reason == FINISH_LENGTH for s in samples)


def test_eos_ids_come_from_generation_config_and_tokenizer(backend):
    gen = backend.model.generation_config.eos_token_id
    assert set(gen if isinstance(gen, list) else [gen]) <= set(backend.eos_ids)
    assert backend.tokenizer.eos_token_id in backend.eos_ids
