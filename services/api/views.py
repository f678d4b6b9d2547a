"""Pure functions from ledger records to the API's response models: progress, step timings, reward curves.

Nothing here touches a database or the network; every function takes records and returns models,
so each is tested on hand-built records. The cascade's stage list (name, type, steps, domains) is
read from the run's stored config, which the API validated when the run was submitted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from services.api.schemas import (
    Claim,
    ClaimFigure,
    DomainEvals,
    EpisodeStepView,
    EvalPoint,
    MismatchPoint,
    RunClaims,
    RunDetail,
    RunEpisodes,
    RunEvals,
    RunMetrics,
    RunMismatch,
    RunSummary,
    RunTeachers,
    StageEpisodes,
    StageMetrics,
    StageMismatch,
    StageSpan,
    StageTeachers,
    StageView,
    StepView,
    TeacherView,
)
from services.orchestrator.ledger import EvalRecord, RunRecord, StepRecord

PHASE_GROUPS = ("generate", "score", "teacher", "train", "sync")
"""The step-time breakdown the page and /metrics show, in pipeline order."""
PHASE_GROUP_OF: dict[str, str] = {
    "drawn": "generate", "generated": "generate", "scored": "score",
    "trained": "train", "published": "sync", "synced": "sync",
}
"""Ledger phase (the key of a step's `timings`) -> the group its seconds count towards."""
PHASE_GROUP_BY_STAGE_TYPE: dict[str, dict[str, str]] = {"mopd": {"scored": "teacher"}}
"""Per stage type, phases whose work differs: an MOPD step's `scored` phase is the teachers' log-probs."""
POLICY_STAGE_TYPES = ("sft", "grpo", "mopd")
"""Stage types that change the policy and so take room on the policy-step axis (rm trains a reward model)."""


def compute_phase_seconds(stage_type: str, timings: Mapping[str, Any]) -> dict[str, float]:
    """Seconds per phase group of one step: group g gets sum_{p : group(p) = g} timings[p].

    group(p) = PHASE_GROUP_BY_STAGE_TYPE[stage_type].get(p, PHASE_GROUP_OF[p]); phases outside the
    map (e.g. `done`) and non-numeric values are ignored. Every group is present (0.0 when absent).
    Example: grpo {generated: 2, scored: 1, trained: 3, published: .5, synced: .25}
             -> {generate: 2, score: 1, teacher: 0, train: 3, sync: .75}.
    """
    out = dict.fromkeys(PHASE_GROUPS, 0.0)
    overrides = PHASE_GROUP_BY_STAGE_TYPE.get(stage_type, {})
    for phase, seconds in timings.items():
        group = overrides.get(phase, PHASE_GROUP_OF.get(phase))
        if group is not None and isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            out[group] += float(seconds)
    return out


def compute_stage_spans(stages: Sequence[Mapping[str, Any]]) -> list[StageSpan]:
    """Each stage's [start, end] on the policy-step axis: start_s = sum_{j<s} width_j, end_s = start_s + width_s,
    width = steps for sft / grpo / mopd stages and 0 for rm stages (they leave the policy unchanged)."""
    spans, start = [], 0
    for i, st in enumerate(stages):
        width = int(st["steps"]) if st["type"] in POLICY_STAGE_TYPES else 0
        spans.append(StageSpan(index=i, name=st["name"], type=st["type"], start=start, end=start + width))
        start += width
    return spans


def eval_x(span: StageSpan, step_index: int) -> int:
    """x of an evaluation taken after 0-based step k of a stage: start + k + 1, at most `end`;
    the baseline (k = -1) sits at `start`, where the previous stage's last evaluation also sits."""
    return min(span.end, span.start + step_index + 1)


def stage_list(run: RunRecord) -> list[dict[str, Any]]:
    """The run's stages (name, type, steps, domains) from its config; ledger rows fill in for a bare config."""
    stages = run.config.get("stages") if isinstance(run.config, dict) else None
    if stages:
        return [{"name": s["name"], "type": s["type"], "steps": s["steps"], "domains": list(s.get("domains", []))}
                for s in stages]
    return [{"name": s.name, "type": s.type, "steps": s.steps, "domains": []} for s in run.stages]


def _steps_done(steps: Sequence[StepRecord]) -> Counter:
    return Counter(s.stage_index for s in steps if s.phase == "done")


def stage_views(run: RunRecord, steps: Sequence[StepRecord]) -> list[StageView]:
    """Every stage of the cascade with its status (pending until begun) and steps done / total."""
    begun = {s.index: s for s in run.stages}
    done = _steps_done(steps)
    in_flight = {s.stage_index: s.phase for s in steps if s.phase != "done"}
    return [StageView(index=i, name=st["name"], type=st["type"],
                      status=begun[i].status if i in begun else "pending",
                      steps_done=done[i], steps_total=st["steps"], current_phase=in_flight.get(i),
                      domains=st["domains"])
            for i, st in enumerate(stage_list(run))]


def as_utc(t: datetime) -> datetime:
    """The ledger writes UTC; SQLite hands it back without a zone, so say it is UTC."""
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def run_summary(run: RunRecord, steps: Sequence[StepRecord]) -> RunSummary:
    stages = stage_views(run, steps)
    return RunSummary(id=run.id, name=run.name, status=run.status, cancel_requested=run.cancel_requested,
                      created_at=as_utc(run.created_at), updated_at=as_utc(run.updated_at),
                      stages_done=sum(s.status == "succeeded" for s in stages), stages_total=len(stages),
                      steps_done=sum(s.steps_done for s in stages), steps_total=sum(s.steps_total for s in stages),
                      error=run.error)


def run_detail(run: RunRecord, steps: Sequence[StepRecord]) -> RunDetail:
    return RunDetail(**run_summary(run, steps).model_dump(), stages=stage_views(run, steps), config=run.config)


def run_metrics(run: RunRecord, steps: Sequence[StepRecord]) -> RunMetrics:
    """Steps grouped by stage (every stage listed, even before it begins), each with its phase breakdown."""
    stages = stage_list(run)
    out = [StageMetrics(index=i, name=st["name"], type=st["type"], steps=[]) for i, st in enumerate(stages)]
    for s in steps:
        if s.stage_index >= len(out):
            continue
        stage_type = out[s.stage_index].type
        timings = {k: float(v) for k, v in s.timings.items() if isinstance(v, (int, float))}
        out[s.stage_index].steps.append(StepView(
            stage_index=s.stage_index, step_index=s.step_index, step_id=s.step_id, phase=s.phase,
            weight_version=s.weight_version, attempts=s.attempts, metrics=s.metrics, timings=timings,
            phase_seconds=compute_phase_seconds(stage_type, timings)))
    return RunMetrics(run_id=run.id, phase_groups=list(PHASE_GROUPS), stages=out)


def run_evals(run: RunRecord, evals: Sequence[EvalRecord]) -> RunEvals:
    """One curve per domain (domains in order of first evaluation), points in the order they were taken."""
    spans = compute_stage_spans(stage_list(run))
    curves: dict[str, list[EvalPoint]] = {}
    for e in evals:
        if e.stage_index >= len(spans):
            continue
        span = spans[e.stage_index]
        curves.setdefault(e.domain, []).append(EvalPoint(
            stage_index=e.stage_index, stage_name=span.name, step_index=e.step_index, x=eval_x(span, e.step_index),
            weight_version=e.weight_version, checkpoint=e.checkpoint, score=e.score, n=e.n))
    return RunEvals(run_id=run.id, stages=spans,
                    domains=[DomainEvals(domain=d, points=p) for d, p in curves.items()])


def run_teachers(run: RunRecord, chosen: Mapping[int, Mapping[str, tuple[str, float]]],
                 fresh: Mapping[int, Mapping[str, Mapping[str, float]]] | None = None) -> RunTeachers:
    """The teachers of every MOPD stage that began, domains sorted, with the stage's fresh draws
    (`fresh`: stage -> role `teacher` / `student` -> domain -> score)."""
    stages, fresh = stage_list(run), fresh or {}

    def drawn(i: int, role: str, d: str) -> float | None:
        return fresh.get(i, {}).get(role, {}).get(d)

    return RunTeachers(run_id=run.id, stages=[
        StageTeachers(stage_index=i, stage_name=stages[i]["name"] if i < len(stages) else str(i),
                      teachers=[TeacherView(domain=d, checkpoint=c, score=sc, remeasured_score=drawn(i, "teacher", d),
                                            student_score=drawn(i, "student", d))
                                for d, (c, sc) in sorted(picks.items())])
        for i, picks in sorted(chosen.items())])


def run_claims(run: RunRecord, claims: Sequence) -> RunClaims:
    """The claims (services.orchestrator.report.Claim) with their intervals, final once the run has ended."""
    return RunClaims(run_id=run.id, final=run.status in ("succeeded", "failed", "cancelled"),
                     claims=[Claim(claim=c.claim, verdict=c.verdict, holds=c.holds, evidence=c.evidence,
                                   figures=[ClaimFigure(**vars(f)) for f in c.figures]) for c in claims])


def latest_rewards(evals: RunEvals) -> dict[str, float]:
    """The most recent validation score of each domain (the last point of its curve)."""
    return {d.domain: d.points[-1].score for d in evals.domains if d.points}


MISMATCH_STATS = ("mismatch_mean", "mismatch_p99", "mismatch_max", "window_dropped_fraction", "kl_inf_train")
"""The trainer's per-step train/inference mismatch figures (services/trainer/mismatch.py), as `train/<stat>`."""


def latest_mismatch(metrics: RunMetrics) -> dict[str, float]:
    """The mismatch figures of the last step that has them (an RL step the trainer trained)."""
    for stage in reversed(metrics.stages):
        for step in sorted(stage.steps, key=lambda s: s.step_index, reverse=True):
            found = {s: step.metrics[f"train/{s}"] for s in MISMATCH_STATS
                     if isinstance(step.metrics.get(f"train/{s}"), int | float)}
            if found:
                return {s: float(v) for s, v in found.items()}
    return {}


def phase_totals(metrics: RunMetrics) -> dict[str, float]:
    """Seconds spent per phase group over every step of the run."""
    out = dict.fromkeys(PHASE_GROUPS, 0.0)
    for stage in metrics.stages:
        for step in stage.steps:
            for group, seconds in step.phase_seconds.items():
                out[group] += seconds
    return out


def stage_envs(run: RunRecord) -> dict[int, str]:
    """Stage index -> the environment it names (`env:`), for the stages that name one."""
    stages = run.config.get("stages") if isinstance(run.config, dict) else None
    return {i: s["env"] for i, s in enumerate(stages or []) if isinstance(s, dict) and s.get("env")}


def _number(metrics: Mapping[str, Any], key: str) -> float | None:
    v = metrics.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def episode_step(step: StepView) -> EpisodeStepView:
    """A step's episode figures from the metrics episodes.episode_metrics and reward_metrics recorded
    (`episodes/<figure>`, `samples`, `verdict/<v>`); a figure the step has not recorded is null or 0."""
    m = step.metrics

    def n(key: str) -> float | None:
        return _number(m, f"episodes/{key}")

    seconds, stepped = n("env_seconds"), n("env_steps")
    per_turn = n("env_seconds_per_turn") if seconds is None or not stepped else seconds / stepped
    return EpisodeStepView(
        step_index=step.step_index, episodes=int(_number(m, "samples") or 0), turns_mean=n("turns_mean"),
        tool_errors=int(n("tool_errors") or 0), env_seconds=seconds, env_seconds_per_turn=per_turn,
        env_retries=int(n("env_retries") or 0), env_lost=int(n("env_lost") or 0),
        verdicts={k.removeprefix("verdict/"): int(v) for k, v in sorted(m.items())
                  if k.startswith("verdict/") and isinstance(v, int | float)})


def stage_episodes(index: int, name: str, env: str, steps: Sequence[EpisodeStepView]) -> StageEpisodes:
    """A stage's totals: turns_mean = Σ_k turns_k·episodes_k / Σ_k episodes_k over the steps that recorded
    turns; env_seconds_per_turn = Σ env seconds / Σ stepped turns, where stepped turns of step k =
    env_seconds_k / env_seconds_per_turn_k; counts and verdicts summed."""
    with_turns = [s for s in steps if s.turns_mean is not None and s.episodes]
    episodes = sum(s.episodes for s in with_turns)
    seconds = sum(s.env_seconds or 0.0 for s in steps)
    stepped = sum(s.env_seconds / s.env_seconds_per_turn for s in steps if s.env_seconds and s.env_seconds_per_turn)
    verdicts: Counter = Counter()
    for s in steps:
        verdicts.update(s.verdicts)
    return StageEpisodes(
        stage_index=index, stage_name=name, env=env, steps=list(steps), episodes=sum(s.episodes for s in steps),
        turns_mean=sum(s.turns_mean * s.episodes for s in with_turns) / episodes if episodes else None,
        tool_errors=sum(s.tool_errors for s in steps), env_seconds=seconds,
        env_seconds_per_turn=seconds / stepped if stepped else None,
        env_retries=sum(s.env_retries for s in steps), env_lost=sum(s.env_lost for s in steps),
        verdicts=dict(sorted(verdicts.items())))


def run_episodes(run: RunRecord, metrics: RunMetrics) -> RunEpisodes:
    """Every stage that names an environment, with its steps that generated episodes, in step order."""
    envs = stage_envs(run)
    out = []
    for stage in metrics.stages:
        if stage.index not in envs:
            continue
        steps = [episode_step(s) for s in sorted(stage.steps, key=lambda s: s.step_index)
                 if "episodes/turns_mean" in s.metrics]
        out.append(stage_episodes(stage.index, stage.name, envs[stage.index], steps))
    return RunEpisodes(run_id=run.id, stages=out)


def run_mismatch(metrics: RunMetrics) -> RunMismatch:
    """Every RL stage's trained steps with their mismatch figures (stages without any left out), and the latest."""
    stages = []
    for stage in metrics.stages:
        points = []
        for step in sorted(stage.steps, key=lambda s: s.step_index):
            stats = {s: v for s in MISMATCH_STATS if (v := _number(step.metrics, f"train/{s}")) is not None}
            if stats:
                points.append(MismatchPoint(step_index=step.step_index, stats=stats))
        if points:
            stages.append(StageMismatch(stage_index=stage.index, stage_name=stage.name, type=stage.type, points=points))
    return RunMismatch(run_id=metrics.run_id, stats=list(MISMATCH_STATS), latest=latest_mismatch(metrics), stages=stages)
