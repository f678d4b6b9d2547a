"""`teachers: auto`: the best evaluated checkpoint per domain, ties to the earliest."""

from __future__ import annotations

import pytest

from services.common.errors import NotFound
from services.orchestrator.ledger import EvalRecord, Ledger
from services.orchestrator.selection import TeacherPick, pick_best, select_teachers


def ev(stage, step, domain, score, ckpt=None):
    return EvalRecord(stage, step, stage * 10 + step, ckpt or f"v{stage}.{step}", domain, score, 8)


class TestPickBest:
    def test_best_score_per_domain(self):
        evals = [ev(0, 2, "if", 0.25), ev(1, 3, "if", 0.75), ev(2, 1, "if", 0.5),
                 ev(1, 3, "mcqa", 0.5), ev(2, 1, "mcqa", 0.625)]
        assert pick_best(evals, ["if", "mcqa"]) == {
            "if": TeacherPick("v1.3", 0.75, 1, 3), "mcqa": TeacherPick("v2.1", 0.625, 2, 1)}

    def test_ties_go_to_the_earliest_whatever_the_order(self):
        evals = [ev(2, 0, "if", 0.5), ev(0, 4, "if", 0.5), ev(0, 6, "if", 0.5)]
        assert pick_best(evals, ["if"])["if"] == TeacherPick("v0.4", 0.5, 0, 4)

    def test_unevaluated_domains_are_named(self):
        with pytest.raises(NotFound, match=r"domain\(s\) tool, code were never evaluated"):
            pick_best([ev(0, 0, "if", 1.0)], ["if", "tool", "code"])


def test_select_teachers_reads_the_ledger(tmp_path):
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.sqlite'}")
    run = ledger.create_run("r", {})
    ledger.record_eval(run, 0, 1, 1, "ckpt/v1", "if", 0.25, 8)
    ledger.record_eval(run, 1, 2, 5, "ckpt/v5", "if", 0.5, 8)
    ledger.record_eval(run, 2, 0, 7, "ckpt/v7", "if", 0.875, 8)  # the MOPD stage itself: not a candidate
    assert select_teachers(ledger, run, ["if"], before_stage=2) == {"if": TeacherPick("ckpt/v5", 0.5, 1, 2)}
    assert select_teachers(ledger, run, ["if"])["if"].checkpoint == "ckpt/v7"
    ledger.close()
