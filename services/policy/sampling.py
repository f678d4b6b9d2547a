"""Sampling math of the policy: logits -> sampled token and its log-prob under pi_inf.

Pure tensor functions, one batch row per sample. The sampling distribution pi_inf is the one the
token was actually drawn from, in this order (the order vLLM uses):

    z = logits / T                          temperature T > 0
    z_i = -inf unless i is among the top-k  (top_k > 0)
    z_i = -inf outside the nucleus          (top_p < 1: the smallest set of most likely tokens
                                             whose probability mass reaches top_p)
    pi_inf = softmax(z),  y ~ pi_inf,  returned log-prob = log pi_inf(y)

Greedy decoding (T = 0) returns y = argmax(logits) and log softmax(logits)[y], the log-prob of the
chosen token under the *untempered* model distribution: a greedy sampler puts probability 1 on y,
so log pi_inf(y) = 0 would carry no information; the untempered log-prob is what an importance
ratio pi_train / pi_inf against a T = 1 trainer needs. This module knows nothing of models,
tokenizers or requests.
"""

from __future__ import annotations

import torch


def compute_filtered_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """z = top_p_filter(top_k_filter(logits / T)) in float32; filtered entries are -inf.

    top_k = 0 and top_p = 1.0 disable their filter. `logits` is [rows, vocab]; T must be > 0.
    """
    z = logits.float() / temperature
    vocab = z.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p < 1.0:
        z = _nucleus_filter(z, top_p)
    return z


def _nucleus_filter(z: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep token i (in descending-probability order) iff the mass before it is < top_p.

    The most likely token is always kept, so the nucleus is never empty.
    """
    sorted_z, order = torch.sort(z, dim=-1, descending=True)
    probs = torch.softmax(sorted_z, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    drop_sorted = mass_before >= top_p
    drop_sorted[..., 0] = False
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    return z.masked_fill(drop, float("-inf"))


def compute_sample(
    logits: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return (token ids [rows] int64, log pi_inf of them [rows] float32).

    T = 0 is greedy: argmax of the logits, log-prob under log_softmax(logits) (module docstring).
    Otherwise y ~ softmax(z) with z = compute_filtered_logits(...), log-prob = log_softmax(z)[y].
    """
    if temperature == 0.0:
        logp = torch.log_softmax(logits.float(), dim=-1)
        tokens = torch.argmax(logp, dim=-1)
        return tokens, logp.gather(-1, tokens[:, None])[:, 0]
    logp = torch.log_softmax(compute_filtered_logits(logits, temperature, top_k, top_p), dim=-1)
    tokens = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]
