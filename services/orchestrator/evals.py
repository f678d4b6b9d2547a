"""Evaluation: per-domain validation reward of the policy's current weights, recorded in the ledger.

The same first `prompts_per_domain` validation prompts of each domain are used at every
evaluation, `samples_per_prompt` samples each (avg@k; one greedy answer by default) with a fixed
seed, so scores are comparable across steps and stages. Samples with an
`error` verdict are left out of the mean (and counted). `teachers: auto` picks MOPD teachers from
these records.
"""

from __future__ import annotations

import logging

import numpy as np

from services.orchestrator import datasets, rollout
from services.orchestrator.cascade_config import SamplingConfig
from services.orchestrator.context import RunContext
from services.orchestrator.steps.base import generate_current

log = logging.getLogger(__name__)
EVAL_SEED = 1234


def eval_sampling(stage) -> SamplingConfig:
    """The stage's eval sampling, or greedy with the stage's length and thinking mode."""
    if stage.eval.sampling is not None:
        return stage.eval.sampling
    rollout_sampling = getattr(stage, "sampling", None)
    if rollout_sampling is None:
        return SamplingConfig(temperature=0.0, max_tokens=64, thinking=False)
    return SamplingConfig(temperature=0.0, max_tokens=rollout_sampling.max_tokens, thinking=rollout_sampling.thinking)


def evaluate(ctx: RunContext, stage: int, step: int, weight_version: int | None) -> dict[str, float]:
    """Score the served weights on every eval domain of `stage`; record and return {domain: mean reward}."""
    cfg = ctx.stage(stage)
    domains = cfg.eval_domains()
    done = {e.domain for e in ctx.ledger.evals(ctx.run_id) if e.stage_index == stage and e.step_index == step}
    todo = [d for d in domains if d not in done]
    if not todo:
        return {}
    root = ctx.data_dir(stage)
    records = []
    for domain in todo:
        records.extend(datasets.tasks(root, [domain], "validation")[: cfg.eval.prompts_per_domain])
    k = cfg.eval.samples_per_prompt
    out = generate_current(ctx, records, k, eval_sampling(cfg), EVAL_SEED)
    scores = rollout.score(ctx.clients.reward, records, out["texts"], k)
    ctx.artifacts.put(f"evals/stage-{stage}-step-{step}", "samples", {
        "task_ids": [r.id for r in records for _ in range(k)], "texts": out["texts"], **scores})
    version = weight_version or 0
    checkpoint = ctx.weights_uri(version)
    results: dict[str, float] = {}
    for domain in todo:
        idx = [i * k + j for i, r in enumerate(records) if r.domain == domain for j in range(k)]
        ok = [i for i in idx if scores["verdicts"][i] != "error"]
        if not ok:
            log.warning("every validation sample errored", extra={"domain": domain, "stage": stage, "step": step})
            continue
        mean = float(np.mean([scores["rewards"][i] for i in ok]))
        ctx.ledger.record_eval(ctx.run_id, stage, step, version, checkpoint, domain, mean, len(ok))
        results[domain] = mean
    return results
