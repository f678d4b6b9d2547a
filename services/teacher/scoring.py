"""Teacher log-prob math: token-budget batching and prompt KV-cache sharing over a causal LM.

For completion y of prompt x the teacher's score of token t is

    log pi_teacher(y_t | x, y_<t) = log_softmax(z_t / T)[y_t]

with z_t the logits at the position before y_t and T the teacher temperature. The G completions
of a GRPO group share x: `score_shared` runs every prompt of a batch once, expands its KV cache
to the group's completions (one row per completion) and runs only the completion tokens on top;
`score_whole` runs every prompt+completion sequence from scratch (the reference, and the path
without sharing). Both give the same numbers (within float error). Batches are cut by a budget
of padded tokens (`plan_batches`), not by a sample count. This module knows nothing of gRPC,
domains, requests or validation: inputs are already checked.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache


@dataclass(frozen=True)
class Group:
    """Completions scored in one batch that continue the same prompt row."""

    prompt: int
    completions: tuple[int, ...]


@dataclass
class Scores:
    """Teacher scores of one completion."""

    logprobs: np.ndarray
    """[len] float32: log pi_teacher of each completion token."""
    topk_ids: np.ndarray
    """[len * k] int32, row-major per position (empty when k = 0)."""
    topk_logprobs: np.ndarray
    """[len * k] float32, aligned with topk_ids."""


def compute_token_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log_softmax(logits / T)[..., target] in float32; logits [..., V], targets [...] int64."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def compute_topk(logits: torch.Tensor, k: int, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, log-probs) of the k largest entries of log_softmax(logits / T), each [..., k]."""
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    values, ids = torch.topk(logp, k, dim=-1)
    return ids, values


def batch_cost(groups: Sequence[Group], prompt_lens: Sequence[int], completion_lens: Sequence[int]) -> int:
    """Padded tokens one shared batch runs: n_prompts * max_prompt_len + n_completions * max_completion_len."""
    p = [prompt_lens[g.prompt] for g in groups]
    c = [completion_lens[i] for g in groups for i in g.completions]
    return len(p) * max(p) + len(c) * max(c, default=0)


