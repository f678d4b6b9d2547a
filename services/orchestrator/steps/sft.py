"""The SFT step, one phase: update = draw conversations -> tokenize with the assistant mask -> train.

Thinking mode follows each conversation: one with a `<think>` block is rendered in thinking mode,
one without in non-thinking mode, so the masked tokens are exactly what the policy generates in
that mode. Rows longer than `max_seq_len` are cut; packing (`packing`, sent with TrainStep) is the
trainer's job. Weights are published only where they are read (the stage's end, an evaluation).
"""

from __future__ import annotations

from services.common.chat_template import assistant_mask
from services.common.pb import trainer_pb2
from services.orchestrator import datasets
from services.orchestrator.batches import data_cursor, draw_batch
from services.orchestrator.context import RunContext
from services.orchestrator.overlap import TOKENIZER_LOCK
from services.orchestrator.steps.base import Phase, StepKind, batch_message


def has_reasoning(messages: list[dict]) -> bool:
    return any(m["role"] == "assistant" and "</think>" in (m.get("content") or "") for m in messages)


def tokenize_conversations(tokenizer, examples: list[dict], max_len: int) -> tuple[list[list[int]], list[list[int]]]:
    """(input ids, loss masks) per conversation, each cut to `max_len` tokens."""
    rows, masks = [], []
    for ex in examples:
        ids, mask = assistant_mask(tokenizer, ex["messages"], thinking=has_reasoning(ex["messages"]),
                                   tools=ex.get("tools") or None)
        rows.append(ids[:max_len])
        masks.append(mask[:max_len])
    return rows, masks


class SftStep(StepKind):
    publishes_every_step = False

    @property
    def phases(self) -> tuple[Phase, ...]:
        return (Phase("update", "train", self.update),)

    def train(self, ctx: RunContext, stage: int, step: int) -> None:
        ctx.ledger.begin_step(ctx.run_id, stage, step)
        super().train(ctx, stage, step)

    def prepare(self, ctx: RunContext, stage: int, step: int) -> tuple[list[list[int]], list[list[int]]]:
        """The step's conversations drawn and tokenised: (rows, loss masks)."""
        cfg = ctx.stage(stage)
        pool = datasets.sft_examples(ctx.data_dir(stage), list(cfg.domains))
        examples = draw_batch(pool, ctx.config.seed, stage, step, cfg.batch_size)
        with TOKENIZER_LOCK:
            return tokenize_conversations(ctx.tokenizer, examples, cfg.max_seq_len)

    def train_request(self, ctx: RunContext, stage: int, step: int):
        cfg = ctx.stage(stage)
        rows, masks = self.prepared(ctx, stage, step)
        request = trainer_pb2.TrainStepRequest(loss="sft", batch=batch_message(rows, masks),
                                               data_cursor=data_cursor(stage, step), packing=cfg.packing)
        return request, {"sequences": float(len(rows)), "tokens": float(sum(map(len, rows)))}
