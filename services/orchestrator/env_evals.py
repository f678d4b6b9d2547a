"""Evaluation of an env stage on its environment: whole validation episodes, scored by the env's reward.

A stage with `env:` is evaluated on the domain named like its environment (`workbench` for `env:
workbench`) by running `eval.samples_per_prompt` episodes on each of the first `eval.prompts_per_domain`
tasks of `<data>/<env>/validation.jsonl` (episodes.run_episodes, the stage's limits, the stage's
evaluation sampling, seed EVAL_SEED at every evaluation), on the run's current weights (a policy that
served another version reloads it and the episodes run again). An episode's score is its reward at
the end; episodes whose env failed (verdict `error`) are left out of the mean and of their task's
avg@k, as errored verifier samples are. What is recorded is what a single-turn evaluation records
(the mean, n and the per-task scores behind it), so the claims' paired intervals read it alike.
"""

from __future__ import annotations

import logging

from services.orchestrator import datasets, episodes
from services.orchestrator.cascade_config import eval_sampling
from services.orchestrator.context import RunContext
from services.orchestrator.weights import current_version, load_policy_weights

log = logging.getLogger(__name__)


def env_domain(cfg) -> str | None:
    """The evaluation domain an env stage scores by episodes (its environment's name), else None."""
    return getattr(cfg, "env", None)


def validation_tasks(ctx: RunContext, stage: int) -> list[dict]:
    """The first `eval.prompts_per_domain` validation tasks of the stage's environment."""
    cfg = ctx.stage(stage)
    root = datasets.env_data_dir(cfg.data or ctx.config.data, ctx.settings.home.expanduser(), ctx.config.seed)
    tasks = datasets.env_tasks(root, cfg.env, "validation")
    if len(tasks) < cfg.eval.prompts_per_domain:
        log.warning("fewer validation tasks than eval.prompts_per_domain; evaluating all of them",
                    extra={"run_id": ctx.run_id, "env": cfg.env, "available": len(tasks),
                           "asked": cfg.eval.prompts_per_domain})
    return tasks[: cfg.eval.prompts_per_domain]


def run_validation(ctx: RunContext, stage: int, seed: int, attempts: int = 3) -> tuple[list[dict], dict]:
    """(tasks, episodes.run_episodes' output) of the stage's validation episodes on the current weights."""
    cfg = ctx.stage(stage)
    tasks = validation_tasks(ctx, stage)
    limits = episodes.EpisodeLimits(cfg.max_turns, cfg.max_episode_tokens, cfg.env_seconds)
    version = current_version(ctx)
    for _ in range(attempts):
        out = episodes.run_episodes(ctx.clients.policy, ctx.clients.env, ctx.tokenizer, cfg.env, tasks,
                                    cfg.eval.samples_per_prompt, eval_sampling(cfg), limits, seed)
        if set(out["weight_versions"]) <= {version}:
            return tasks, out
        log.warning("policy serves another weight version; reloading",
                    extra={"run_id": ctx.run_id, "served": out["weight_versions"], "expected": version})
        load_policy_weights(ctx, version)
    raise RuntimeError(f"the policy does not keep weight version {version} (served {out['weight_versions']})")


def episode_scores(task_ids: list[str], rewards: list[float], verdicts: list[str], k: int) -> tuple[float, int, dict]:
    """(mean, n, {task id: avg@k}) of `k` episodes per task (episode j of task i at i*k + j): the mean
    and n over episodes whose verdict is not `error`; a task's avg@k s_i = mean_j r_ij over its
    episodes that did not error (a task whose episodes all errored is left out). n = 0 -> mean nan."""
    ok = [i for i, v in enumerate(verdicts) if v != "error"]
    per_task: dict[str, float] = {}
    for t, task_id in enumerate(task_ids):
        kept = [rewards[t * k + j] for j in range(k) if verdicts[t * k + j] != "error"]
        if kept:
            per_task[task_id] = sum(kept) / len(kept)
    mean = sum(rewards[i] for i in ok) / len(ok) if ok else float("nan")
    return mean, len(ok), per_task


def evaluate(ctx: RunContext, stage: int, step: int, version: int, seed: int) -> float | None:
    """Run, keep (artefact `evals/stage-<s>-step-<t>-episodes`) and record the stage's validation
    episodes; the mean reward, or None when every episode errored (nothing recorded)."""
    cfg = ctx.stage(stage)
    tasks, out = run_validation(ctx, stage, seed)
    k = cfg.eval.samples_per_prompt
    ids = [str(t.get("id")) for t in tasks]
    ctx.artifacts.put(f"evals/stage-{stage}-step-{step}-episodes", "samples",
                      {"task_ids": [i for i in ids for _ in range(k)], "rewards": out["rewards"],
                       "verdicts": out["verdicts"], "reasons": out["reasons"], "turns": out["turns"],
                       "tool_errors": out["tool_errors"]})
    mean, n, per_task = episode_scores(ids, out["rewards"], out["verdicts"], k)
    if not n:
        log.warning("every validation episode errored", extra={"run_id": ctx.run_id, "stage": stage, "env": cfg.env})
        return None
    ctx.ledger.record_eval(ctx.run_id, stage, step, version, ctx.weights_uri(version), cfg.env, mean, n, per_task)
    return mean
