"""Deterministic prompt batches: the same (seed, stage, step) always draws the same records.

A redelivered task therefore trains on the batch the lost attempt drew. Records are visited in
epochs: each epoch is a fresh permutation of all N records seeded by (seed, stage, epoch), and step
s of a stage takes positions [s·B, (s+1)·B) of the concatenated epochs, so no record repeats
before every record has been used once. Pure: no I/O, no global random state; this module knows
nothing about the record format beyond it being a sequence.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import TypeVar

from services.common.errors import InvalidArgument

T = TypeVar("T")


def epoch_permutation(n: int, seed: int, stage: int | str, epoch: int) -> list[int]:
    """The order of the n records in `epoch` of `stage`: a Fisher-Yates shuffle seeded by
    sha256(f"{seed}/{stage}/{epoch}") — stable across Python versions and processes."""
    digest = hashlib.sha256(f"{seed}/{stage}/{epoch}".encode()).digest()
    order = list(range(n))
    random.Random(int.from_bytes(digest[:8], "little")).shuffle(order)
    return order


def draw_indices(n: int, seed: int, stage: int | str, step: int, batch_size: int) -> list[int]:
    """Record indices of `step`: positions p in [step·B, (step+1)·B) map to perm_{p // n}[p mod n]."""
    if n <= 0:
        raise InvalidArgument("records", "no task records to draw from (the stage's data is empty)")
    if batch_size <= 0:
        raise InvalidArgument("batch_size", f"must be >= 1 (got {batch_size})")
    if step < 0:
        raise InvalidArgument("step", f"must be >= 0 (got {step})")
    out: list[int] = []
    perms: dict[int, list[int]] = {}
    for pos in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(pos, n)
        if epoch not in perms:
            perms[epoch] = epoch_permutation(n, seed, stage, epoch)
        out.append(perms[epoch][offset])
    return out


def draw_batch(records: Sequence[T], seed: int, stage: int | str, step: int, batch_size: int) -> list[T]:
    """The records of `step` (see draw_indices); a batch larger than the data wraps into the next epoch."""
    return [records[i] for i in draw_indices(len(records), seed, stage, step, batch_size)]


def data_cursor(stage: int | str, step: int) -> str:
    """The trainer's opaque data cursor after `step` of `stage` (enough to redraw the next batch)."""
    return f"stage={stage};step={step + 1}"
