"""Pure views: phase-time groups, the policy-step axis, stage progress, reward curves, teachers."""

from __future__ import annotations

from datetime import datetime

import pytest

from services.api import views
from services.api.schemas import StageSpan
from services.orchestrator.ledger import EvalRecord, RunRecord, StageRecord, StepRecord

T0 = datetime(2026, 1, 1, 12, 0, 0)
STAGES = [
    {"name": "sft", "type": "sft", "steps": 4, "domains": ["if", "mcqa"]},
    {"name": "if-rl", "type": "grpo", "steps": 3, "domains": ["if"]},
    {"name": "rm", "type": "rm", "steps": 5, "domains": ["rlhf"]},
    {"name": "mopd", "type": "mopd", "steps": 2, "domains": ["if", "mcqa"]},
]


def run_record(stages_begun: list[StageRecord], config: dict | None = None) -> RunRecord:
    return RunRecord(7, "demo", config if config is not None else {"stages": STAGES}, "running", False, T0, T0,
                     stages_begun, None)


def step(stage: int, k: int, phase: str = "done", timings: dict | None = None) -> StepRecord:
    return StepRecord(7, stage, k, f"run-7/stage-{stage}/step-{k}", phase, None, {"loss": 0.5}, timings or {}, 1)


def evaluation(stage: int, k: int, domain: str, score: float) -> EvalRecord:
    return EvalRecord(stage, k, 1, f"/w/{stage}-{k}", domain, score, 8)


class TestPhaseSeconds:
    @pytest.mark.parametrize(("kind", "timings", "expected"), [
        ("grpo", {"generated": 2, "scored": 1, "trained": 3, "published": 0.5, "synced": 0.25},
         {"generate": 2, "score": 1, "teacher": 0, "train": 3, "sync": 0.75}),
        ("mopd", {"generated": 2, "scored": 1, "trained": 3, "published": 0.5, "synced": 0.25},
         {"generate": 2, "score": 0, "teacher": 1, "train": 3, "sync": 0.75}),
        ("sft", {"drawn": 0.1, "trained": 1.0}, {"generate": 0.1, "score": 0, "teacher": 0, "train": 1.0, "sync": 0}),
        ("grpo", {"done": 9.0, "trained": "n/a", "scored": True}, dict.fromkeys(views.PHASE_GROUPS, 0.0)),
        ("rm", {}, dict.fromkeys(views.PHASE_GROUPS, 0.0)),
    ])
    def test_groups(self, kind, timings, expected):
        got = views.compute_phase_seconds(kind, timings)
        assert list(got) == list(views.PHASE_GROUPS)
        assert got == pytest.approx(expected)


def test_stage_spans_give_rm_stages_no_room_on_the_policy_axis():
    spans = views.compute_stage_spans(STAGES)
    assert [(s.start, s.end) for s in spans] == [(0, 4), (4, 7), (7, 7), (7, 9)]


@pytest.mark.parametrize(("step_index", "x"), [(-1, 4), (0, 5), (2, 7), (5, 7)])
def test_eval_x_places_the_baseline_at_the_stage_start_and_clips_at_its_end(step_index, x):
    assert views.eval_x(StageSpan(index=1, name="if-rl", type="grpo", start=4, end=7), step_index) == x


def test_stage_views_count_done_steps_and_mark_unbegun_stages_pending():
    begun = [StageRecord(0, "sft", "sft", 4, "succeeded", 0), StageRecord(1, "if-rl", "grpo", 3, "running", 4)]
    steps = [step(0, k) for k in range(4)] + [step(1, 0), step(1, 1, phase="scored")]
    got = views.stage_views(run_record(begun), steps)
    assert [(s.status, s.steps_done, s.steps_total, s.current_phase) for s in got] == [
        ("succeeded", 4, 4, None), ("running", 1, 3, "scored"), ("pending", 0, 5, None), ("pending", 0, 2, None)]
    summary = views.run_summary(run_record(begun), steps)
    assert (summary.stages_done, summary.stages_total, summary.steps_done, summary.steps_total) == (1, 4, 5, 14)
    assert summary.created_at.tzinfo is not None, "naive ledger times are UTC"


def test_a_config_without_stages_falls_back_to_the_ledger_rows():
    begun = [StageRecord(0, "a", "grpo", 2, "running", 0)]
    got = views.stage_views(run_record(begun, config={}), [step(0, 0)])
    assert [(s.name, s.steps_done, s.steps_total) for s in got] == [("a", 1, 2)]


def test_run_evals_one_curve_per_domain_in_order_of_first_evaluation():
    evals = [evaluation(0, -1, "mcqa", 0.1), evaluation(0, -1, "if", 0.2), evaluation(0, 3, "if", 0.5),
             evaluation(1, -1, "if", 0.5), evaluation(1, 2, "if", 0.8), evaluation(3, 1, "mcqa", 0.4)]
    got = views.run_evals(run_record([]), evals)
    assert [d.domain for d in got.domains] == ["mcqa", "if"]
    by = {d.domain: [(p.stage_name, p.step_index, p.x, p.score) for p in d.points] for d in got.domains}
    assert by["if"] == [("sft", -1, 0, 0.2), ("sft", 3, 4, 0.5), ("if-rl", -1, 4, 0.5), ("if-rl", 2, 7, 0.8)]
    assert by["mcqa"] == [("sft", -1, 0, 0.1), ("mopd", 1, 9, 0.4)]
    assert views.latest_rewards(got) == {"mcqa": 0.4, "if": 0.8}


def test_run_metrics_lists_every_stage_and_sums_phase_groups():
    steps = [step(1, 0, timings={"generated": 1.0, "scored": 0.5}), step(3, 0, timings={"scored": 2.0, "trained": 1.0})]
    got = views.run_metrics(run_record([]), steps)
    assert [len(s.steps) for s in got.stages] == [0, 1, 0, 1]
    assert got.stages[3].steps[0].phase_seconds["teacher"] == 2.0
    assert views.phase_totals(got) == {"generate": 1.0, "score": 0.5, "teacher": 2.0, "train": 1.0, "sync": 0.0}


def test_run_teachers_sorted_by_stage_and_domain():
    got = views.run_teachers(run_record([]), {3: {"mcqa": ("/w/b", 0.7), "if": ("/w/a", 0.6)}},
                             {3: {"teacher": {"if": 0.5}, "student": {"if": 0.55}}})
    assert [(s.stage_name, [(t.domain, t.checkpoint, t.score, t.remeasured_score, t.student_score) for t in s.teachers])
            for s in got.stages] == [("mopd", [("if", "/w/a", 0.6, 0.5, 0.55), ("mcqa", "/w/b", 0.7, None, None)])]
