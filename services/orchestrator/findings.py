"""What a run's evaluations say about the method's claims — computed, never asserted.

From the ledger's per-domain validation rewards (evals at step -1 are taken when a stage starts)
and the per-prompt scores behind them (`prompts`: Ledger.prompt_scores), each finding carries its
figure, a paired 95 % bootstrap interval over the validation prompts both checkpoints scored (the
same prompts and random numbers for both: services.orchestrator.intervals) and a verdict:
- `stage_gains`: each RL stage's own domains, reward at the stage's end vs the model it started
  from; holds when it rose by ≥ GAIN_THRESHOLD with the interval above zero;
- `forgetting`: a later stage lowering a domain below its level at the end of an earlier stage;
  it counts only beyond its interval (a drop of ≥ FORGET_THRESHOLD, the interval below zero);
- `mopd_recovery`: per MOPD domain, the reward at the stage's end as a fraction of its teacher's
  score (the claim: at least 90 %, i.e. mean(student - 0.9 teacher) > 0) - both drawn again with one
  fresh seed where the stage did so (the score that chose a teacher is the best of several noisy
  ones, so it overstates it), else the last evaluation against the evaluation that chose the teacher.
Without per-prompt scores (a ledger written before they were kept) a finding has no interval and
is `not shown`. Pure functions over EvalRecords and the run's stage list; the report renders them.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.orchestrator import intervals
from services.orchestrator.intervals import HOLDS, Interval
from services.orchestrator.ledger import EvalRecord

RECOVERY_TARGET = 0.9
GAIN_THRESHOLD = 0.05
FORGET_THRESHOLD = 0.05

PromptScores = dict[tuple[str, int, int, str], dict[str, float]]
"""(source, stage, step, domain) -> {task id: score}, as Ledger.prompt_scores returns it."""


@dataclass(frozen=True)
class StageGain:
    stage: str
    domain: str
    start: float
    end: float
    interval: Interval | None = None
    """end - start per prompt, paired."""

    @property
    def verdict(self) -> str:
        return intervals.verdict(self.interval, 1, GAIN_THRESHOLD)

    @property
    def holds(self) -> bool:
        return self.verdict == HOLDS


@dataclass(frozen=True)
class Forgetting:
    domain: str
    learned_in: str
    level: float
    lowered_by: str
    lowered_to: float
    interval: Interval | None = None
    """lowered_to - level per prompt, paired."""

    @property
    def verdict(self) -> str:
        return intervals.verdict(self.interval, -1, FORGET_THRESHOLD)

    @property
    def holds(self) -> bool:
        """The drop counts: beyond its interval and by at least the threshold."""
        return self.verdict == HOLDS


@dataclass(frozen=True)
class Recovery:
    domain: str
    teacher_score: float
    end: float
    chosen_score: float | None = None
    """The score that chose the teacher, when `teacher_score` and `end` are the fresh draws."""
    interval: Interval | None = None
    """mean(student) / mean(teacher) over the paired prompts (same resamples as `margin`)."""
    margin: Interval | None = None
    """student - RECOVERY_TARGET * teacher per prompt, paired: the claim holds when it is above zero."""
    scored: bool = True
    """False for a teacher this run never scored (an explicit checkpoint from elsewhere, not drawn
    again): `teacher_score` is then a placeholder, and the domain's recovery is not shown."""

    @property
    def fraction(self) -> float:
        """end / teacher score; a teacher that scored 0 is matched by any end reward."""
        return self.end / self.teacher_score if self.teacher_score > 0 else 1.0

    @property
    def verdict(self) -> str:
        return intervals.verdict(self.margin, 1, 0.0)

    @property
    def holds(self) -> bool:
        return self.verdict == HOLDS


def _at(evals: list[EvalRecord], stage: int, domain: str) -> list[EvalRecord]:
    return sorted((e for e in evals if e.stage_index == stage and e.domain == domain), key=lambda e: e.step_index)


def _scores(prompts: PromptScores | None, e: EvalRecord) -> dict[str, float] | None:
    return (prompts or {}).get(("eval", e.stage_index, e.step_index, e.domain))


