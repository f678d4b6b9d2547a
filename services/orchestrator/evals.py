"""Evaluation: per-domain validation reward of the policy's current weights, recorded in the ledger.

The same first `prompts_per_domain` validation prompts of each domain are used at every
evaluation, `samples_per_prompt` samples each (avg@k; one greedy answer by default) with a fixed
seed; the policy keys each sample's random numbers by seed, prompt and sample index, so every
evaluation draws the same ones and scores compare across steps and stages by what the weights do
(common random numbers); an env stage's own domain is scored by whole episodes on its environment
(services.orchestrator.env_evals). Samples with an `error` verdict are left out of the mean (and counted).
Each record keeps the per-prompt scores behind its mean (avg@k per task id, over the samples that
did not error): the claims' paired intervals resample them (services.orchestrator.intervals).
The sampling is the stage's one evaluation sampling (cascade_schema.eval_sampling: `eval.sampling`,
else greedy). `teachers: auto` picks MOPD teachers from these records, among evaluations drawn the
same way only (`comparable`); an MOPD stage then draws its teachers and, at its end, its student
once more under FRESH_SEED (the recovery claim compares those two; the MOPD step kind's hook).
The reward service scores one evaluation's samples while the policy samples the next (`Scoring`,
OrchestratorSettings.overlap): the start evaluation while the teachers are drawn again, one teacher's
checkpoint while the next one's is, the last evaluation while the student is drawn again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from services.common import verdicts
from services.common.errors import FailedPrecondition
from services.orchestrator import datasets, env_evals, rollout
from services.orchestrator.cascade_config import eval_sampling
from services.orchestrator.context import RunContext
from services.orchestrator.ledger import EvalRecord
from services.orchestrator.overlap import in_thread
from services.orchestrator.weights import current_version, generate_at, generate_current, load_policy_weights

log = logging.getLogger(__name__)
EVAL_SEED = 1234
FRESH_SEED = 4321
"""Seed of an MOPD stage's fresh draws (its teachers at its start, its student at its end): samples
independent of the evaluations that chose the teachers, the same random numbers for both sides."""


class Scoring:
    """Evaluations' samples scored and recorded behind the policy: `submit(work)` starts work() (a
    `score_and_record`, on the reward service) on a thread when `concurrent`, so the policy generates
    the next evaluation meanwhile; leaving the `with` block waits for every submitted work (also when
    the block raised: then the block's error is raised) and raises the first error. Not concurrent:
    work() runs at once, in order."""

    def __init__(self, concurrent: bool):
        self.concurrent = concurrent
        self._pending: list[Future] = []

    def submit(self, work: Callable[[], object]) -> None:
        if self.concurrent:
            self._pending.append(in_thread(work, "eval-scoring"))
        else:
            work()

    def wait(self) -> None:
        pending, self._pending = self._pending, []
        for f in pending:
            f.exception()  # every one finishes (its records written) before any error is raised
        for f in pending:
            f.result()

    def __enter__(self) -> Scoring:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.wait()
            return
        pending, self._pending = self._pending, []
        for f in pending:  # the block's own error is the one raised; the scoring's are logged
            if f.exception() is not None:
                log.warning(f"evaluation scoring failed too: {type(f.exception()).__name__}: {f.exception()}")


def evaluate(ctx: RunContext, stage: int, step: int, weight_version: int | None, scoring: Scoring) -> None:
    """Score the served weights on every eval domain of `stage` and record {domain: mean reward}
    (the scoring through `scoring`: recorded once it has waited)."""
    cfg = ctx.stage(stage)
    earlier = ctx.ledger.evals(ctx.run_id)
    done = {e.domain for e in earlier if e.stage_index == stage and e.step_index == step}
    todo = [d for d in cfg.eval_domains() if d not in done]
    version = weight_version or 0
    reused = measured(ctx, stage, version, todo, earlier)
    per_prompt = ctx.ledger.prompt_scores(ctx.run_id) if reused else {}
    for domain, prior in reused.items():
        ctx.ledger.record_eval(ctx.run_id, stage, step, version, prior.checkpoint, domain, prior.score, prior.n,
                               per_prompt.get(("eval", prior.stage_index, prior.step_index, domain)))
        log.info("evaluation reused", extra={"run_id": ctx.run_id, "stage": stage, "step": step, "domain": domain,
                                             "weight_version": version, "from_stage": prior.stage_index})
        todo.remove(domain)
    env = env_evals.env_domain(cfg)
    if env in todo:  # an env stage's own domain: whole validation episodes (services.orchestrator.env_evals)
        todo.remove(env)
        env_evals.evaluate(ctx, stage, step, version, EVAL_SEED)  # recorded there, per-task scores with it
    if todo:
        records = validation(ctx, stage, todo)
        k = cfg.eval.samples_per_prompt
        out = generate_current(ctx, records, k, eval_sampling(cfg), EVAL_SEED)
        scoring.submit(lambda: score_and_record(
            ctx, f"evals/stage-{stage}-step-{step}", records, out["texts"], k, lambda domain, mean, n, prompts:
            ctx.ledger.record_eval(ctx.run_id, stage, step, version, ctx.weights_uri(version), domain, mean, n, prompts)))


def eval_setting(ctx: RunContext, stage: int) -> tuple:
    """What an evaluation's score depends on besides the weights: how it is drawn (`draw_setting`)
    and the reward model."""
    return (*draw_setting(ctx, stage), getattr(ctx.stage(stage), "reward_model", None))


def draw_setting(ctx: RunContext, stage: int) -> tuple:
    """How stage `stage` draws its evaluations: the data, the prompts and samples per domain, the sampling."""
    cfg = ctx.stage(stage)
    return (cfg.data or ctx.config.data, cfg.eval.prompts_per_domain, cfg.eval.samples_per_prompt,
            eval_sampling(cfg).model_dump_json())


def comparable(ctx: RunContext, stage: int, evals: list[EvalRecord]) -> list[EvalRecord]:
    """The evaluations `teachers: auto` of MOPD stage `stage` may rank, per domain drawn one way only:
    those drawn the way `stage` draws its own when there are any, else all of them when they were
    all drawn one way. Scores drawn differently (greedy against sampled, other prompts or lengths)
    do not compare, so a domain evaluated several ways, none of them this stage's, is refused."""
    mine = draw_setting(ctx, stage)
    out: list[EvalRecord] = []
    for domain in dict.fromkeys(e.domain for e in evals):
        cands = [e for e in evals if e.domain == domain]
        ways = {draw_setting(ctx, e.stage_index) for e in cands}
        if mine in ways:
            cands = [e for e in cands if draw_setting(ctx, e.stage_index) == mine]
        elif len(ways) > 1:
            names = sorted({ctx.stage(e.stage_index).name for e in cands})
            raise FailedPrecondition(
                f"stages[{stage}].teachers: auto: domain {domain!r} was evaluated in {len(ways)} different ways "
                f"before this stage (stages {', '.join(names)}), none of them the way this stage evaluates; scores "
                f"drawn differently do not compare: give those stages and this one the same eval settings "
                f"(eval.sampling, prompts_per_domain, samples_per_prompt), or map {domain} to a checkpoint")
        out.extend(cands)
    return out


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


def evaluate_teachers(ctx: RunContext, stage: int, scoring: Scoring) -> None:
    """Each teacher of MOPD stage `stage` that is a weight version of this run, scored on its own
    domain under FRESH_SEED, `fresh_samples` answers a prompt, and recorded (role `teacher`); one
    checkpoint's samples are scored (`scoring`) while the policy loads and samples the next.

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
    k = cfg.fresh_k
    for version, domains in sorted(by_version.items()):
        records = validation(ctx, stage, domains)
        load_policy_weights(ctx, version)
        out = generate_at(ctx, version, records, k, eval_sampling(cfg), FRESH_SEED)
        scoring.submit(lambda v=version, records=records, texts=out["texts"]: score_and_record(
            ctx, f"evals/stage-{stage}-teachers-v{v}", records, texts, k, lambda domain, mean, n, prompts:
            ctx.ledger.record_fresh_eval(ctx.run_id, stage, "teacher", domain, ctx.weights_uri(v), mean, n, prompts)))
    if by_version:
        load_policy_weights(ctx, current_version(ctx))


def evaluate_student(ctx: RunContext, stage: int, version: int, scoring: Scoring) -> None:
    """MOPD stage `stage`'s final weights on each domain whose teacher was drawn again, under the same
    FRESH_SEED and as many answers a prompt (so student and teacher meet the same random numbers);
    recorded (role `student`). Sampled while the stage's last evaluation is still being scored (`scoring`)."""
    cfg = ctx.stage(stage)
    done = ctx.ledger.fresh_evals(ctx.run_id, stage, "student")
    todo = [d for d in sorted(ctx.ledger.fresh_evals(ctx.run_id, stage, "teacher")) if d not in done]
    if not todo:
        return
    records = validation(ctx, stage, todo)
    k = cfg.fresh_k
    out = generate_current(ctx, records, k, eval_sampling(cfg), FRESH_SEED)
    scoring.submit(lambda: score_and_record(
        ctx, f"evals/stage-{stage}-student-v{version}", records, out["texts"], k, lambda domain, mean, n, prompts:
        ctx.ledger.record_fresh_eval(ctx.run_id, stage, "student", domain, ctx.weights_uri(version), mean, n, prompts)))


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
    """Score `k` samples per record, keep them as artifact `key`, and call record(domain, mean, n,
    per_prompt) per domain with the mean reward over its samples that did not error and
    `per_prompt_scores` of them; return {domain: mean}."""
    scores = rollout.score(ctx.clients.reward, records, texts, k)
    ctx.artifacts.put(key, "samples", {"task_ids": [r.id for r in records for _ in range(k)], "texts": texts, **scores})
    results: dict[str, float] = {}
    for domain in dict.fromkeys(r.domain for r in records):
        idx = [i * k + j for i, r in enumerate(records) if r.domain == domain for j in range(k)]
        ok = [i for i in idx if not verdicts.is_error(scores["verdicts"][i])]
        if not ok:
            log.warning("every validation sample errored", extra={"run_id": ctx.run_id, "key": key, "domain": domain})
            continue
        mean = float(np.mean([scores["rewards"][i] for i in ok]))
        tasks = [(r.id, i) for i, r in enumerate(records) if r.domain == domain]
        record(domain, mean, len(ok), per_prompt_scores(tasks, scores["rewards"], scores["verdicts"], k))
        results[domain] = mean
    return results


def per_prompt_scores(tasks: list[tuple[str, int]], rewards, verdict_list, k: int) -> dict[str, float]:
    """{task id: avg@k} for each (task id, record index i) of `tasks`, its samples at i*k .. i*k+k-1 of
    `rewards`: s_p = mean_j r_pj over the prompt's samples j that did not error; a prompt whose
    samples all errored is left out. Two evaluations drawn alike score the same task ids."""
    out: dict[str, float] = {}
    for task_id, i in tasks:
        ok = [rewards[i * k + j] for j in range(k) if not verdicts.is_error(verdict_list[i * k + j])]
        if ok:
            out[task_id] = float(np.mean(ok))
    return out
