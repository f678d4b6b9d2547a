"""What GRPO and MOPD steps share: the step's batch drawn once, G samples per prompt, verifier scores.

`generate` (the first phase of both) draws the step's prompts (batches.draw_batch: the same seed,
stage and step always give the same records) and renders them to token ids (`prepare`: made while
the previous step trained, when it ran in this process), samples `rollouts_per_prompt` responses
per prompt on the run's current weights, and stores them with the drawn records' pool indices and
task ids (artefact `rollouts`). With `max_staleness: 1` the next step is sampled while this one
trains, on the weights this one started from (`update`); every step records the weight version
that sampled it (`sampled_weight_version`) and, when trained, its `staleness`. Every later phase reads the records back by those indices (`batch_records`,
checked against the ids) and never draws again. `verifier_scores` scores every sample once
(artefact `scores`); `reward_metrics` is the one definition of a step's `reward_mean`. Sample s
continues prompt s // G throughout.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from services.common import verdicts
from services.common.errors import FailedPrecondition, NotFound
from services.common.pb import trainer_pb2
from services.orchestrator import datasets, episodes, rollout
from services.orchestrator.batches import draw_indices
from services.orchestrator.context import RunContext
from services.orchestrator.metrics import observe_episodes
from services.orchestrator.overlap import TOKENIZER_LOCK, in_thread
from services.orchestrator.steps.base import StepKind
from services.orchestrator.weights import current_version, generate_at, load_policy_weights

log = logging.getLogger(__name__)


def rollout_seed(seed: int, stage: int, step: int) -> int:
    """The policy's sampling seed of a step: distinct per (cascade seed, stage, step)."""
    return seed * 1_000_003 + stage * 10_007 + step


