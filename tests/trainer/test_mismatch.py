"""The step's train/inference mismatch metrics: a table of hand-worked cases, and splits that agree."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from services.trainer import mismatch

D = torch.float64


def t(rows):
    return torch.tensor(rows, dtype=D)


CASES = [
    # (log pi_train, log pi_inf, mask, expected metrics)
    ([[0.0, -1.0, -2.0]], [[0.0, -1.0, -2.0]], [[0, 1, 1]],
     dict(mismatch_mean=0.0, mismatch_p99=0.0, mismatch_max=0.0, window_dropped_fraction=0.0, kl_inf_train=0.0)),
    ([[0.0, -1.0, -2.0]], [[9.0, -1.5, -1.0]], [[0, 1, 1]],  # d = 0.5, -1.0 (r = e^-1 < 0.5: outside)
     dict(mismatch_mean=0.75, mismatch_p99=0.5 + 0.99 * 0.5, mismatch_max=1.0, window_dropped_fraction=0.5, kl_inf_train=0.5)),
    ([[0.0, -1.0, 0.0], [0.0, -3.0, -1.0]], [[0.0, -2.0, 0.0], [0.0, -2.0, -1.0]], [[0, 1, 0], [0, 1, 1]],
     # d = 1.0 | -1.0, 0.0; per-sequence sums of -d: -1.0, 1.0; r = e, e^-1, 1: two outside (0.5, 2)
     dict(mismatch_mean=2 / 3, mismatch_p99=1.0, mismatch_max=1.0, window_dropped_fraction=2 / 3, kl_inf_train=0.0)),
    ([[0.0, -1.0], [0.0, -2.0]], [[0.0, -1.0 - math.log(3)], [0.0, -2.0]], [[0, 1], [0, 0]],  # a sequence with no loss token is no sequence
     dict(mismatch_mean=math.log(3), mismatch_p99=math.log(3), mismatch_max=math.log(3), window_dropped_fraction=1.0,
          kl_inf_train=-math.log(3))),
]


@pytest.mark.parametrize("train, inf, mask, expected", CASES)
def test_metric_table(train, inf, mask, expected):
    got = mismatch.summarize(mismatch.collect(t(train), t(inf), t(mask)))
    assert got.keys() == set(mismatch.METRICS)
    assert got == pytest.approx(expected)


def test_no_valid_token_gives_no_metrics():
    assert mismatch.summarize(mismatch.collect(t([[0.0, -1.0]]), t([[0.0, -2.0]]), t([[0, 0]]))) == {}


def test_window_is_the_steps():
    piece = mismatch.collect(t([[0.0, -1.0]]), t([[0.0, -1.0 - math.log(1.5)]]), t([[0, 1]]))  # r = 1.5
    assert mismatch.summarize(piece)["window_dropped_fraction"] == 0.0
    assert mismatch.summarize(piece, 0.8, 1.25)["window_dropped_fraction"] == 1.0


def test_pieces_give_the_whole_batch_figures():
    """Row splits (micro-batches, ranks) combined in any order give the figures of the whole batch."""
    gen = torch.Generator().manual_seed(0)
    train = -torch.rand(9, 20, generator=gen, dtype=D) * 3
    inf = train + torch.randn(9, 20, generator=gen, dtype=D) * 0.3
    mask = (torch.rand(9, 20, generator=gen) > 0.3).to(D)
    whole = mismatch.summarize(mismatch.collect(train, inf, mask))
    parts = [mismatch.collect(train[i], inf[i], mask[i]) for i in ([4, 0], [8], [1, 2, 3], [5, 6, 7])]
    assert mismatch.summarize(mismatch.combine(parts)) == pytest.approx(whole)
    a = np.abs((train - inf)[mask > 0].numpy())
    assert whole["mismatch_p99"] == pytest.approx(np.sort(a)[int(0.99 * (a.size - 1))], abs=np.ptp(a) / 10)
