"""What a run's evaluations say about the method's claims — computed, never asserted.

From the ledger's per-domain validation rewards (evals at step -1 are taken when a stage starts):
- `stage_gains`: each RL stage's own domains, reward at the stage's end vs the model it started from;
- `forgetting`: a later stage lowering a domain below its level at the end of an earlier stage;
- `mopd_recovery`: per MOPD domain, the reward at the stage's end as a fraction of its teacher's
  score (the claim: at least 90 %) - both drawn again with one fresh seed where the stage did so
  (the score that chose a teacher is the best of several noisy ones, so it overstates it), else
  the last evaluation against the score that chose the teacher.
Pure functions over EvalRecords and the run's stage list; the report renders what they return.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.orchestrator.ledger import EvalRecord

RECOVERY_TARGET = 0.9


@dataclass(frozen=True)
class StageGain:
    stage: str
    domain: str
    start: float
    end: float

    @property
    def holds(self) -> bool:
        return self.end > self.start


@dataclass(frozen=True)
class Forgetting:
    domain: str
    learned_in: str
    level: float
    lowered_by: str
    lowered_to: float


@dataclass(frozen=True)
class Recovery:
    domain: str
    teacher_score: float
    end: float
    chosen_score: float | None = None
    """The score that chose the teacher, when `teacher_score` and `end` are the fresh draws."""

    @property
    def fraction(self) -> float:
        """end / teacher score; a teacher that scored 0 is matched by any end reward."""
        return self.end / self.teacher_score if self.teacher_score > 0 else 1.0

    @property
    def holds(self) -> bool:
        return self.fraction >= RECOVERY_TARGET


def _at(evals: list[EvalRecord], stage: int, domain: str) -> list[EvalRecord]:
    return sorted((e for e in evals if e.stage_index == stage and e.domain == domain), key=lambda e: e.step_index)


def stage_gains(stages: list[dict], evals: list[EvalRecord]) -> list[StageGain]:
    """Start (step -1) vs end reward of every RL stage on each of its own domains."""
    out = []
    for i, st in enumerate(stages):
        if st["type"] not in ("grpo", "mopd"):
            continue
        for d in st["domains"]:
            rows = _at(evals, i, d)
            if len(rows) >= 2 and rows[0].step_index == -1:
                out.append(StageGain(st["name"], d, rows[0].score, rows[-1].score))
    return out


def forgetting(stages: list[dict], evals: list[EvalRecord]) -> list[Forgetting]:
    """(domain, stage that trained it, its level then, later stage, the lower level it ended at)."""
    out = []
    for i, st in enumerate(stages):
        for d in st["domains"]:
            learned = _at(evals, i, d)
            if not learned:
                continue
            level = learned[-1].score
            for j in range(i + 1, len(stages)):
                later = _at(evals, j, d)
                if later and later[-1].score < level:
                    out.append(Forgetting(d, st["name"], level, stages[j]["name"], later[-1].score))
                    break
    return out


def mopd_recovery(stages: list[dict], evals: list[EvalRecord], teachers: dict[int, dict[str, tuple[str, float]]],
                  fresh: dict[int, dict[str, dict[str, float]]] | None = None) -> list[Recovery]:
    """Per MOPD stage domain: the student's fresh draw at the stage's end vs its teacher's (`fresh`:
    stage -> role -> domain -> score) when both exist, else the last evaluation vs the score that
    chose the teacher. Never one of each: two seeds' luck would not cancel."""
    out = []
    for i, st in enumerate(stages):
        if st["type"] != "mopd":
            continue
        drawn = (fresh or {}).get(i, {})
        teacher, student = drawn.get("teacher", {}), drawn.get("student", {})
        for d, (_ckpt, score) in sorted(teachers.get(i, {}).items()):
            rows = _at(evals, i, d)
            if d in teacher and d in student:
                out.append(Recovery(d, teacher[d], student[d], score))
            elif rows:
                out.append(Recovery(d, score, rows[-1].score))
    return out