class RolloutStep(StepKind):
    """Base of the kinds that sample from the policy: phase `generate` and the batch it drew."""

    def pool(self, ctx: RunContext, stage: int) -> list:
        """The stage's train records: TaskRecords, or an env stage's task dicts (datasets.env_tasks)."""
        cfg = ctx.stage(stage)
        if cfg.env:
            data = cfg.data or ctx.config.data
            root = datasets.env_data_dir(data, ctx.settings.home.expanduser(), ctx.config.seed)
            return datasets.env_tasks(root, cfg.env, "train")
        return datasets.tasks(ctx.data_dir(stage), list(cfg.domains), "train")

    def generate(self, ctx: RunContext, stage: int, step: int, version: int | None = None) -> None:
        """Draw the step's prompts and sample G responses each (artefact `rollouts`; phase `generated`)
        on the run's current weights, or on weight `version` (a step sampled ahead, `sample_ahead`).
        An env stage runs G episodes per task instead (episodes.run_episodes)."""
        if version is None and sampled_ahead(ctx, ctx.step_id(stage, step)):
            return  # sampled while the step before trained: nothing to do, and no attempt to count
        record = ctx.ledger.begin_step(ctx.run_id, stage, step)
        if record.reached("generated"):
            return
        cfg = ctx.stage(stage)
        start = time.perf_counter()
        pool = self.pool(ctx, stage)
        batch = self.prepared(ctx, stage, step)
        indices = batch["task_indices"]
        records = [pool[i] for i in indices]
        if [record_id(r) for r in records] != batch["task_ids"]:
            raise FailedPrecondition(f"{record.step_id}: the stage's train data changed while its prompts were "
                                     "prepared (task ids differ)")
        if cfg.env:
            out = run_episodes_current(ctx, cfg, records, rollout_seed(ctx.config.seed, stage, step))
            out["task_indices"] = indices
            out["task_ids"] = [record_id(r) for r in records]
            ctx.artifacts.put(record.step_id, "rollouts", out)
            observe_episodes(cfg.env, out)
            metrics = {"generated_tokens": out["episodes_policy_tokens"], "samples": len(out["verdicts"]),
                       "truncated_fraction": float(np.mean(out["truncated"])), **episodes.episode_metrics(out)}
            ctx.ledger.advance(record.step_id, "generated", seconds=time.perf_counter() - start, metrics=metrics)
            return
        out = generate_at(ctx, current_version(ctx) if version is None else version, records,
                          cfg.rollouts_per_prompt, cfg.sampling, rollout_seed(ctx.config.seed, stage, step),
                          prompt_ids=batch["prompt_ids"])
        out["task_indices"] = indices
        out["task_ids"] = [r.id for r in records]
        ctx.artifacts.put(record.step_id, "rollouts", out)
        tokens = sum(len(t) for t in out["token_ids"])
        ctx.ledger.advance(record.step_id, "generated", seconds=time.perf_counter() - start,
                           metrics={"generated_tokens": tokens, "samples": len(out["texts"]),
                                    "truncated_fraction": float(np.mean(out["truncated"])),
                                    "sampled_weight_version": float(out["weight_version"]),
                                    **({"sampled_ahead": 1.0} if version is not None else {})})

    # ----------------------------------------------------------------- one step off-policy (max_staleness)
    def samples_ahead(self, cfg, step: int) -> bool:
        """Whether step+1 is sampled while `step` trains: max_staleness 1, a next step in the stage, and
        no evaluation between them (it scores the weights `step` makes)."""
        return bool(cfg.max_staleness) and not cfg.env and step + 1 < cfg.steps and not cfg.eval_due(step)

    def update(self, ctx: RunContext, stage: int, step: int) -> None:
        """StepKind.update (train, publish, sync); with max_staleness 1 the policy samples step+1 on the
        weights this step started from meanwhile (the policy swaps weights between batches, so the
        sync waits for that batch), and this task ends only once that batch is stored or has failed
        (a failure is logged: step+1's own generate phase samples it, on-policy)."""
        ahead = None
        if self.samples_ahead(ctx.stage(stage), step) and not ctx.ledger.step(ctx.step_id(stage, step)).reached("trained"):
            version = current_version(ctx)  # pinned before this step publishes
            ahead = in_thread(lambda: self.generate(ctx, stage, step + 1, version=version), "sample-ahead")
        try:
            super().update(ctx, stage, step)
        finally:
            if ahead is not None and ahead.exception() is not None:
                exc = ahead.exception()
                log.warning(f"{ctx.step_id(stage, step + 1)}: sampling ahead failed ({type(exc).__name__}: {exc}); "
                            "its generate phase samples it", extra={"run_id": ctx.run_id})

    def prefetch_next(self, ctx: RunContext, stage: int, step: int) -> None:
        if not self.samples_ahead(ctx.stage(stage), step):  # sampled ahead: its prompts are drawn there
            super().prefetch_next(ctx, stage, step)

    def train_metrics(self, ctx: RunContext, stage: int, step: int) -> dict[str, float]:
        """`staleness`: the run's weight versions published after the one that sampled the batch, up
        to the weights it trains (0 on-policy; version numbers are the trainer's, not consecutive)."""
        sampled = ctx.ledger.step(ctx.step_id(stage, step)).metrics.get("sampled_weight_version")
        if sampled is None:
            return {}
        return {"staleness": float(sum(1 for v, _u, _s in ctx.ledger.weight_versions(ctx.run_id) if v > sampled))}

    def prepare(self, ctx: RunContext, stage: int, step: int) -> dict:
        """The step's prompts drawn ({"task_indices", "task_ids"}) and, single-turn, rendered to the
        token ids the policy would make of them ("prompt_ids"; None for episodes, which render each turn)."""
        cfg = ctx.stage(stage)
        pool = self.pool(ctx, stage)
        indices = draw_indices(len(pool), ctx.config.seed, stage, step, cfg.batch_size)
        records = [pool[i] for i in indices]
        prompt_ids = None
        if not cfg.env:
            with TOKENIZER_LOCK:
                prompt_ids = [rollout.render_prompt(ctx.tokenizer, r, cfg.sampling.thinking) for r in records]
        return {"task_indices": indices, "task_ids": [record_id(r) for r in records], "prompt_ids": prompt_ids}

    def batch_records(self, ctx: RunContext, stage: int, step: int) -> list:
        """The records `generate` drew for this step, by the indices it stored (never drawn again)."""
        out = ctx.artifacts.get(ctx.step_id(stage, step), "rollouts")
        pool = self.pool(ctx, stage)
        records = [pool[i] for i in out["task_indices"]]
        if [record_id(r) for r in records] != out["task_ids"]:
            raise FailedPrecondition(f"{ctx.step_id(stage, step)}: the stage's train data changed since its "
                                     "prompts were drawn (task ids differ); restore the data folder")
        return records

    def verifier_scores(self, ctx: RunContext, stage: int, step: int) -> dict:
        """Every sample scored by its record's verifier, once (artefact `scores`)."""
        sid = ctx.step_id(stage, step)
        if ctx.artifacts.has(sid, "scores"):
            return ctx.artifacts.get(sid, "scores")
        out = ctx.artifacts.get(sid, "rollouts")
        if ctx.stage(stage).env:  # the environment's reward at each episode's end
            scores = {k: out[k] for k in ("rewards", "verdicts", "reasons")}
            ctx.artifacts.put(sid, "scores", scores)
            return scores
        scores = rollout.score(ctx.clients.reward, self.batch_records(ctx, stage, step), out["texts"],
                               ctx.stage(stage).rollouts_per_prompt)
        ctx.artifacts.put(sid, "scores", scores)
        return scores