def plan_batches(
    prompt_lens: Sequence[int],
    completion_lens: Sequence[int],
    prompt_index: Sequence[int],
    max_batch_tokens: int,
    share_prompt: bool = True,
) -> list[list[Group]]:
    """Cut the completions into batches of at most `max_batch_tokens` padded tokens (see batch_cost).

    With sharing, the completions of one prompt form a group (split into chunks when the group
    alone exceeds the budget); without, every completion is its own group. Groups are sorted by
    length so a batch pads little, then packed greedily. A single sequence longer than the budget
    still gets a batch of its own.
    """
    members: dict[int, list[int]] = {}
    for i, p in enumerate(prompt_index):
        members.setdefault(p, []).append(i)
    chunks: list[Group] = []
    for p, idx in members.items():
        if not share_prompt:
            chunks.extend(Group(p, (i,)) for i in idx)
            continue
        longest = max(completion_lens[i] for i in idx) or 1
        per_chunk = max(1, (max_batch_tokens - prompt_lens[p]) // longest)
        chunks.extend(Group(p, tuple(idx[s : s + per_chunk])) for s in range(0, len(idx), per_chunk))
    if not share_prompt:
        lens = [prompt_lens[g.prompt] + completion_lens[g.completions[0]] for g in chunks]
        cost = lambda gs: len(gs) * max(prompt_lens[g.prompt] + completion_lens[g.completions[0]] for g in gs)
        order = sorted(range(len(chunks)), key=lambda i: -lens[i])
    else:
        cost = lambda gs: batch_cost(gs, prompt_lens, completion_lens)
        order = sorted(range(len(chunks)), key=lambda i: (-prompt_lens[chunks[i].prompt], -max(completion_lens[j] for j in chunks[i].completions)))
    batches: list[list[Group]] = []
    current: list[Group] = []
    for i in order:
        if current and cost([*current, chunks[i]]) > max_batch_tokens:
            batches.append(current)
            current = []
        current.append(chunks[i])
    if current:
        batches.append(current)
    return batches


def _pad(rows: Sequence[np.ndarray], pad_id: int, left: bool, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) [len(rows), max_len], padded on the left or the right."""
    width = max(1, max(len(r) for r in rows))
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        span = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, span] = r
        mask[i, span] = 1
    return torch.from_numpy(ids).to(device), torch.from_numpy(mask).to(device)


def _collect(logits: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor, lens: list[int], top_k: int, temperature: float) -> list[Scores]:
    """Per-row Scores from logits [N, L, V] predicting targets [N, L]; `valid` [N, L] marks real tokens."""
    flat_logits, flat_targets = logits[valid], targets[valid]
    lp = compute_token_logprobs(flat_logits, flat_targets, temperature).cpu().numpy()
    if top_k:
        ids, vals = compute_topk(flat_logits, top_k, temperature)
        ids, vals = ids.to(torch.int32).cpu().numpy(), vals.cpu().numpy()
    offsets = np.cumsum([0, *lens])
    empty_i, empty_f = np.zeros(0, np.int32), np.zeros(0, np.float32)
    out = []
    for r in range(len(lens)):
        s = slice(offsets[r], offsets[r + 1])
        out.append(
            Scores(lp[s].astype(np.float32), ids[s].reshape(-1) if top_k else empty_i, vals[s].reshape(-1) if top_k else empty_f)
        )
    return out


@torch.inference_mode()
def score_shared(model, prompts: Sequence[np.ndarray], completions: Sequence[np.ndarray], batch: list[Group], *, pad_id: int, cache_kw: str, top_k: int = 0, temperature: float = 1.0) -> dict[int, Scores]:
    """Score one batch with each prompt run once and its KV cache expanded to its completions.

    Prompts are left-padded (so every prompt's last logits sit in the last column); the cache is
    row-expanded with `batch_select_indices`; completions are right-padded and fed without their
    last token, at positions prompt_len + j. Logits predicting completion token t are the prompt's
    last logits for t = 0 and the completion forward's column t - 1 otherwise.
    """
    device = next(model.parameters()).device
    p_ids, p_mask = _pad([prompts[g.prompt] for g in batch], pad_id, True, device)
    cache = DynamicCache(config=model.config)
    p_pos = (p_mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True, logits_to_keep=1, **{cache_kw: cache})
    order = [c for g in batch for c in g.completions]
    rows = torch.tensor([r for r, g in enumerate(batch) for _ in g.completions], device=device)
    lens = [len(completions[c]) for c in order]
    c_ids, c_mask = _pad([completions[c] for c in order], pad_id, False, device)
    logits = out.logits[rows, -1:]
    if c_ids.shape[1] > 1:
        cache.batch_select_indices(rows)
        mask = torch.cat([p_mask[rows], c_mask[:, :-1]], dim=-1)
        pos = p_mask.sum(-1)[rows, None] + torch.arange(c_ids.shape[1] - 1, device=device)
        step = model(input_ids=c_ids[:, :-1], attention_mask=mask, position_ids=pos, use_cache=True, **{cache_kw: cache})
        logits = torch.cat([logits, step.logits], dim=1)
    return dict(zip(order, _collect(logits, c_ids, c_mask.bool(), lens, top_k, temperature)))


@torch.inference_mode()
def score_whole(model, prompts: Sequence[np.ndarray], completions: Sequence[np.ndarray], prompt_index: Sequence[int], batch: list[Group], *, pad_id: int, top_k: int = 0, temperature: float = 1.0) -> dict[int, Scores]:
    """Score one batch by running every prompt + completion sequence whole (right-padded)."""
    device = next(model.parameters()).device
    order = [c for g in batch for c in g.completions]
    seqs = [np.concatenate([prompts[prompt_index[c]], completions[c]]) for c in order]
    ids, mask = _pad(seqs, pad_id, False, device)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
    valid = torch.zeros_like(mask[:, 1:], dtype=torch.bool)
    for r, c in enumerate(order):
        p = len(prompts[prompt_index[c]])
        valid[r, p - 1 : p - 1 + len(completions[c])] = True
    targets = ids[:, 1:]
    return dict(zip(order, _collect(logits, targets, valid, [len(completions[c]) for c in order], top_k, temperature)))
