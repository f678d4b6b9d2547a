"""`teachers: auto`: per MOPD domain, the recorded checkpoint with the best validation score.

The paper distils each domain from "the strongest intermediate checkpoint" for it; here that is
the evaluation with the highest score for the domain in the ledger, ties going to the earliest
(lowest stage, then step). This module reads evaluations; it knows nothing about how they were
made or how a teacher is brought up.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from services.common.errors import NotFound
from services.orchestrator.ledger import EvalRecord, Ledger


class TeacherPick(NamedTuple):
    """The checkpoint a domain's teacher serves, with the evaluation that chose it."""

    checkpoint: str
    score: float
    stage: int
    step: int


def pick_best(evals: Iterable[EvalRecord], domains: Sequence[str]) -> dict[str, TeacherPick]:
    """argmax over evaluations e of `domain` of e.score; ties -> smallest (stage, step). Pure.

    Raises NotFound naming every domain without an evaluation.
    """
    best: dict[str, EvalRecord] = {}
    for e in evals:
        if e.domain not in domains:
            continue
        cur = best.get(e.domain)
        if cur is None or e.score > cur.score or (
            e.score == cur.score and (e.stage_index, e.step_index) < (cur.stage_index, cur.step_index)
        ):
            best[e.domain] = e
    missing = [d for d in domains if d not in best]
    if missing:
        raise NotFound(
            f"teachers: auto: domain(s) {', '.join(missing)} were never evaluated in this run; "
            "evaluate them in an earlier stage (eval.domains) or map them to a checkpoint")
    return {d: TeacherPick(best[d].checkpoint, best[d].score, best[d].stage_index, best[d].step_index)
            for d in domains}


def select_teachers(ledger: Ledger, run_id: int, domains: Sequence[str],
                    before_stage: int | None = None) -> dict[str, TeacherPick]:
    """Per domain, the best-evaluated checkpoint of run `run_id` (only stages < before_stage when given)."""
    return pick_best(ledger.evals(run_id, before_stage=before_stage), domains)