def sampled_ahead(ctx: RunContext, step_id: str) -> bool:
    """Whether `step_id` was generated ahead (max_staleness) and stored: its generate phase is done."""
    if not ctx.artifacts.has(step_id, "rollouts"):
        return False
    try:
        record = ctx.ledger.step(step_id)
    except NotFound:
        return False
    return record.reached("generated") and bool(record.metrics.get("sampled_ahead"))


def record_id(record) -> str:
    """A TaskRecord's id, or an env task dict's."""
    return record["id"] if isinstance(record, dict) else record.id


def run_episodes_current(ctx: RunContext, cfg, records: list[dict], seed: int, attempts: int = 3) -> dict:
    """episodes.run_episodes on the run's current weights: a turn sampled by another version (a
    restarted policy) reloads the expected one and runs the episodes again."""
    version = current_version(ctx)
    limits = episodes.EpisodeLimits(cfg.max_turns, cfg.max_episode_tokens, cfg.env_seconds)
    for _ in range(attempts):
        out = episodes.run_episodes(ctx.clients.policy, ctx.clients.env, ctx.tokenizer, cfg.env, records,
                                    cfg.rollouts_per_prompt, cfg.sampling, limits, seed)
        out["episodes_policy_tokens"] = int(sum(sum(m) for m in out["loss_mask"]))
        if set(out["weight_versions"]) <= {version}:
            return out
        load_policy_weights(ctx, version)
    raise RuntimeError(f"the policy does not keep weight version {version} (served {out['weight_versions']})")


def sample_count(out: dict) -> int:
    """Samples of a `rollouts` artefact (single-turn or episodes)."""
    return len(out["verdicts"]) if "input_ids" in out else len(out["texts"])


def trajectory_rows(out: dict, keep: np.ndarray):
    """Rows, loss masks and per-token log π_inf of the kept episodes, as the trajectories hold them."""
    idx = np.flatnonzero(keep)
    return ([out["input_ids"][s] for s in idx], [out["loss_mask"][s] for s in idx], [out["logprobs"][s] for s in idx])


def trajectory_logprobs(client, domain: str, out: dict, samples) -> dict[int, list[float]]:
    """log π of every token of each sample's trajectory after its first prompt (policy and env tokens;
    the loss mask selects the policy's), 0 on the prompt: one ScoreTokens call, a prompt per sample.
    Samples with no policy token get []."""
    scored = [s for s in samples if out["prompt_len"][s] < len(out["input_ids"][s])]
    result = {s: [] for s in samples}
    if not scored:
        return result
    prompts = [out["input_ids"][s][:out["prompt_len"][s]] for s in scored]
    completions = [out["input_ids"][s][out["prompt_len"][s]:] for s in scored]
    lps = rollout.teacher_logprobs(client, domain, prompts, completions, list(range(len(scored))))
    for s, p, lp in zip(scored, prompts, lps):
        result[s] = [0.0] * len(p) + list(lp)
    return result


def reward_metrics(scores: dict) -> dict[str, float]:
    """`reward_mean`: the mean verifier reward over the samples whose verdict is not `error`, before
    any overlong rule (NaN when every sample errored); `verdict/<v>`: samples per verdict."""
    valid = [r for r, v in zip(scores["rewards"], scores["verdicts"]) if not verdicts.is_error(v)]
    metrics = {"reward_mean": float(np.mean(valid)) if valid else float("nan")}
    for v in sorted(set(scores["verdicts"])):
        metrics[f"verdict/{v}"] = float(scores["verdicts"].count(v))
    return metrics


def errored(scores: dict) -> np.ndarray:
    """[S] bool: the samples whose verifier failed."""
    return np.array([verdicts.is_error(v) for v in scores["verdicts"]], dtype=bool)


def sampling_params(sampling) -> trainer_pb2.LossParams:
    """LossParams carrying the rollout sampling's temperature and filters, so log π_train is taken
    of the distribution the policy sampled from (the trainer applies them)."""
    return trainer_pb2.LossParams(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k)


def prompt_completion_rows(prompt_ids, token_ids, logprobs, keep: np.ndarray, n: int):
    """Rows prompt+completion of the kept samples, their loss masks and per-token inference log-probs
    (0 on prompt tokens). `keep` is a flat bool per sample; sample s continues prompt s // n."""
    rows, masks, inf = [], [], []
    for s in np.flatnonzero(keep):
        p, c = prompt_ids[s // n], token_ids[s]
        rows.append(list(p) + list(c))
        masks.append([0] * len(p) + [1] * len(c))
        inf.append([0.0] * len(p) + list(logprobs[s]))
    return rows, masks, inf


def prompt_padded(prompt_ids, per_token, keep: np.ndarray, n: int) -> list[list[float]]:
    """Per-token values of the kept samples' completions, preceded by 0 on their prompt tokens."""
    return [[0.0] * len(prompt_ids[s // n]) + list(per_token[s]) for s in np.flatnonzero(keep)]
