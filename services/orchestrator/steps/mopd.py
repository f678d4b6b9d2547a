"""The MOPD step (Nemotron-Cascade 2 section 4.4): generate -> teacher log-probs -> train -> sync.

Each sample is scored by the teacher of its own domain (prompts shared by their G samples); the
trainer turns log π_teacher − log π_train into the token-level advantage with truncated importance
weights. With `grpo_alpha`, verifier rewards add an outcome advantage (MiMo style).
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from services.common.pb import trainer_pb2
from services.orchestrator import rollout
from services.orchestrator.advantages import compute_group_batch
from services.orchestrator.batches import data_cursor
from services.orchestrator.context import RunContext
from services.orchestrator.steps.base import batch_message, prompt_completion_rows
from services.orchestrator.steps.grpo import RolloutStep


class MopdStep(RolloutStep):
    chain = (("rollout", "generate"), ("teacher", "teach"), ("train", "update"))

    def teach(self, ctx: RunContext, stage: int, step: int) -> None:
        sid = ctx.step_id(stage, step)
        if ctx.ledger.step(sid).reached("scored"):
            return
        start = time.perf_counter()
        cfg = ctx.stage(stage)
        n = cfg.rollouts_per_prompt
        out = ctx.artifacts.get(sid, "rollouts")
        records = self.records(ctx, stage, step)
        if not ctx.artifacts.has(sid, "teacher"):
            by_domain: dict[str, list[int]] = defaultdict(list)
            for i, r in enumerate(records):
                by_domain[r.domain].append(i)
            teacher: list[list[float] | None] = [None] * len(out["token_ids"])
            for domain, prompts in sorted(by_domain.items()):
                samples = [i * n + j for i in prompts for j in range(n)]
                lps = rollout.teacher_logprobs(
                    ctx.clients.teacher(domain), domain,
                    [out["prompt_ids"][i] for i in prompts],
                    [out["token_ids"][s] for s in samples],
                    [k // n for k in range(len(samples))],
                )
                for s, lp in zip(samples, lps):
                    teacher[s] = lp
            ctx.artifacts.put(sid, "teacher", teacher)
        metrics = {}
        if cfg.grpo_alpha:
            scores = self.score_rewards(ctx, stage, step)
            metrics["reward_mean"] = float(np.mean(scores["rewards"]))
        ctx.ledger.advance(sid, "scored", metrics=metrics, seconds=time.perf_counter() - start)

    def train_request(self, ctx: RunContext, stage: int, step: int):
        cfg = ctx.stage(stage)
        sid = ctx.step_id(stage, step)
        n = cfg.rollouts_per_prompt
        out, teacher = ctx.artifacts.get(sid, "rollouts"), ctx.artifacts.get(sid, "teacher")
        keep = np.array([len(t) > 0 for t in out["token_ids"]])
        if cfg.overlong == "filter":
            keep &= ~np.array(out["truncated"])
        metrics: dict[str, float] = {"trained_samples": float(keep.sum())}
        advantages = None
        if cfg.grpo_alpha:
            scores = ctx.artifacts.get(sid, "scores")
            shape = (len(out["texts"]) // n, n)
            group = compute_group_batch(np.array(scores["rewards"]).reshape(shape),
                                        np.array([v == "error" for v in scores["verdicts"]]).reshape(shape),
                                        np.array(out["truncated"]).reshape(shape), overlong=cfg.overlong,
                                        dynamic_filtering=False)
            advantages = group.advantages.reshape(-1)
            keep &= ~np.array([v == "error" for v in scores["verdicts"]])
            metrics.update(group.metrics)
        if not keep.any():
            return None, metrics
        rows, masks, inf = prompt_completion_rows(out["prompt_ids"], out["token_ids"], out["logprobs"], keep, n)
        tea = [[0.0] * len(out["prompt_ids"][s // n]) + list(teacher[s]) for s in np.flatnonzero(keep)]
        batch = batch_message(rows, masks, inference_logprobs=inf, teacher_logprobs=tea)
        if advantages is not None:
            from services.common import codec

            batch.advantages.CopyFrom(codec.encode([advantages[keep].astype(np.float32)], "float32"))
        params = trainer_pb2.LossParams(eps_low=cfg.eps_low, eps_high=cfg.eps_high)
        if cfg.grpo_alpha:
            params.grpo_alpha = cfg.grpo_alpha
        request = trainer_pb2.TrainStepRequest(loss="mopd", batch=batch, params=params,
                                               data_cursor=data_cursor(stage, step))
        return request, metrics
