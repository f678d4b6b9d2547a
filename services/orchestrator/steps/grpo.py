"""The GRPO step (DESIGN.md section 1): generate -> score -> advantages -> train -> publish -> sync.

Samples whose verifier failed (`error` verdict) are masked out of the loss and counted; dynamic
filtering and the overlong rule come from the stage config (services.orchestrator.advantages).
With `kl_coef > 0`, reference log-probs come from a teacher service serving the stage's start
checkpoint under the domain name `reference/<stage name>`.
"""

from __future__ import annotations

import time

import numpy as np

from services.common.pb import trainer_pb2
from services.orchestrator import datasets, rollout
from services.orchestrator.advantages import compute_group_batch
from services.orchestrator.batches import data_cursor, draw_batch
from services.orchestrator.context import RunContext
from services.orchestrator.steps.base import StepKind, batch_message, generate_current, prompt_completion_rows


def reference_domain(stage_name: str) -> str:
    return f"reference/{stage_name}"


class RolloutStep(StepKind):
    """Shared by GRPO and MOPD: draw prompts and sample G responses each."""

    def records(self, ctx: RunContext, stage: int, step: int):
        cfg = ctx.stage(stage)
        pool = datasets.tasks(ctx.data_dir(stage), list(cfg.domains), "train")
        return draw_batch(pool, ctx.config.seed, stage, step, cfg.batch_size)

    def generate(self, ctx: RunContext, stage: int, step: int) -> None:
        record = self.begin(ctx, stage, step)
        if record.reached("generated"):
            return
        cfg = ctx.stage(stage)
        start = time.perf_counter()
        records = self.records(ctx, stage, step)
        seed = ctx.config.seed * 1_000_003 + stage * 10_007 + step
        out = generate_current(ctx, records, cfg.rollouts_per_prompt, cfg.sampling, seed)
        out["task_ids"] = [r.id for r in records]
        ctx.artifacts.put(record.step_id, "rollouts", out)
        tokens = sum(len(t) for t in out["token_ids"])
        ctx.ledger.advance(record.step_id, "generated", seconds=time.perf_counter() - start,
                           metrics={"generated_tokens": tokens, "samples": len(out["texts"]),
                                    "truncated_fraction": float(np.mean(out["truncated"]))})

    def score_rewards(self, ctx: RunContext, stage: int, step: int) -> dict:
        cfg = ctx.stage(stage)
        sid = ctx.step_id(stage, step)
        if ctx.artifacts.has(sid, "scores"):
            return ctx.artifacts.get(sid, "scores")
        out = ctx.artifacts.get(sid, "rollouts")
        records = self.records(ctx, stage, step)
        scores = rollout.score(ctx.clients.reward, records, out["texts"], cfg.rollouts_per_prompt)
        ctx.artifacts.put(sid, "scores", scores)
        return scores


class GrpoStep(RolloutStep):
    chain = (("rollout", "generate"), ("reward", "score"), ("train", "update"))

    def score(self, ctx: RunContext, stage: int, step: int) -> None:
        sid = ctx.step_id(stage, step)
        if ctx.ledger.step(sid).reached("scored"):
            return
        start = time.perf_counter()
        scores = self.score_rewards(ctx, stage, step)
        cfg = ctx.stage(stage)
        if cfg.kl_coef > 0:
            self.reference(ctx, stage, step)
        verdicts = scores["verdicts"]
        metrics = {"reward_mean": float(np.mean(scores["rewards"])) if scores["rewards"] else 0.0}
        for v in set(verdicts):
            metrics[f"verdict/{v}"] = float(verdicts.count(v))
        ctx.ledger.advance(sid, "scored", metrics=metrics, seconds=time.perf_counter() - start)

    def reference(self, ctx: RunContext, stage: int, step: int) -> None:
        sid = ctx.step_id(stage, step)
        if ctx.artifacts.has(sid, "reference"):
            return
        out = ctx.artifacts.get(sid, "rollouts")
        n = ctx.stage(stage).rollouts_per_prompt
        domain = reference_domain(ctx.stage(stage).name)
        lps = rollout.teacher_logprobs(ctx.clients.teacher(domain), domain, out["prompt_ids"], out["token_ids"],
                                       [i // n for i in range(len(out["token_ids"]))])
        ctx.artifacts.put(sid, "reference", lps)

    def train_request(self, ctx: RunContext, stage: int, step: int):
        cfg = ctx.stage(stage)
        sid = ctx.step_id(stage, step)
        out, scores = ctx.artifacts.get(sid, "rollouts"), ctx.artifacts.get(sid, "scores")
        n = cfg.rollouts_per_prompt
        shape = (len(out["texts"]) // n, n)
        group = compute_group_batch(
            np.array(scores["rewards"]).reshape(shape),
            np.array([v == "error" for v in scores["verdicts"]]).reshape(shape),
            np.array(out["truncated"]).reshape(shape),
            overlong=cfg.overlong, dynamic_filtering=cfg.dynamic_filtering,
        )
        keep = group.loss_mask.reshape(-1)
        if not keep.any():
            return None, group.metrics
        rows, masks, inf = prompt_completion_rows(out["prompt_ids"], out["token_ids"], out["logprobs"], keep, n)
        ref = None
        if cfg.kl_coef > 0:
            lps = ctx.artifacts.get(sid, "reference")
            ref = [[0.0] * len(out["prompt_ids"][s // n]) + list(lps[s]) for s in np.flatnonzero(keep)]
        batch = batch_message(rows, masks, inference_logprobs=inf, reference_logprobs=ref)
        batch.advantages.CopyFrom(_one_row(group.advantages.reshape(-1)[keep]))
        params = trainer_pb2.LossParams(kl_coef=cfg.kl_coef)
        request = trainer_pb2.TrainStepRequest(loss="grpo", batch=batch, params=params)
        request.data_cursor = data_cursor(stage, step)
        return request, group.metrics


def _one_row(values: np.ndarray):
    from services.common import codec

    return codec.encode([values.astype(np.float32)], "float32")