def paired(after: dict[str, float] | None, before: dict[str, float] | None, scale: float = 1.0) -> Interval | None:
    """The interval of mean(after - scale * before) over the prompts both scored; None without them."""
    if not after or not before:
        return None
    a, b = intervals.paired_scores(after, before)
    return intervals.paired_bootstrap(a, b, scale=scale) if a else None


def stage_gains(stages: list[dict], evals: list[EvalRecord], prompts: PromptScores | None = None) -> list[StageGain]:
    """Start (step -1) vs end reward of every RL stage on each of its own domains."""
    out = []
    for i, st in enumerate(stages):
        if st["type"] not in ("grpo", "mopd"):
            continue
        for d in st["domains"]:
            rows = _at(evals, i, d)
            if len(rows) >= 2 and rows[0].step_index == -1:
                out.append(StageGain(st["name"], d, rows[0].score, rows[-1].score,
                                     paired(_scores(prompts, rows[-1]), _scores(prompts, rows[0]))))
    return out


def forgetting(stages: list[dict], evals: list[EvalRecord], prompts: PromptScores | None = None) -> list[Forgetting]:
    """Per domain trained in a stage and evaluated at the end of a later one: (domain, stage that
    trained it, its level then, later stage, its level there, the paired interval of the change) -
    the first later stage where the drop counts, else the later stage where it sank lowest."""
    out = []
    for i, st in enumerate(stages):
        for d in st["domains"]:
            learned = _at(evals, i, d)
            if not learned:
                continue
            level = learned[-1]
            found = []
            for j in range(i + 1, len(stages)):
                later = _at(evals, j, d)
                if later:
                    found.append(Forgetting(d, st["name"], level.score, stages[j]["name"], later[-1].score,
                                            paired(_scores(prompts, later[-1]), _scores(prompts, level))))
            if found:
                out.append(next((f for f in found if f.holds), min(found, key=lambda f: f.lowered_to)))
    return out


def mopd_recovery(stages: list[dict], evals: list[EvalRecord], teachers: dict[int, dict[str, tuple[str, float]]],
                  fresh: dict[int, dict[str, dict[str, float]]] | None = None,
                  prompts: PromptScores | None = None) -> list[Recovery]:
    """Per MOPD stage domain: the student's fresh draw at the stage's end vs its teacher's (`fresh`:
    stage -> role -> domain -> score) when both exist, else the last evaluation vs the evaluation
    that chose the teacher. Never one of each: two seeds' luck would not cancel. An explicit teacher
    that no evaluation of this run scored has nothing to be compared with (`scored` False)."""
    out = []
    for i, st in enumerate(stages):
        if st["type"] != "mopd":
            continue
        drawn = (fresh or {}).get(i, {})
        teacher, student = drawn.get("teacher", {}), drawn.get("student", {})
        for d, (ckpt, score) in sorted(teachers.get(i, {}).items()):
            rows = _at(evals, i, d)
            if d in teacher and d in student:
                t, s = (prompts or {}).get(("teacher", i, 0, d)), (prompts or {}).get(("student", i, 0, d))
                out.append(Recovery(d, teacher[d], student[d], score, *_recovery_intervals(s, t)))
            elif rows:
                chose = next((e for e in evals if e.checkpoint == ckpt and e.domain == d and e.stage_index < i
                              and e.score == score), None)
                out.append(Recovery(d, score, rows[-1].score, None,
                                    *_recovery_intervals(_scores(prompts, rows[-1]), chose and _scores(prompts, chose)),
                                    scored=chose is not None))
    return out


def _recovery_intervals(student: dict[str, float] | None, teacher: dict[str, float] | None) -> tuple:
    """(fraction interval, margin interval) over the paired prompts, or (None, None) without them."""
    margin = paired(student, teacher, RECOVERY_TARGET)
    if margin is None:
        return None, None
    s, t = intervals.paired_scores(student, teacher)
    return intervals.paired_ratio_bootstrap(s, t), margin
