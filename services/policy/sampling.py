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

import hashlib

import numpy as np
import torch

from services.common.logits import filter_logits as compute_filtered_logits


def compute_sample(
    logits: torch.Tensor,
    temperature: float,
    top_k: int,
    top_p: float,
    generator: torch.Generator | None = None,
    uniforms: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return (token ids [rows] int64, log pi_inf of them [rows] float32).

    T = 0 is greedy: argmax of the logits, log-prob under log_softmax(logits) (module docstring).
    Otherwise y ~ softmax(z) with z = compute_filtered_logits(...), log-prob = log_softmax(z)[y]:
    by inverse CDF from `uniforms` ([rows] in [0, 1), see `inverse_cdf`) when given, else from
    `generator`.
    """
    if temperature == 0.0:
        logp = torch.log_softmax(logits.float(), dim=-1)
        tokens = torch.argmax(logp, dim=-1)
        return tokens, logp.gather(-1, tokens[:, None])[:, 0]
    logp = torch.log_softmax(compute_filtered_logits(logits, temperature, top_k, top_p), dim=-1)
    if uniforms is not None:
        tokens = inverse_cdf(logp.exp(), uniforms)
    else:
        tokens = torch.multinomial(logp.exp(), 1, generator=generator)[:, 0]
    return tokens, logp.gather(-1, tokens[:, None])[:, 0]


def inverse_cdf(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """y = min { i : F(i) > u * F(V-1) } per row, F the cumulative sum of `probs` in float64.

    An exact draw from `probs` for u ~ U[0, 1); a token of probability 0 is never drawn (F does not
    rise there). The same u on two nearby distributions mostly gives the same token, which is
    what makes draws with shared uniforms comparable across weights (common random numbers).
    """
    cdf = torch.cumsum(probs.double(), dim=-1)
    target = uniforms.to(cdf.device, torch.float64)[:, None] * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, target, right=True)[:, 0].clamp_(max=probs.shape[-1] - 1)
    off = probs.gather(-1, tokens[:, None])[:, 0] == 0  # u * F(V-1) rounded up to F(V-1): past the last token with mass
    if bool(off.any()):
        tokens[off] = (probs[off] > 0).long().cumsum(-1).argmax(-1)  # the last token with probability > 0
    return tokens


def row_uniforms(prompts: list[list[int]], n: int, seed: int, steps: int) -> torch.Tensor:
    """[len(prompts) * n, steps] uniforms in [0, 1): row (prompt p, sample j) is drawn from a stream
    keyed by (seed, the tokens of p, how many equal prompts came before p, j) alone.

    So a prompt's samples do not depend on which other prompts share the request: the same
    weights, prompt and seed draw the same tokens in any batch, and two checkpoints evaluated with
    the same seed see the same uniforms (their scores differ by what the weights do, not by luck).
    """
    seen: dict[bytes, int] = {}
    rows = []
    for p in prompts:
        key = hashlib.blake2b(np.asarray(p, dtype=np.int64).tobytes(), digest_size=8).digest()
        occurrence = seen.get(key, 0)
        seen[key] = occurrence + 1
        for j in range(n):
            stream = np.random.default_rng([seed & (2**63 - 1), int.from_bytes(key, "little"), occurrence, j])
            rows.append(stream.random(steps))
    return torch.from_numpy(np.stack(rows)) if rows else torch.zeros((0, steps), dtype=torch.float64)
