"""Evaluation: per-domain validation reward of the policy's current weights, recorded in the ledger.

The same first `prompts_per_domain` validation prompts of each domain are used at every
evaluation, `samples_per_prompt` samples each (avg@k; one greedy answer by default) with a fixed
seed; the policy keys each sample's random numbers by seed, prompt and sample index, so every
evaluation draws the same ones and scores compare across steps and stages by what the weights do
(common random numbers). Samples with an `error` verdict are left out of the mean (and counted).
`teachers: auto` picks MOPD teachers from these records; an MOPD stage then draws its teachers and,
at its end, its student once more under FRESH_SEED (the recovery claim compares those two).
"""

from __future__ import annotations

import logging

import numpy as np

from services.orchestrator import datasets, rollout
from services.orchestrator.cascade_config import SamplingConfig
from services.orchestrator.context import RunContext
from services.orchestrator.ledger import EvalRecord
from services.orchestrator.steps.base import (
    generate_at,
    generate_current,
    load_policy_weights,
    run_weight_version,
)

log = logging.getLogger(__name__)
EVAL_SEED = 1234
FRESH_SEED = 4321
"""Seed of an MOPD stage's fresh draws (its teachers at its start, its student at its end): samples
independent of the evaluations that chose the teachers, the same random numbers for both sides."""


def eval_sampling(stage) -> SamplingConfig:
    """The stage's eval sampling, or greedy with the stage's length and thinking mode."""
    if stage.eval.sampling is not None:
        return stage.eval.sampling
    rollout_sampling = getattr(stage, "sampling", None)
    if rollout_sampling is None:
        return SamplingConfig(temperature=0.0, max_tokens=64, thinking=False)
    return SamplingConfig(temperature=0.0, max_tokens=rollout_sampling.max_tokens, thinking=rollout_sampling.thinking)


def evaluate(ctx: RunContext, stage: int, step: int, weight_version: int | None) -> dict[str, float]:
    """Score the served weights on every eval domain of `stage`; record and return {domain: mean reward}.
    An MOPD stage then draws its teachers again at its start and its student at its end (`FRESH_SEED`)."""
    cfg = ctx.stage(stage)
    earlier = ctx.ledger.evals(ctx.run_id)
    done = {e.domain for e in earlier if e.stage_index == stage and e.step_index == step}
    todo = [d for d in cfg.eval_domains() if d not in done]
    results: dict[str, float] = {}
    version = weight_version or 0
    for domain, prior in measured(ctx, stage, version, todo, earlier).items():
        ctx.ledger.record_eval(ctx.run_id, stage, step, version, prior.checkpoint, domain, prior.score, prior.n)
        log.info("evaluation reused", extra={"run_id": ctx.run_id, "stage": stage, "step": step, "domain": domain,
                                             "weight_version": version, "from_stage": prior.stage_index})
        results[domain] = prior.score
        todo.remove(domain)
    if todo:
        records = validation(ctx, stage, todo)
        k = cfg.eval.samples_per_prompt
        out = generate_current(ctx, records, k, eval_sampling(cfg), EVAL_SEED)
        results |= score_and_record(ctx, f"evals/stage-{stage}-step-{step}", records, out["texts"], k, lambda domain, mean, n:
                                    ctx.ledger.record_eval(ctx.run_id, stage, step, version, ctx.weights_uri(version),
                                                           domain, mean, n))
    if cfg.type == "mopd" and cfg.remeasure_teachers and eval_sampling(cfg).temperature > 0:
        if step == -1:
            evaluate_teachers(ctx, stage)
        elif step == cfg.steps - 1:
            evaluate_student(ctx, stage, version)
    return results


def eval_setting(ctx: RunContext, stage: int) -> tuple:
    """What an evaluation's score depends on besides the weights: the data, the prompts and samples
    per domain, the sampling and the reward model."""
    cfg = ctx.stage(stage)
    return (cfg.data or ctx.config.data, cfg.eval.prompts_per_domain, cfg.eval.samples_per_prompt,
            eval_sampling(cfg).model_dump_json(), getattr(cfg, "reward_model", None))


def measured(ctx: RunContext, stage: int, version: int, domains: list[str], evals: list[EvalRecord]) -> dict[str, EvalRecord]:
    """Earlier evaluations of this run of weight `version` on `domains` under the same setting as `stage`.

    An evaluation is a function of the weights and its setting (every one draws the same random
    numbers), so a stage that starts from the weights the previous stage ended with would measure
    the very same numbers again; it takes these instead (in the demo: 7 of 42 evaluations)."""
    setting = eval_setting(ctx, stage)
    found: dict[str, EvalRecord] = {}
    for e in evals:
        if e.weight_version == version and e.domain in domains and e.domain not in found \
                and eval_setting(ctx, e.stage_index) == setting:
            found[e.domain] = e
    return found


