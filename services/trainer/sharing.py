"""Prompt sharing for rollout losses: a group's completions laid after one copy of their prompt.

A GRPO or MOPD batch holds G completions of every prompt, each row `prompt + completion`, so the
trainer's forward pass computes every prompt G times. `share_prompts` lays rows with the same prompt
into one shared row instead: `prompt c_1 c_2 ... c_k` (a group too wide for the width budget takes
several shared rows, each with its own copy of the prompt). A block attention mask lets each
completion see the prompt and, causally, itself only, and its position ids continue from the prompt
as in its own row, so every hidden state, and with it every token's log-prob, the loss and its
gradients, is the one of the unshared batch (equal up to float rounding of the different sums).

A row's prompt is its tokens before its first loss token (a multi-turn episode's tool results, out
of the loss, belong to its completion). Only the tokens in the loss are predicted: `want` marks them
in the unshared (B, T) layout and `predictor` gives, for each (in `want.nonzero()` order), the flat
index into the shared (R x W) layout of the hidden state that predicts it (the previous token of its
own row: the prompt's last token for a completion's first token). Pure tensor code; nothing here
knows of models or ranks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

PROMPT, PAD = 0, -1
"""Segment ids: the prompt of a shared row, and padding; completion k of the row is segment k (1-based)."""


@dataclass(frozen=True)
class SharedLayout:
    """A batch's rows laid out as shared rows (R rows of width W)."""

    input_ids: Tensor  # (R, W) long
    position_ids: Tensor  # (R, W) long: each completion continues its prompt's positions
    segments: Tensor  # (R, W) long: PROMPT, completion k (1..), or PAD
    want: Tensor  # (B, T) bool: the unshared tokens predicted (in the loss)
    predictor: Tensor  # (N,) long: flat index into (R x W) of the hidden state predicting each wanted token

    @property
    def rows(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def width(self) -> int:
        return int(self.input_ids.shape[1])

    def attention_mask(self, dtype: torch.dtype) -> Tensor:
        """(R, 1, W, W) additive mask (0 = attend, dtype's lowest = not): query i sees key j <= i when j
        is in the prompt or in i's own segment; padding sees itself only (no query sees nothing)."""
        seg = self.segments
        q, k = seg[:, :, None], seg[:, None, :]
        causal = torch.ones(self.width, self.width, dtype=torch.bool).tril()
        allowed = causal & ((k == PROMPT) | (k == q)) & (q != PAD)
        allowed |= torch.eye(self.width, dtype=torch.bool)
        mask = torch.zeros(allowed.shape, dtype=dtype)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        return mask[:, None]


def prompt_length(mask_row: Tensor, length: int) -> int:
    """Tokens before the row's first loss token (the whole row when none is in the loss)."""
    on = (mask_row[:length] > 0).nonzero()
    return int(on[0]) if len(on) else length


def plan_shared_rows(prompt: int, completions: list[int], budget: int) -> list[list[int]]:
    """Completion indices per shared row of one prompt group, in order: each row holds the prompt and
    as many completions as fit in max(budget, prompt + longest completion) tokens."""
    width = max(budget, prompt + max(completions))
    rows: list[list[int]] = [[]]
    fill = prompt
    for i, n in enumerate(completions):
        if rows[-1] and fill + n > width:
            rows.append([])
            fill = prompt
        rows[-1].append(i)
        fill += n
    return rows


def share_prompts(ids: Tensor, att: Tensor, mask: Tensor, budget: int, pad_id: int) -> SharedLayout | None:
    """The shared layout of a right-padded batch (B, T), rows grouped by equal prompt tokens, shared rows
    at most max(budget, a group's prompt + its longest completion) wide (budget 0: that width, one
    completion a row). None when no shared row would hold two completions: nothing to save."""
    lengths = [int(n) for n in att.sum(dim=1).tolist()]
    groups: dict[tuple[int, ...], list[int]] = {}
    starts: list[int] = []
    for r, n in enumerate(lengths):
        p = prompt_length(mask[r], n)
        starts.append(p)
        groups.setdefault(tuple(ids[r, :p].tolist()), []).append(r)
    plan: list[tuple[int, list[int]]] = []  # (prompt length, member rows) per shared row
    for members in groups.values():
        p = starts[members[0]]
        sizes = [lengths[r] - p for r in members]
        for part in plan_shared_rows(p, sizes, budget):
            plan.append((p, [members[i] for i in part]))
    if all(len(rows) < 2 for _, rows in plan):
        return None
    width = max(p + sum(lengths[r] - p for r in rows) for p, rows in plan)
    shape = (len(plan), width)
    out_ids = torch.full(shape, pad_id, dtype=torch.long)
    positions = torch.zeros(shape, dtype=torch.long)
    segments = torch.full(shape, PAD, dtype=torch.long)
    where = torch.full(ids.shape, -1, dtype=torch.long)  # flat shared index of every unshared token
    for s, (p, rows) in enumerate(plan):
        first = rows[0]
        out_ids[s, :p] = ids[first, :p]
        positions[s, :p] = torch.arange(p)
        segments[s, :p] = PROMPT
        for r in rows:
            where[r, :p] = s * width + torch.arange(p)
        at = p
        for k, r in enumerate(rows, start=1):
            n = lengths[r] - p
            out_ids[s, at:at + n] = ids[r, p:lengths[r]]
            positions[s, at:at + n] = torch.arange(p, lengths[r])
            segments[s, at:at + n] = k
            where[r, p:lengths[r]] = s * width + torch.arange(at, at + n)
            at += n
        positions[s, at:] = torch.arange(width - at)
    want = mask > 0
    want[:, 0] = False
    rows_at, cols_at = want.nonzero(as_tuple=True)
    predictor = where[rows_at, cols_at - 1]
    return SharedLayout(out_ids, positions, segments, want, predictor)
