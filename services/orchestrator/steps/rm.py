"""The reward-model step (`rm` stages), one phase: update = Bradley–Terry on preference pairs, on the
reward-model trainer.

Rows alternate chosen / rejected (prompt + response rendered with the chat template, non-thinking);
`preference_pairs` names them. The stage's first step starts the reward model from the stage's
`init` weights (by default the policy's: a reward model that already reads the language learns from
a few hundred pairs to rank more than rudeness) with a fresh head and optimizer. The policy is
untouched: weights are published only at the stage's last step, as the reward model the `rlhf`
domain is scored with afterwards.
"""

from __future__ import annotations

from services.common import codec
from services.common.pb import trainer_pb2
from services.orchestrator import datasets
from services.orchestrator.batches import data_cursor, draw_batch
from services.orchestrator.context import RunContext
from services.orchestrator.steps.base import Phase, StepKind, batch_message
from services.orchestrator.weights import current_version, weights_ref


def pair_rows(tokenizer, records, max_len: int) -> list[list[int]]:
    """[chosen_0, rejected_0, chosen_1, ...] token rows, each cut from the left to `max_len`."""
    rows = []
    for r in records:
        prompt = [m.model_dump(include={"role", "content"}) for m in r.messages]
        for answer in (r.chosen, r.rejected):
            messages = [*prompt, {"role": "assistant", "content": answer or ""}]
            text = tokenizer.apply_chat_template(messages, tokenize=False, enable_thinking=False)
            ids = tokenizer.encode(text, add_special_tokens=False)
            rows.append(ids[-max_len:])
    return rows


def init_weights(ctx: RunContext, init: str) -> tuple[str, str]:
    """(uri, sha256) of the weights a reward model starts from: `policy` = the run's current policy
    version (what the stages so far trained), `model` = the cascade's initial model, else a folder
    (not checksummed)."""
    if init == "policy":
        return weights_ref(ctx, current_version(ctx))
    if init == "model":
        return weights_ref(ctx, 0)
    return init, ""


class RmStep(StepKind):
    publishes_every_step = False
    publishes_policy = False
    evaluates = False

    @property
    def phases(self) -> tuple[Phase, ...]:
        return (Phase("update", "train", self.update),)

    def trainer(self, ctx: RunContext):
        return ctx.clients.rm_trainer

    def train(self, ctx: RunContext, stage: int, step: int) -> None:
        ctx.ledger.begin_step(ctx.run_id, stage, step)
        super().train(ctx, stage, step)

    def train_request(self, ctx: RunContext, stage: int, step: int):
        cfg = ctx.stage(stage)
        pool = datasets.preference_pairs(ctx.data_dir(stage), list(cfg.domains))
        records = draw_batch(pool, ctx.config.seed, stage, step, cfg.batch_size)
        rows = pair_rows(ctx.tokenizer, records, cfg.max_seq_len)
        batch = batch_message(rows, [[1] * len(r) for r in rows])
        batch.preference_pairs.CopyFrom(codec.encode([list(range(len(rows)))], "int32"))
        request = trainer_pb2.TrainStepRequest(loss="bt", batch=batch, data_cursor=data_cursor(stage, step))
        if step == 0:
            uri, sha = init_weights(ctx, cfg.init)
            request.init.CopyFrom(trainer_pb2.InitWeights(uri=uri, sha256=sha))
        return request, {"pairs": float(len(records))}

    def record_published(self, ctx: RunContext, stage: int, ref) -> None:
        """A reward model is not a policy version: it is recorded as the stage's output."""
        ctx.artifacts.put(f"reward-models/{ctx.stage(stage).output}", "weights",
                          {"version": int(ref.version), "uri": ref.uri, "sha256": ref.sha256})
