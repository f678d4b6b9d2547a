"""SFT sequence packing: a batch's conversations laid end to end in fewer, fuller rows.

A packed row holds whole conversations c_1, c_2, ... one after another and then padding; its
position ids restart at 0 at each conversation's first token (and at the padding), which is how the
model is told where one conversation ends: with no attention mask and position ids that restart,
the model attends block-diagonally (each token sees the earlier tokens of its own conversation
only, causally), so every token's log-prob, the loss and its gradients are those of the unpacked
batch. The loss mask is carried over token for token (each conversation's first token keeps its
mask 0: it has no prediction in its own conversation), so the token-level SFT normaliser is
unchanged. A conversation is never split. The layout is the one of least padded area (rows x
widest row) among first-fit decreasing and balanced rows (`plan_rows`): a forward pass costs about
rows x width, whatever share of it is padding. Pure tensor code; nothing here knows of models or ranks.
"""

from __future__ import annotations

import math

import torch

from services.trainer.batch import Batch

BALANCED_TRIES = 3
"""Row counts tried for balanced rows: k0 = ceil(sum / width budget) and the next ones (k0 + 1, ...)."""


def first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Conversation indices per row: longest first, each into the first row with room, rows of
    `capacity` tokens (a conversation longer than `capacity` gets a row of its own)."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        for r, free in enumerate(room):
            if lengths[i] <= free:
                rows[r].append(i)
                room[r] -= lengths[i]
                break
        else:
            rows.append([i])
            room.append(capacity - lengths[i])
    return rows


def balanced_rows(lengths: list[int], count: int) -> list[list[int]]:
    """Conversation indices over `count` rows: longest first, each to the least filled row so far
    (ties: the lowest row), so every row's fill is near sum(lengths) / count (longest-processing-time
    scheduling: the fullest row is at most 4/3 of the best possible). Empty rows are dropped."""
    rows: list[list[int]] = [[] for _ in range(count)]
    fill = [0] * count
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(range(count), key=lambda r: (fill[r], r))
        rows[r].append(i)
        fill[r] += lengths[i]
    return [row for row in rows if row]


def padded_area(lengths: list[int], rows: list[list[int]]) -> int:
    """rows x widest row: the tokens a forward pass over the layout computes, padding included."""
    return len(rows) * max(sum(lengths[i] for i in row) for row in rows)


def plan_rows(lengths: list[int], capacity: int) -> list[list[int]]:
    """Conversation indices per row, every row's fill <= W = max(capacity, longest), of least padded
    area (`padded_area`; ties: fewer rows, then the earlier candidate). Candidates: first-fit
    decreasing into rows of W, and balanced rows (`balanced_rows`) for k = ceil(sum / W) and the
    next BALANCED_TRIES - 1 row counts (at most one row per conversation), each kept only when its
    fullest row fits W."""
    width = max(capacity, max(lengths))
    candidates = [first_fit_decreasing(lengths, width)]
    k0 = math.ceil(sum(lengths) / width)
    for k in range(k0, min(k0 + BALANCED_TRIES, len(lengths)) + 1):
        rows = balanced_rows(lengths, k)
        if max(sum(lengths[i] for i in row) for row in rows) <= width:
            candidates.append(rows)
    return min(candidates, key=lambda rows: (padded_area(lengths, rows), len(rows)))


def pack(batch: Batch, capacity: int, pad_id: int) -> Batch:
    """`batch` (one conversation per row, right-padded) as packed rows (`plan_rows`), right-padded to
    the fullest row, which is <= max(capacity, longest conversation) wide (capacity 0: the longest)."""
    lengths = [int(n) for n in batch.attention_mask.sum(dim=1).tolist()]
    plan = plan_rows(lengths, capacity)
    width = max(sum(lengths[i] for i in row) for row in plan)
    shape = (len(plan), width)
    ids = torch.full(shape, pad_id, dtype=torch.long)
    att = torch.zeros(shape, dtype=torch.long)
    mask = torch.zeros(shape, dtype=torch.float32)
    pos = torch.zeros(shape, dtype=torch.long)
    for r, row in enumerate(plan):
        at = 0
        for i in row:
            n = lengths[i]
            ids[r, at:at + n] = batch.input_ids[i, :n]
            att[r, at:at + n] = 1
            mask[r, at:at + n] = batch.loss_mask[i, :n]
            pos[r, at:at + n] = torch.arange(n)
            at += n
        pos[r, at:] = torch.arange(width - at)  # padding: a segment of its own, never in the loss
    return Batch(input_ids=ids, attention_mask=att, loss_mask=mask, position_ids=pos)
