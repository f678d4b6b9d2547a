"""The trainer computes logits only from the first loss position: same log-probs, less work."""

from __future__ import annotations

import torch

from services.trainer.engine import logits_start


def test_logits_start_is_one_before_the_earliest_loss_token():
    mask = torch.tensor([[0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 1, 1]])
    assert logits_start(mask) == 2
    assert logits_start(torch.tensor([[1, 1, 0]])) == 0
    assert logits_start(torch.zeros(2, 5, dtype=torch.long)) == 4  # nothing to learn: keep one column


def test_kept_logits_give_the_same_token_logprobs_as_the_full_forward(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    torch.manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (3, 12))
    mask = torch.zeros_like(ids)
    mask[0, 5:], mask[1, 7:], mask[2, 9:11] = 1, 1, 1
    start = logits_start(mask)
    with torch.no_grad():
        full = model(input_ids=ids).logits.float().log_softmax(-1)
        kept = model(input_ids=ids, logits_to_keep=ids.shape[1] - start).logits.float().log_softmax(-1)
    want = full[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)[:, start:]
    got = kept[:, :-1].gather(-1, ids[:, start + 1:, None]).squeeze(-1)
    assert kept.shape[1] == ids.shape[1] - start
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
