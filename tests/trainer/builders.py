"""Small builders of TrainBatch messages for the trainer tests and benchmarks, and a probe of AdamW's state."""

from __future__ import annotations

import numpy as np

from services.common import codec
from services.common.pb import trainer_pb2


def token_rows(seed: int, lengths=(8, 12, 5), vocab: int = 1000) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=n).astype(np.int32) for n in lengths]


def prompt_masks(lengths, prompt: int = 3) -> list[np.ndarray]:
    """0 on the first `prompt` tokens of a row, 1 on the rest (the response)."""
    return [np.r_[np.zeros(prompt, np.int32), np.ones(n - prompt, np.int32)] for n in lengths]


def per_token(lengths, value: float) -> list[np.ndarray]:
    return [np.full(n, value, np.float32) for n in lengths]


def batch(rows, masks=None, **fields) -> trainer_pb2.TrainBatch:
    """input_ids + loss_mask (+ named fields already encoded, or float rows for per-token fields)."""
    lengths = [len(r) for r in rows]
    msg = trainer_pb2.TrainBatch(input_ids=codec.encode(rows, "int32"))
    if masks is not None:
        msg.loss_mask.CopyFrom(codec.encode(masks, "int32"))
    for name, value in fields.items():
        if isinstance(value, float):
            value = codec.encode(per_token(lengths, value), "float32")
        getattr(msg, name).CopyFrom(value)
    return msg


def request_batch(loss: str, seed: int = 0, lengths=(8, 12, 5), vocab: int = 1000) -> trainer_pb2.TrainBatch:
    """A valid batch for `loss` (random tokens, prompt of 3 tokens, plausible log-probs)."""
    rows = token_rows(seed, lengths, vocab)
    masks = prompt_masks(lengths)
    rng = np.random.default_rng(seed + 1)
    if loss == "sft":
        return batch(rows, masks)
    if loss == "grpo":
        return batch(rows, masks, advantages=codec.encode([rng.normal(size=len(rows))], "float32"))
    if loss == "mopd":
        return batch(rows, masks, inference_logprobs=-7.5, teacher_logprobs=-3.0)
    if loss == "bt":
        pairs = [i for k in range(len(rows) // 2) for i in (2 * k, 2 * k + 1)]
        return batch(rows, preference_pairs=codec.encode([pairs], "int32"))
    raise ValueError(loss)


def adam_steps(coordinator) -> set[int]:
    """The distinct AdamW step counts held by a trainer's optimizer (empty before its first step)."""
    from services.trainer.engine import torch_optimizer

    return {int(s["step"]) for s in torch_optimizer(coordinator.core.engine.engine.optimizer).state.values()}
