"""Response models of the control API: what every route returns, typed, so /openapi.json documents it.

Plain pydantic models built by services.api.views from ledger records; this module knows nothing
about the ledger, FastAPI or how the numbers were produced.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

MetricValue = float | str | None


class StageView(BaseModel):
    """One stage of a run: its place in the cascade and how far it got."""

    index: int = Field(description="0-based position in the cascade.")
    name: str
    type: str = Field(description="sft, grpo, mopd or rm.")
    status: str = Field(description="pending (not begun), running, succeeded, failed or cancelled.")
    steps_done: int = Field(description="Steps whose phase is `done`.")
    steps_total: int = Field(description="Steps the cascade asks of this stage.")
    current_phase: str | None = Field(description="Phase of the step in flight; null when none is.")
    domains: list[str] = Field(description="Domains the stage trains on.")


class RunSummary(BaseModel):
    """A run as listed: identity, status and overall progress."""

    id: int
    name: str
    status: str = Field(description="pending, running, succeeded, failed or cancelled.")
    cancel_requested: bool
    created_at: datetime
    updated_at: datetime
    stages_done: int = Field(description="Stages that succeeded.")
    stages_total: int
    steps_done: int = Field(description="Steps done over all stages.")
    steps_total: int
    error: str | None = Field(description="Why the run failed (one line), when it did.")


class RunDetail(RunSummary):
    """A run with its stages and the cascade it runs."""

    stages: list[StageView]
    config: dict[str, Any] = Field(description="The validated cascade, as submitted.")


class StepView(BaseModel):
    """One step: its phase, what it measured and how long each phase took."""

    stage_index: int
    step_index: int
    step_id: str
    phase: str = Field(description="Last phase reached: drawn, generated, scored, trained, published, synced, done.")
    weight_version: int | None
    attempts: int = Field(description="Times a task began this step (1 = never redelivered).")
    metrics: dict[str, MetricValue]
    timings: dict[str, float] = Field(description="Seconds per ledger phase, as recorded.")
    phase_seconds: dict[str, float] = Field(
        description="Seconds per phase group (generate, score, teacher, train, sync), see views.PHASE_GROUPS.")


class StageMetrics(BaseModel):
    index: int
    name: str
    type: str
    steps: list[StepView]


class RunMetrics(BaseModel):
    """Per stage and per step: phase, metrics and timings."""

    run_id: int
    phase_groups: list[str] = Field(description="Order of the keys of every step's phase_seconds.")
    stages: list[StageMetrics]


class EpisodeStepView(BaseModel):
    """One step of a multi-turn stage: what its episodes did (the step's `episodes/*` and `verdict/*` metrics)."""

    step_index: int
    episodes: int = Field(description="Episodes the step rolled out (G per task).")
    turns_mean: float | None = Field(description="Assistant turns per episode, mean over the step's episodes.")
    tool_errors: int = Field(description="Tool calls answered with an error (malformed, unknown tool, failing call).")
    env_seconds: float | None = Field(description="Environment seconds of the step's tool calls, all episodes.")
    env_seconds_per_turn: float | None = Field(description="Environment seconds per stepped turn.")
    env_retries: int = Field(description="Fresh episodes opened after the env service lost one.")
    env_lost: int = Field(description="Episodes masked because the env service lost them and every retry was spent.")
    verdicts: dict[str, int] = Field(description="Episodes per verdict (ok, error, limit_turns, ...), once scored.")


class StageEpisodes(BaseModel):
    """A stage that rolls out episodes on an environment: its steps and their totals."""

    stage_index: int
    stage_name: str
    env: str = Field(description="The environment the stage names (`env:`).")
    steps: list[EpisodeStepView]
    episodes: int
    turns_mean: float | None = Field(description="Assistant turns per episode over the stage's episodes.")
    tool_errors: int
    env_seconds: float
    env_seconds_per_turn: float | None = Field(description="Σ environment seconds / Σ stepped turns of the stage.")
    env_retries: int
    env_lost: int
    verdicts: dict[str, int]


class RunEpisodes(BaseModel):
    """The multi-turn figures of every stage with an environment (none: an empty list)."""

    run_id: int
    stages: list[StageEpisodes]


class MismatchPoint(BaseModel):
    step_index: int
    stats: dict[str, float] = Field(description="The step's mismatch figures, by name (see RunMismatch.stats).")


class StageMismatch(BaseModel):
    stage_index: int
    stage_name: str
    type: str
    points: list[MismatchPoint] = Field(description="Every trained step of the stage that recorded them, in order.")


class RunMismatch(BaseModel):
    """The train/inference mismatch per RL step (the trainer's `train/<stat>` step metrics)."""

    run_id: int
    stats: list[str] = Field(description="mismatch_mean, mismatch_p99, mismatch_max: per-token |log π_train − log π_inf|; "
                                         "window_dropped_fraction: tokens outside MOPD's window; kl_inf_train: the "
                                         "sequence-level KL(π_inf‖π_train) estimate.")
    latest: dict[str, float] = Field(description="The last step that has them (the gauge cascade_orchestrator_train_mismatch).")
    stages: list[StageMismatch]


class EvalPoint(BaseModel):
    """One validation score of one domain."""

    stage_index: int
    stage_name: str
    step_index: int = Field(description="Step after which it was taken; -1 = the baseline when the stage started.")
    x: int = Field(description="Position on the run's policy-step axis (see StageSpan).")
    weight_version: int
    checkpoint: str
    score: float = Field(description="Mean validation reward.")
    n: int = Field(description="Validation samples scored (errored ones left out).")


class DomainEvals(BaseModel):
    domain: str
    points: list[EvalPoint]


class StageSpan(BaseModel):
    """Where a stage lies on the policy-step axis: [start, end]; rm stages (policy unchanged) have start == end."""

    index: int
    name: str
    type: str
    start: int
    end: int


class RunEvals(BaseModel):
    """Per-domain validation rewards across all steps of all stages."""

    run_id: int
    stages: list[StageSpan]
    domains: list[DomainEvals]


class TeacherView(BaseModel):
    domain: str
    checkpoint: str
    score: float = Field(description="Validation score that chose it (0 for an explicitly mapped teacher).")
    remeasured_score: float | None = Field(
        default=None, description="Its score on its domain drawn again with a fresh seed when the stage started "
        "(samples independent of those that chose it); null when not drawn again.")
    student_score: float | None = Field(
        default=None, description="The stage's final weights on this domain under the same fresh seed (the MOPD "
        "recovery claim compares it with remeasured_score); null until the stage has ended.")


class StageTeachers(BaseModel):
    stage_index: int
    stage_name: str
    teachers: list[TeacherView]


class RunTeachers(BaseModel):
    """The MOPD teachers chosen per stage and domain."""

    run_id: int
    stages: list[StageTeachers]


class ClaimFigure(BaseModel):
    """One comparison a claim rests on, with its paired 95 % bootstrap interval over validation prompts."""

    subject: str = Field(description="What is compared, e.g. `rl/mcqa` or `if: if-rl → mcqa-rl`.")
    kind: Literal["change", "fraction"] = Field(
        description="change: after - before, in reward; fraction: the MOPD student's reward over its teacher's.")
    estimate: float = Field(description="The paired per-prompt figure, of its kind.")
    low: float | None = Field(description="Lower end of the 95 % interval; null without per-prompt scores.")
    high: float | None = Field(description="Upper end of the 95 % interval; null without per-prompt scores.")
    n: int = Field(description="Validation prompts both checkpoints scored (0 without per-prompt scores).")
    verdict: Literal["holds", "not shown", "fails"]


class Claim(BaseModel):
    """One of the method's claims, computed from the run's evaluations so far."""

    claim: str
    verdict: Literal["holds", "not shown", "fails"] = Field(
        description="holds: every interval excludes zero in the claimed direction (and the figure reaches the "
                    "claim's threshold); fails: one excludes zero the other way; not shown: otherwise.")
    holds: bool = Field(description="Whether the evaluations recorded so far bear it out (verdict `holds`).")
    evidence: str = Field(description="The figures it rests on, in words, each with its 95 % interval.")
    figures: list[ClaimFigure] = Field(default_factory=list)


class RunClaims(BaseModel):
    """What the run's numbers say, as `cascade report` states it; provisional until the run ends."""

    run_id: int
    final: bool = Field(description="True once the run has ended: the verdicts will not change.")
    claims: list[Claim]


class Health(BaseModel):
    status: str = Field(description="`ok` when the ledger answers.")


class ErrorBody(BaseModel):
    """Every error: a readable `detail`; for an invalid cascade, `problems` lists each bad field."""

    detail: str
    problems: list[str] = Field(default_factory=list)
