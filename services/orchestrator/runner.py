"""The cascade runner: from the ledger, decide what the run does next, and do the cheap parts.

`plan(ctx)` is a pure decision over the ledger's state: start a stage, run a step, evaluate, end a
stage, finish, or stop because the run was cancelled. `start_stage` runs the stage's step kind's
hook (MOPD: the teachers; GRPO: the KL reference and the rlhf reward model) and records the stage;
`evaluate` is an evaluation followed by the kind's own measurements. Steps and evaluations are long
and run as Celery chains (services.orchestrator.tasks); this module knows nothing about Celery, so
the same decisions drive a resumed run after any crash.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from services.orchestrator import evals
from services.orchestrator.context import RunContext
from services.orchestrator.steps import STEP_KINDS
from services.orchestrator.weights import current_version

log = logging.getLogger(__name__)
BASELINE = -1
"""Step index of the evaluation taken when a stage starts (the model it started from)."""


@dataclass(frozen=True)
class Action:
    kind: str  # start_stage | step | eval | end_stage | finish | cancelled
    stage: int = 0
    step: int = 0


def evaluates(stage_cfg) -> bool:
    """Whether the stage's step kind changes the policy (rm does not: nothing to evaluate)."""
    return STEP_KINDS[stage_cfg.type].evaluates


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


def start_stage(ctx: RunContext, s: int) -> None:
    """The step kind brings up what the stage needs (its `start_stage` hook), then the stage is recorded."""
    cfg = ctx.stage(s)
    version = current_version(ctx)
    STEP_KINDS[cfg.type].start_stage(ctx, s)
    ctx.ledger.begin_stage(ctx.run_id, s, cfg.name, cfg.type, cfg.steps, start_weight_version=version)
    log.info("stage started", extra={"run_id": ctx.run_id, "stage": cfg.name, "weight_version": version})


def evaluate(ctx: RunContext, s: int, step: int) -> None:
    """Evaluate the run's current weights for stage `s` after `step`, then the kind's own measurements;
    each one's samples are scored while the policy samples the next (evals.Scoring, overlap on), and
    all of them are recorded before this returns."""
    version = current_version(ctx)
    with evals.Scoring(ctx.settings.overlap) as scoring:
        evals.evaluate(ctx, s, step, version, scoring)
        STEP_KINDS[ctx.stage(s).type].after_evaluation(ctx, s, step, version, scoring)


def end_stage(ctx: RunContext, s: int) -> None:
    ctx.ledger.set_stage_status(ctx.run_id, s, "succeeded")
    log.info("stage finished", extra={"run_id": ctx.run_id, "stage": ctx.stage(s).name})
