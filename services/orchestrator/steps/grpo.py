"""The GRPO step (DESIGN.md section 1), in the order it runs: generate -> score -> update.

1. generate (queue rollout, steps.rollouts): draw the step's prompts once, sample G responses each.
2. score (queue reward): every sample scored by its verifier; with `kl_coef > 0`, the reference's
   log-probs of every completion from a teacher service serving the stage's start checkpoint under
   the domain `reference/<stage name>` (loaded by `start_stage`), while the verifiers score.
3. update (queue train): advantages.compute_group_batch (error masking, the overlong rule, group
   advantages, dynamic filtering) -> TrainStep(loss grpo) -> PublishWeights -> the policy loads them.
"""

from __future__ import annotations

import time

import numpy as np

from services.common.pb import reward_pb2, teacher_pb2, trainer_pb2
from services.orchestrator import rollout
from services.orchestrator.advantages import compute_group_batch
from services.orchestrator.batches import data_cursor
from services.orchestrator.context import RunContext
from services.orchestrator.overlap import together
from services.orchestrator.steps.base import Phase, batch_message, sample_row
from services.orchestrator.steps.rollouts import (
    RolloutStep,
    errored,
    prompt_completion_rows,
    prompt_padded,
    reward_metrics,
    sample_count,
    sampling_params,
    trajectory_logprobs,
    trajectory_rows,
)
from services.orchestrator.weights import current_version


def reference_domain(stage_name: str) -> str:
    """The teacher-service domain the KL reference of GRPO stage `stage_name` is served under."""
    return f"reference/{stage_name}"


class GrpoStep(RolloutStep):
    @property
    def phases(self) -> tuple[Phase, ...]:
        return (Phase("generate", "rollout", self.generate),
                Phase("score", "reward", self.score),
                Phase("update", "train", self.update))

    def start_stage(self, ctx: RunContext, stage: int) -> None:
        """The KL reference (the weights the stage starts from) and the rlhf reward model, when set."""
        cfg = ctx.stage(stage)
        if cfg.kl_coef > 0:
            domain = reference_domain(cfg.name)
            ctx.clients.teacher(domain).call_each("LoadTeacher", teacher_pb2.LoadTeacherRequest(
                domain=domain, uri=ctx.weights_uri(current_version(ctx))))
        if cfg.reward_model:
            load_reward_model(ctx, cfg.reward_model)

    # generate: RolloutStep.generate

    def score(self, ctx: RunContext, stage: int, step: int) -> None:
        """Verifier scores (and reference log-probs with KL, the reward and the reference service
        scoring at once: overlap); phase `scored` with reward_mean and verdicts once both are in."""
        sid = ctx.step_id(stage, step)
        if ctx.ledger.step(sid).reached("scored"):
            return
        start = time.perf_counter()
        calls = [lambda: self.verifier_scores(ctx, stage, step)]
        if ctx.stage(stage).kl_coef > 0:
            calls.append(lambda: self.reference(ctx, stage, step))
        scores = together(calls, ctx.settings.overlap)[0]
        ctx.ledger.advance(sid, "scored", metrics=reward_metrics(scores), seconds=time.perf_counter() - start)

    def reference(self, ctx: RunContext, stage: int, step: int) -> None:
        """log π_ref of every completion token (artefact `reference`)."""
        sid = ctx.step_id(stage, step)
        if ctx.artifacts.has(sid, "reference"):
            return
        out = ctx.artifacts.get(sid, "rollouts")
        n = ctx.stage(stage).rollouts_per_prompt
        domain = reference_domain(ctx.stage(stage).name)
        if ctx.stage(stage).env:
            by_sample = trajectory_logprobs(ctx.clients.teacher(domain), domain, out, range(sample_count(out)))
            ctx.artifacts.put(sid, "reference", [by_sample[s] for s in range(sample_count(out))])
            return
        lps = rollout.teacher_logprobs(ctx.clients.teacher(domain), domain, out["prompt_ids"], out["token_ids"],
                                       [i // n for i in range(len(out["token_ids"]))])
        ctx.artifacts.put(sid, "reference", lps)

    # update: StepKind.update -> train (this request) -> publish -> sync

    def train_request(self, ctx: RunContext, stage: int, step: int):
        cfg = ctx.stage(stage)
        sid = ctx.step_id(stage, step)
        out, scores = ctx.artifacts.get(sid, "rollouts"), ctx.artifacts.get(sid, "scores")
        n = cfg.rollouts_per_prompt
        shape = (sample_count(out) // n, n)
        group = compute_group_batch(
            np.array(scores["rewards"]).reshape(shape), errored(scores).reshape(shape),
            np.array(out["truncated"]).reshape(shape),
            overlong=cfg.overlong, dynamic_filtering=cfg.dynamic_filtering,
        )
        keep = group.loss_mask.reshape(-1)
        if not keep.any():
            return None, group.metrics
        ref = None
        if cfg.env:  # whole trajectories: env tokens in the row, out of the mask
            rows, masks, inf = trajectory_rows(out, keep)
            if cfg.kl_coef > 0:
                ref = [ctx.artifacts.get(sid, "reference")[s] for s in np.flatnonzero(keep)]
        else:
            rows, masks, inf = prompt_completion_rows(out["prompt_ids"], out["token_ids"], out["logprobs"], keep, n)
            if cfg.kl_coef > 0:
                ref = prompt_padded(out["prompt_ids"], ctx.artifacts.get(sid, "reference"), keep, n)
        batch = batch_message(rows, masks, inference_logprobs=inf, reference_logprobs=ref)
        batch.advantages.CopyFrom(sample_row(group.advantages.reshape(-1)[keep]))
        params = sampling_params(cfg.sampling)
        params.kl_coef = cfg.kl_coef
        params.kl_estimator = cfg.kl_estimator
        if cfg.kl_clamp is not None:
            params.kl_clamp = cfg.kl_clamp
        if cfg.tis_cap is not None:
            params.tis_cap = cfg.tis_cap
        request = trainer_pb2.TrainStepRequest(loss="grpo", batch=batch, params=params,
                                               data_cursor=data_cursor(stage, step), share_prompts=cfg.share_prompts)
        return request, group.metrics


def load_reward_model(ctx: RunContext, name: str) -> None:
    """The reward service loads an `rm` stage's published model (by output name) or a folder."""
    key = f"reward-models/{name}"
    if ctx.artifacts.has(key, "weights"):
        ref = ctx.artifacts.get(key, "weights")
        uri, sha = ref["uri"], ref["sha256"]
    else:
        uri, sha = name, ""
    ctx.clients.reward.call("LoadRewardModel", reward_pb2.LoadRewardModelRequest(uri=uri, sha256=sha))
