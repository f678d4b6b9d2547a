"""The sampling distribution as a function of the logits, shared by whoever must agree on it.

The policy draws y ~ pi_inf = softmax(z) with, in this order (the order vLLM uses):

    z = logits / T                          temperature T > 0
    z_i = -inf unless i is among the top-k  (top_k > 0)
    z_i = -inf outside the nucleus          (top_p < 1: the smallest set of most likely tokens
                                             whose probability mass reaches top_p)

The trainer's log pi_train must be taken on the same distribution, or the importance ratio
pi_train / pi_inf is skewed by the temperature alone. `filter_logits` is that z, the one
definition: the policy's sampler (services/policy/sampling.py) and the trainer both use it.
Pure tensor functions; nothing here knows of models or requests.
"""

from __future__ import annotations

import torch


def filter_logits(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """z = top_p_filter(top_k_filter(logits / T)) in float32 over the last axis; filtered entries are -inf.

    top_k = 0 and top_p = 1.0 disable their filter; T must be > 0.
    """
    z = logits.float() / temperature
    vocab = z.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p < 1.0:
        z = nucleus_filter(z, top_p)
    return z


def nucleus_filter(z: torch.Tensor, top_p: float) -> torch.Tensor:
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


def sampled_token_logits(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """z of `filter_logits` with each row's sampled token `targets` kept whatever the filter says.

    The sampler drew `targets` from its own z, so they were inside its filter; a token the
    recomputed filter drops by rounding (a nucleus boundary in another precision) is put back at its
    tempered logit rather than given log-prob -inf. Temperature 0 (greedy) is the plain softmax of the
    logits, unfiltered: the greedy sampler reports log softmax(logits)[y].
    `logits` is [..., vocab], `targets` [...] int64.
    """
    if temperature == 0.0:
        return logits.float()
    if temperature == 1.0 and top_k == 0 and top_p >= 1.0:
        return logits.float()
    z = filter_logits(logits, temperature, top_k, top_p)
    if top_k == 0 and top_p >= 1.0:
        return z
    idx = targets[..., None]
    tempered = logits.float().gather(-1, idx) / temperature
    return z.scatter(-1, idx, tempered)
