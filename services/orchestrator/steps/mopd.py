"""The MOPD step (Nemotron-Cascade 2 section 4.4), in the order it runs: generate -> teach -> update.

0. start_stage: each domain's teacher chosen (`teachers: auto`: the best-evaluated earlier
   checkpoint, services.orchestrator.selection) or taken from the map, loaded with LoadTeacher.
1. generate (queue rollout, steps.rollouts): draw the step's prompts once, sample G responses each.
2. teach (queue teacher): log π_teacher of every completion token from the teacher of its prompt's
   domain (prompts shared by their G samples); with `grpo_alpha`, verifier scores too, the reward
   service scoring while the teachers do (services.orchestrator.overlap).
3. update (queue train): advantages.compute_mopd_batch (empty samples, the overlong rule, the
   optional outcome advantage) -> TrainStep(loss mopd): the trainer turns log π_teacher − log π_train
   into the token-level advantage with truncated importance weights -> publish -> the policy loads.
After the stage's start and end evaluations (`remeasure_teachers`), the teachers and then the student
are drawn once more with one fresh seed (services.orchestrator.evals).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict

import numpy as np

from services.common.pb import teacher_pb2, trainer_pb2
from services.orchestrator import evals, rollout
from services.orchestrator.advantages import compute_mopd_batch
from services.orchestrator.batches import data_cursor
from services.orchestrator.context import RunContext
from services.orchestrator.overlap import together
from services.orchestrator.selection import pick_best
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
from services.orchestrator.vocabulary import check_teacher_vocabulary


class MopdStep(RolloutStep):
    @property
    def phases(self) -> tuple[Phase, ...]:
        return (Phase("generate", "rollout", self.generate),
                Phase("teach", "teacher", self.teach),
                Phase("update", "train", self.update))

    def start_stage(self, ctx: RunContext, stage: int) -> None:
        load_teachers(ctx, stage)

    # generate: RolloutStep.generate

    def teach(self, ctx: RunContext, stage: int, step: int) -> None:
        """Teacher log-probs per sample (artefact `teacher`) and, with grpo_alpha, verifier scores, the
        teacher and the reward service scoring the batch at once (overlap); phase `scored` once both are in."""
        sid = ctx.step_id(stage, step)
        if ctx.ledger.step(sid).reached("scored"):
            return
        start = time.perf_counter()
        cfg = ctx.stage(stage)
        calls = [lambda: self.teacher_scores(ctx, stage, step)]
        if cfg.grpo_alpha or cfg.env:
            calls.append(lambda: self.verifier_scores(ctx, stage, step))
        done = together(calls, ctx.settings.overlap)
        metrics = reward_metrics(done[1]) if len(done) > 1 else {}
        ctx.ledger.advance(sid, "scored", metrics=metrics, seconds=time.perf_counter() - start)

    def teacher_scores(self, ctx: RunContext, stage: int, step: int) -> None:
        """log π_teacher of every sample, each from the teacher of its prompt's domain, once (artefact `teacher`)."""
        sid = ctx.step_id(stage, step)
        if ctx.artifacts.has(sid, "teacher"):
            return
        cfg = ctx.stage(stage)
        out = ctx.artifacts.get(sid, "rollouts")
        records = self.batch_records(ctx, stage, step)
        if cfg.env:
            lps = trajectory_teacher_logprobs(ctx, records, out, cfg.rollouts_per_prompt, cfg.domains[0])
        else:
            lps = teacher_logprobs_by_domain(ctx, records, out, cfg.rollouts_per_prompt)
        ctx.artifacts.put(sid, "teacher", lps)

    # update: StepKind.update -> train (this request) -> publish -> sync

    def train_request(self, ctx: RunContext, stage: int, step: int):
        cfg = ctx.stage(stage)
        sid = ctx.step_id(stage, step)
        n = cfg.rollouts_per_prompt
        out, teacher = ctx.artifacts.get(sid, "rollouts"), ctx.artifacts.get(sid, "teacher")
        shape = (sample_count(out) // n, n)
        rewards = err = None
        if cfg.grpo_alpha:
            scores = ctx.artifacts.get(sid, "scores")
            rewards, err = np.array(scores["rewards"]).reshape(shape), errored(scores).reshape(shape)
        if cfg.env:  # an episode the env failed, or with no policy token, teaches nothing
            failed = errored(ctx.artifacts.get(sid, "scores"))
            empty = np.array([f or not any(m) for f, m in zip(failed, out["loss_mask"])])
        else:
            empty = np.array([len(t) == 0 for t in out["token_ids"]])
        built = compute_mopd_batch(empty.reshape(shape), np.array(out["truncated"]).reshape(shape), cfg.overlong,
                                   rewards, err)
        keep = built.loss_mask.reshape(-1)
        if not keep.any():
            return None, built.metrics
        if cfg.env:
            rows, masks, inf = trajectory_rows(out, keep)
            tea = [teacher[s] for s in np.flatnonzero(keep)]
        else:
            rows, masks, inf = prompt_completion_rows(out["prompt_ids"], out["token_ids"], out["logprobs"], keep, n)
            tea = prompt_padded(out["prompt_ids"], teacher, keep, n)
        batch = batch_message(rows, masks, inference_logprobs=inf, teacher_logprobs=tea)
        if built.advantages is not None:
            batch.advantages.CopyFrom(sample_row(built.advantages.reshape(-1)[keep]))
        params = sampling_params(cfg.sampling)
        params.eps_low, params.eps_high = cfg.eps_low, cfg.eps_high
        if cfg.grpo_alpha:
            params.grpo_alpha = cfg.grpo_alpha
        request = trainer_pb2.TrainStepRequest(loss="mopd", batch=batch, params=params,
                                               data_cursor=data_cursor(stage, step), share_prompts=cfg.share_prompts)
        return request, built.metrics

    def after_evaluation(self, ctx: RunContext, stage: int, step: int, version: int, scoring: evals.Scoring) -> None:
        """`remeasure_teachers`: the teachers drawn again after the start evaluation, the student after
        the last, each sampled while the evaluation before it is scored."""
        cfg = ctx.stage(stage)
        if not cfg.remeasures:
            return
        if step == -1:
            evals.evaluate_teachers(ctx, stage, scoring)
        elif step == cfg.steps - 1:
            evals.evaluate_student(ctx, stage, version, scoring)


def teacher_logprobs_by_domain(ctx: RunContext, records, out: dict, n: int) -> list[list[float]]:
    """log π_teacher of every sample's completion, each from the teacher of its record's domain (one
    ScoreTokens call per domain; a prompt is sent once for its n samples). The domains' calls are
    made at once (overlap): each domain's teacher is a model of its own, scored under its own lock,
    whether it lives in the same service as another domain's or not."""
    by_domain: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        by_domain[r.domain].append(i)

    def score(domain: str) -> tuple[list[int], list[list[float]]]:
        prompts = by_domain[domain]
        samples = [i * n + j for i in prompts for j in range(n)]
        return samples, rollout.teacher_logprobs(
            ctx.clients.teacher(domain), domain, [out["prompt_ids"][i] for i in prompts],
            [out["token_ids"][s] for s in samples], [k // n for k in range(len(samples))])

    teacher: list[list[float] | None] = [None] * len(out["token_ids"])
    for samples, lps in together([lambda d=d: score(d) for d in sorted(by_domain)], ctx.settings.overlap):
        for s, lp in zip(samples, lps):
            teacher[s] = lp
    return teacher


def trajectory_teacher_logprobs(ctx: RunContext, records, out: dict, n: int, default: str) -> list[list[float]]:
    """log π_teacher of every token of each episode's trajectory after its first prompt (0 on it), from
    the teacher of its task's domain (the task's `domain`, else the stage's first): ScoreTokens on the
    full sequence; the loss mask then keeps the policy's tokens only (env tokens are scored, never read)."""
    by_domain: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(records):
        domain = r.get("domain") or default
        by_domain[domain].extend(i * n + j for j in range(n))
    teacher: list[list[float]] = [[] for _ in range(sample_count(out))]
    for domain, samples in sorted(by_domain.items()):
        for s, lp in trajectory_logprobs(ctx.clients.teacher(domain), domain, out, samples).items():
            teacher[s] = lp
    return teacher


def load_teachers(ctx: RunContext, s: int) -> dict[str, str]:
    """`teachers: auto` -> the best-evaluated earlier checkpoint per domain (among evaluations drawn the
    way this stage evaluates, evals.comparable); or the explicit map. Each checkpoint's vocabulary is
    checked against the student's, then every replica of the domain's teacher loads it."""
    cfg = ctx.stage(s)
    if cfg.teachers == "auto":
        picks = pick_best(evals.comparable(ctx, s, ctx.ledger.evals(ctx.run_id, before_stage=s)), list(cfg.domains))
        chosen = {d: (p.checkpoint, p.score) for d, p in picks.items()}
    else:
        chosen = {d: (path, float("nan")) for d, path in cfg.teachers.items()}
    for checkpoint in sorted({c for c, _score in chosen.values()}):
        check_teacher_vocabulary(ctx.tokenizer, checkpoint, f"stages[{s}].teachers")
    for domain, (checkpoint, score) in sorted(chosen.items()):
        ctx.clients.teacher(domain).call_each("LoadTeacher", teacher_pb2.LoadTeacherRequest(domain=domain, uri=checkpoint))
        ctx.ledger.record_teacher(ctx.run_id, s, domain, checkpoint, 0.0 if math.isnan(score) else score)
    return {d: c for d, (c, _s) in chosen.items()}
