"""The cascade runner: from the ledger, decide what the run does next, and do the cheap parts.

`plan(ctx)` is a pure decision over the ledger's state: start a stage, run a step, evaluate, end a
stage, finish, or stop because the run was cancelled. `start_stage` brings up what a stage needs
(MOPD teachers chosen from recorded evals — `teachers: auto` — loaded with `LoadTeacher`; the
reference policy for KL; the reward model for `rlhf`). Steps and evaluations are long and run as
Celery chains (services.orchestrator.tasks); this module knows nothing about Celery, so the same
decisions drive a resumed run after any crash.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from services.common.pb import reward_pb2, teacher_pb2
from services.orchestrator.context import RunContext
from services.orchestrator.selection import select_teachers
from services.orchestrator.steps.grpo import reference_domain

log = logging.getLogger(__name__)
BASELINE = -1
"""Step index of the evaluation taken when a stage starts (the model it started from)."""


@dataclass(frozen=True)
class Action:
    kind: str  # start_stage | step | eval | end_stage | finish | cancelled
    stage: int = 0
    step: int = 0


def evaluates(stage_cfg) -> bool:
    """rm stages do not change the policy, so there is nothing to evaluate."""
    return stage_cfg.type != "rm"


def plan(ctx: RunContext) -> Action:
    ledger, run_id, stages = ctx.ledger, ctx.run_id, ctx.config.stages
    if ledger.cancel_requested(run_id):
        return Action("cancelled")
    point = ledger.resume_point(run_id)
    s = point.stage_index
    if s >= len(stages):
        return Action("finish")
    begun = {st.index: st for st in ledger.run(run_id).stages}
    if s not in begun:
        return Action("start_stage", s)
    cfg = stages[s]
    evaluated = {(e.stage_index, e.step_index) for e in ledger.evals(run_id)}
    if evaluates(cfg) and cfg.eval.at_start and (s, BASELINE) not in evaluated:
        return Action("eval", s, BASELINE)
    k = point.step_index
    if k < cfg.steps:
        if k > 0 and evaluates(cfg) and cfg.eval_due(k - 1) and (s, k - 1) not in evaluated:
            return Action("eval", s, k - 1)
        return Action("step", s, k)
    if evaluates(cfg) and (s, cfg.steps - 1) not in evaluated:
        return Action("eval", s, cfg.steps - 1)
    return Action("end_stage", s)


def current_version(ctx: RunContext) -> int:
    """The policy's latest published weight version in this run (0 = the initial model)."""
    versions = [v for v, _u, _s in ctx.ledger.weight_versions(ctx.run_id)]
    return max(versions) if versions else 0


def start_stage(ctx: RunContext, s: int) -> None:
    """Bring up the stage's teachers / reference / reward model, then record that it runs."""
    cfg = ctx.stage(s)
    version = current_version(ctx)
    if cfg.type == "mopd":
        load_teachers(ctx, s)
    if getattr(cfg, "kl_coef", 0) > 0:
        domain = reference_domain(cfg.name)
        ctx.clients.teacher(domain).call_each("LoadTeacher", teacher_pb2.LoadTeacherRequest(
            domain=domain, uri=ctx.weights_uri(version)))
    reward_model = getattr(cfg, "reward_model", None)
    if reward_model:
        load_reward_model(ctx, reward_model)
    ctx.ledger.begin_stage(ctx.run_id, s, cfg.name, cfg.type, cfg.steps, start_weight_version=version)
    log.info("stage started", extra={"run_id": ctx.run_id, "stage": cfg.name, "weight_version": version})


def load_teachers(ctx: RunContext, s: int) -> dict[str, str]:
    """`teachers: auto` -> the best-evaluated earlier checkpoint per domain; or the explicit map."""
    cfg = ctx.stage(s)
    if cfg.teachers == "auto":
        picks = select_teachers(ctx.ledger, ctx.run_id, list(cfg.domains), before_stage=s)
        chosen = {d: (p.checkpoint, p.score) for d, p in picks.items()}
    else:
        chosen = {d: (path, float("nan")) for d, path in cfg.teachers.items()}
    for domain, (checkpoint, score) in sorted(chosen.items()):
        # every replica of the domain's teacher loads it (a call goes to any of them)
        ctx.clients.teacher(domain).call_each("LoadTeacher", teacher_pb2.LoadTeacherRequest(domain=domain, uri=checkpoint))
        ctx.ledger.record_teacher(ctx.run_id, s, domain, checkpoint, 0.0 if math.isnan(score) else score)
    return {d: c for d, (c, _s) in chosen.items()}


def load_reward_model(ctx: RunContext, name: str) -> None:
    """The reward service loads an `rm` stage's published model (by output name) or a folder."""
    key = f"reward-models/{name}"
    if ctx.artifacts.has(key, "weights"):
        ref = ctx.artifacts.get(key, "weights")
        uri, sha = ref["uri"], ref["sha256"]
    else:
        uri, sha = name, ""
    ctx.clients.reward.call("LoadRewardModel", reward_pb2.LoadRewardModelRequest(uri=uri, sha256=sha))


def end_stage(ctx: RunContext, s: int) -> None:
    ctx.ledger.set_stage_status(ctx.run_id, s, "succeeded")
    log.info("stage finished", extra={"run_id": ctx.run_id, "stage": ctx.stage(s).name})
