"""Decoding a TrainBatch: every bad input is refused naming its field; shards and micro-batches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.common import codec
from services.common.errors import InvalidArgument
from services.common.pb import trainer_pb2
from services.trainer.batch import decode_batch, decode_params, lookup_loss
from tests.trainer.builders import batch, prompt_masks, request_batch, token_rows

VOCAB, MAX_LEN, PAD = 1000, 64, 0
LENGTHS = (8, 12, 5)


def decode(loss: str, msg, params=None):
    spec = lookup_loss(loss)
    p = decode_params(params or trainer_pb2.LossParams(), spec)
    return decode_batch(msg, spec, p, VOCAB, MAX_LEN, PAD)


def test_decodes_padded_tensors_with_column_zero_untrained():
    b = decode("grpo", request_batch("grpo"))
    assert b.input_ids.shape == (3, 12) and b.input_ids.dtype == torch.long
    assert b.attention_mask.sum(dim=1).tolist() == list(LENGTHS)
    assert b.input_ids[2, 5:].eq(PAD).all() and b.loss_mask[2, 5:].eq(0).all()
    assert b.loss_mask[:, 0].eq(0).all() and b.loss_mask.sum().item() == sum(n - 3 for n in LENGTHS)
    assert b.advantages.shape == (3,) and b.teacher_logprobs is None


def test_first_token_never_trained_even_when_masked_in():
    rows = token_rows(0)
    b = decode("sft", batch(rows, [np.ones(len(r), np.int32) for r in rows]))
    assert b.loss_mask[:, 0].eq(0).all() and b.loss_mask.sum().item() == sum(LENGTHS) - 3


def test_bt_without_mask_scores_whole_rows_and_decodes_pairs():
    b = decode("bt", request_batch("bt", lengths=(4, 6, 3, 5)))
    assert b.pairs.tolist() == [[0, 1], [2, 3]]


rows, masks = token_rows(0), prompt_masks(LENGTHS)
BAD = [
    ("sft", trainer_pb2.TrainBatch(), None, "batch.loss_mask"),
    ("sft", batch([], []), None, "batch.loss_mask"),
    ("bt", batch([]), None, "batch.preference_pairs"),
    ("sft", batch([rows[0], np.array([], np.int32)], [masks[0], np.array([], np.int32)]), None, "batch.input_ids"),
    ("sft", batch([np.r_[rows[0], VOCAB]], [np.r_[masks[0], 1]]), None, "batch.input_ids"),
    ("sft", batch([np.r_[rows[0], -1]], [np.r_[masks[0], 1]]), None, "batch.input_ids"),
    ("sft", batch([np.ones(MAX_LEN + 1, np.int32)], [np.ones(MAX_LEN + 1, np.int32)]), None, "batch.input_ids"),
    ("sft", batch(rows, masks[:2]), None, "batch.loss_mask"),
    ("sft", batch(rows, [masks[0], masks[1], masks[2][:-1]]), None, "batch.loss_mask"),
    ("sft", batch(rows, [m * 2 for m in masks]), None, "batch.loss_mask"),
    ("sft", batch(rows, [np.r_[1, np.zeros(len(r) - 1, np.int32)] for r in rows]), None, "batch.loss_mask"),
    ("grpo", batch(rows, masks), None, "batch.advantages"),
    ("grpo", batch(rows, masks, advantages=codec.encode([[1.0, 2.0]], "float32")), None, "batch.advantages"),
    ("grpo", batch(rows, masks, advantages=codec.encode([[1.0], [2.0], [3.0]], "float32")), None, "batch.advantages"),
    ("grpo", batch(rows, masks, advantages=codec.encode([[1.0, float("nan"), 0.0]], "float32")), None, "batch.advantages"),
    ("grpo", request_batch("grpo"), trainer_pb2.LossParams(kl_coef=0.1), "batch.reference_logprobs"),
    ("mopd", batch(rows, masks, inference_logprobs=-1.0), None, "batch.teacher_logprobs"),
    ("mopd", batch(rows, masks, inference_logprobs=-1.0, teacher_logprobs=float("inf")), None, "batch.teacher_logprobs"),
    ("mopd", batch(rows, masks, inference_logprobs=float("nan"), teacher_logprobs=-1.0), None, "batch.inference_logprobs"),
    ("mopd", batch(rows, masks, inference_logprobs=0.5, teacher_logprobs=-1.0), None, "batch.inference_logprobs"),
    ("mopd", batch(rows, masks, inference_logprobs=-1.0, teacher_logprobs=codec.encode([[-1.0]], "float32")), None, "batch.teacher_logprobs"),
    ("mopd", batch(rows, masks, inference_logprobs=-1.0, teacher_logprobs=-1.0), trainer_pb2.LossParams(grpo_alpha=1.0), "batch.advantages"),
    ("sft", trainer_pb2.TrainBatch(input_ids=codec.encode(rows, "float32"), loss_mask=codec.encode(masks, "int32")), None, "batch.input_ids"),
    ("sft", trainer_pb2.TrainBatch(input_ids=trainer_pb2.TrainBatch().input_ids.__class__(dtype=1, data=b"\0\0", lengths=[1]), loss_mask=codec.encode([[0]], "int32")), None, "batch.input_ids"),
    ("bt", batch(rows, preference_pairs=codec.encode([[0, 1, 2]], "int32")), None, "batch.preference_pairs"),
    ("bt", batch(rows, preference_pairs=codec.encode([[0, 3]], "int32")), None, "batch.preference_pairs"),
    ("bt", batch(rows, preference_pairs=codec.encode([[1, 1]], "int32")), None, "batch.preference_pairs"),
    ("bt", batch(rows, preference_pairs=codec.encode([[0, 1], [1, 2]], "int32")), None, "batch.preference_pairs"),
    ("sft", request_batch("sft"), trainer_pb2.LossParams(kl_coef=-1.0), "params.kl_coef"),
    ("sft", request_batch("sft"), trainer_pb2.LossParams(eps_low=2.0, eps_high=2.0), "params.eps_high"),
    ("sft", request_batch("sft"), trainer_pb2.LossParams(grpo_alpha=float("nan")), "params.grpo_alpha"),
    ("grpo", request_batch("grpo"), trainer_pb2.LossParams(temperature=-0.5), "params.temperature"),
    ("grpo", request_batch("grpo"), trainer_pb2.LossParams(top_p=0.0), "params.top_p"),
    ("grpo", request_batch("grpo"), trainer_pb2.LossParams(top_p=1.5), "params.top_p"),
    ("grpo", request_batch("grpo"), trainer_pb2.LossParams(top_k=-1), "params.top_k"),
    ("sft", request_batch("sft"), trainer_pb2.LossParams(temperature=0.7), "params.temperature"),
    ("bt", request_batch("bt"), trainer_pb2.LossParams(top_p=0.9), "params.top_p"),
    ("grpo", request_batch("grpo"), trainer_pb2.LossParams(kl_estimator="k4"), "params.kl_estimator"),
    ("grpo", request_batch("grpo"), trainer_pb2.LossParams(kl_clamp=0.0), "params.kl_clamp"),
    ("grpo", request_batch("grpo"), trainer_pb2.LossParams(tis_cap=-1.0), "params.tis_cap"),
    ("grpo", request_batch("grpo"), trainer_pb2.LossParams(tis_cap=2.0), "batch.inference_logprobs"),
]


def test_new_params_decode_with_their_defaults():
    d = decode_params(trainer_pb2.LossParams(), lookup_loss("grpo"))
    assert (d.temperature, d.top_p, d.top_k, d.kl_estimator, d.kl_clamp, d.tis_cap) == (1.0, 1.0, 0, "k2", None, None)
    msg = trainer_pb2.LossParams(temperature=0.7, top_p=0.9, top_k=20, kl_estimator="k3", kl_clamp=10.0, tis_cap=2.0)
    d = decode_params(msg, lookup_loss("mopd"))
    assert (d.top_k, d.kl_estimator, d.kl_clamp, d.tis_cap) == (20, "k3", 10.0, 2.0)
    assert (d.temperature, d.top_p) == pytest.approx((0.7, 0.9))


@pytest.mark.parametrize(("loss", "msg", "params", "field"), BAD, ids=[f"{i}-{b[3]}" for i, b in enumerate(BAD)])
def test_bad_input_names_the_field(loss, msg, params, field):
    with pytest.raises(InvalidArgument) as err:
        decode(loss, msg, params)
    assert err.value.field == field, str(err.value)


def test_unknown_loss_names_loss():
    with pytest.raises(InvalidArgument, match="dpo") as err:
        lookup_loss("dpo")
    assert err.value.field == "loss"


def test_shards_split_rows_round_robin_and_pad_empty_ranks():
    b = decode("sft", request_batch("sft"))
    s0, s1 = b.shard(0, 2, by_pairs=False), b.shard(1, 2, by_pairs=False)
    assert s0.rows == 2 and s1.rows == 1
    assert s0.attention_mask.sum(dim=1).tolist() == [8, 5] and s0.input_ids.shape[1] == 8
    assert torch.equal(s1.input_ids[0], b.input_ids[1])
    assert s0.loss_mask.sum() + s1.loss_mask.sum() == b.loss_mask.sum()
    empty = b.shard(5, 6, by_pairs=False)
    assert empty.rows == 1 and empty.loss_mask.sum() == 0


def test_pair_shards_keep_pairs_together():
    b = decode("bt", request_batch("bt", lengths=(4, 6, 3, 5)))
    s1 = b.shard(1, 2, by_pairs=True)
    assert s1.pairs.tolist() == [[0, 1]] and s1.attention_mask.sum(dim=1).tolist() == [3, 5]
    assert b.shard(2, 3, by_pairs=True).pairs.shape == (0, 2)


def test_micro_batches_respect_the_token_budget_and_cover_every_row():
    b = decode("sft", request_batch("sft", lengths=(8, 12, 5, 7)))
    micro = b.micro_batches(max_tokens=16, by_pairs=False)
    assert [m.rows for m in micro] == [1, 1, 2]
    assert all(m.rows * m.input_ids.shape[1] <= 16 or m.rows == 1 for m in micro)
    assert sum(float(m.loss_mask.sum()) for m in micro) == float(b.loss_mask.sum())
    assert b.micro_batches(0, by_pairs=False) == [b]
