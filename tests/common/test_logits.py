"""The shared sampling distribution: the policy's filter, and the trainer's view of the sampled token."""

from __future__ import annotations

import torch

from services.common.logits import filter_logits, sampled_token_logits


def test_sampled_token_is_kept_even_where_the_filter_drops_it():
    logits = torch.tensor([[4.0, 3.0, 0.0, -1.0]])
    z = sampled_token_logits(logits, torch.tensor([3]), 0.5, 2, 1.0)  # top-2 drops token 3: it is put back
    assert torch.isfinite(z[0, [0, 1, 3]]).all() and z[0, 2] == float("-inf")
    assert z[0, 3] == -2.0 and z[0, 0] == 8.0
    assert torch.equal(sampled_token_logits(logits, torch.tensor([0]), 0.5, 2, 1.0), filter_logits(logits, 0.5, 2, 1.0))


def test_greedy_and_unit_temperature_are_the_plain_logits():
    logits = torch.randn(3, 9)
    for t in (0.0, 1.0):
        assert torch.equal(sampled_token_logits(logits, torch.zeros(3, dtype=torch.long), t, 0, 1.0), logits)
    assert torch.allclose(sampled_token_logits(logits, torch.zeros(3, dtype=torch.long), 0.7, 0, 1.0), logits / 0.7)
