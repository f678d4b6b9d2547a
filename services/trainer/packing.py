"""SFT sequence packing: a batch's conversations laid end to end in fewer, fuller rows.

A packed row holds whole conversations c_1, c_2, ... one after another and then padding; its
position ids restart at 0 at each conversation's first token (and at the padding), which is how the
model is told where one conversation ends: with no attention mask and position ids that restart,
the model attends block-diagonally (each token sees the earlier tokens of its own conversation
only, causally), so every token's log-prob, the loss and its gradients are those of the unpacked
batch. The loss mask is carried over token for token (each conversation's first token keeps its
mask 0: it has no prediction in its own conversation), so the token-level SFT normaliser is
unchanged. Rows are filled first-fit in decreasing length (a conversation is never split).
Pure tensor code; nothing here knows of models or ranks.
"""

from __future__ import annotations

import torch

from services.trainer.batch import Batch


def plan_rows(lengths: list[int], capacity: int) -> list[list[int]]:
    """First-fit decreasing: conversation indices per row, each row's lengths summing to <= capacity
    (a conversation longer than `capacity` gets a row of its own)."""
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


def pack(batch: Batch, capacity: int, pad_id: int) -> Batch:
    """`batch` (one conversation per row, right-padded) as packed rows of width <= max(capacity, longest)."""
    lengths = [int(n) for n in batch.attention_mask.sum(dim=1).tolist()]
    plan = plan_rows(lengths, max(capacity, max(lengths)))
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