def evaluate_teachers(ctx: RunContext, stage: int) -> dict[str, float]:
    """Each teacher of MOPD stage `stage` that is a weight version of this run, scored on its own
    domain under FRESH_SEED; recorded (role `teacher`) and returned {domain: mean reward}.

    Why: `teachers: auto` takes the best of several noisy scores, and the best of several noisy
    scores overstates the checkpoint (the winner's curse); a fresh draw does not. Teachers sharing
    a checkpoint are evaluated in one batch; the policy serves the run's current weights again after.
    """
    cfg = ctx.stage(stage)
    done = ctx.ledger.fresh_evals(ctx.run_id, stage, "teacher")
    versions = {ctx.weights_uri(0): 0, **{uri: v for v, uri, _s in ctx.ledger.weight_versions(ctx.run_id)}}
    by_version: dict[int, list[str]] = {}
    for domain, (checkpoint, _score) in sorted(ctx.ledger.teachers(ctx.run_id, stage).items()):
        if domain in done:
            continue
        if checkpoint not in versions:
            log.info("teacher is not a checkpoint of this run; not drawn again",
                     extra={"run_id": ctx.run_id, "stage": stage, "domain": domain, "checkpoint": checkpoint})
            continue
        by_version.setdefault(versions[checkpoint], []).append(domain)
    results: dict[str, float] = {}
    k = cfg.eval.samples_per_prompt
    for version, domains in sorted(by_version.items()):
        records = validation(ctx, stage, domains)
        load_policy_weights(ctx, version)
        out = generate_at(ctx, version, records, k, eval_sampling(cfg), FRESH_SEED)
        results.update(score_and_record(
            ctx, f"evals/stage-{stage}-teachers-v{version}", records, out["texts"], k, lambda domain, mean, n, v=version:
            ctx.ledger.record_fresh_eval(ctx.run_id, stage, "teacher", domain, ctx.weights_uri(v), mean, n)))
    if by_version:
        load_policy_weights(ctx, run_weight_version(ctx))
    return results


def evaluate_student(ctx: RunContext, stage: int, version: int) -> dict[str, float]:
    """MOPD stage `stage`'s final weights on each domain whose teacher was drawn again, under the same
    FRESH_SEED (so student and teacher meet the same random numbers); recorded (role `student`)."""
    cfg = ctx.stage(stage)
    done = ctx.ledger.fresh_evals(ctx.run_id, stage, "student")
    todo = [d for d in sorted(ctx.ledger.fresh_evals(ctx.run_id, stage, "teacher")) if d not in done]
    if not todo:
        return {}
    records = validation(ctx, stage, todo)
    k = cfg.eval.samples_per_prompt
    out = generate_current(ctx, records, k, eval_sampling(cfg), FRESH_SEED)
    return score_and_record(ctx, f"evals/stage-{stage}-student-v{version}", records, out["texts"], k, lambda domain, mean, n:
                            ctx.ledger.record_fresh_eval(ctx.run_id, stage, "student", domain, ctx.weights_uri(version), mean, n))


def validation(ctx: RunContext, stage: int, domains: list[str]) -> list:
    """The first `eval.prompts_per_domain` validation tasks of each domain, domain by domain."""
    root, n = ctx.data_dir(stage), ctx.stage(stage).eval.prompts_per_domain
    out = []
    for domain in domains:
        tasks = datasets.tasks(root, [domain], "validation")
        if len(tasks) < n:
            log.warning("fewer validation prompts than eval.prompts_per_domain; evaluating all of them",
                        extra={"run_id": ctx.run_id, "domain": domain, "available": len(tasks), "asked": n})
        out.extend(tasks[:n])
    return out


def score_and_record(ctx: RunContext, key: str, records, texts: list[str], k: int, record) -> dict[str, float]:
    """Score `k` samples per record, keep them as artifact `key`, and call record(domain, mean, n)
    per domain with the mean reward over its samples that did not error; return {domain: mean}."""
    scores = rollout.score(ctx.clients.reward, records, texts, k)
    ctx.artifacts.put(key, "samples", {"task_ids": [r.id for r in records for _ in range(k)], "texts": texts, **scores})
    results: dict[str, float] = {}
    for domain in dict.fromkeys(r.domain for r in records):
        idx = [i * k + j for i, r in enumerate(records) if r.domain == domain for j in range(k)]
        ok = [i for i in idx if scores["verdicts"][i] != "error"]
        if not ok:
            log.warning("every validation sample errored", extra={"run_id": ctx.run_id, "key": key, "domain": domain})
            continue
        mean = float(np.mean([scores["rewards"][i] for i in ok]))
        record(domain, mean, len(ok))
        results[domain] = mean
    return results
