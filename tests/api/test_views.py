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


def metric_step(stage: int, k: int, metrics: dict) -> StepRecord:
    return StepRecord(7, stage, k, f"run-7/stage-{stage}/step-{k}", "done", None, metrics, {}, 1)


def test_episode_figures_of_the_env_stages_and_their_totals():
    stages = [*STAGES, {"name": "tools-rl", "type": "grpo", "steps": 2, "domains": [], "env": "workbench"}]
    ep = {"samples": 4, "episodes/turns_mean": 2.0, "episodes/tool_errors": 1.0, "episodes/env_seconds": 0.6,
          "episodes/env_steps": 6.0, "episodes/env_seconds_per_turn": 0.1, "episodes/env_retries": 2.0,
          "episodes/env_lost": 0.0, "verdict/ok": 3.0, "verdict/limit_turns": 1.0}
    later = {**ep, "samples": 2, "episodes/turns_mean": 3.5, "episodes/env_seconds": 0.9, "episodes/env_steps": 3.0,
             "episodes/env_lost": 1.0, "verdict/ok": 1.0, "verdict/error": 1.0, "verdict/limit_turns": 0.0}
    steps = [metric_step(4, 1, later), metric_step(4, 0, ep), metric_step(1, 0, {"verdict/ok": 8.0})]
    record = run_record([], {"stages": stages})
    got = views.run_episodes(record, views.run_metrics(record, steps))
    assert [(s.stage_index, s.env) for s in got.stages] == [(4, "workbench")], "only the stage that names an env"
    st = got.stages[0]
    assert [s.step_index for s in st.steps] == [0, 1]
    assert st.steps[0].env_seconds_per_turn == pytest.approx(0.1) and st.steps[1].env_seconds_per_turn == pytest.approx(0.3)
    assert st.episodes == 6 and st.turns_mean == pytest.approx((2.0 * 4 + 3.5 * 2) / 6)
    assert st.tool_errors == 2 and st.env_retries == 4 and st.env_lost == 1
    assert st.env_seconds == pytest.approx(1.5) and st.env_seconds_per_turn == pytest.approx(1.5 / 9)
    assert st.verdicts == {"error": 1, "limit_turns": 1, "ok": 4}
    bare = views.episode_step(views.run_metrics(record, [metric_step(4, 0, {"episodes/turns_mean": 1.0})]).stages[4].steps[0])
    assert (bare.episodes, bare.env_seconds, bare.env_seconds_per_turn, bare.verdicts) == (0, None, None, {})


def test_mismatch_per_trained_rl_step_and_the_latest():
    figures = {f"train/{s}": 0.01 * (i + 1) for i, s in enumerate(views.MISMATCH_STATS)}
    steps = [metric_step(3, 1, {**figures, "train/mismatch_mean": 0.5}), metric_step(3, 0, figures),
             metric_step(1, 0, {"train/mismatch_max": 0.2, "loss": 1.0}), metric_step(0, 0, {"loss": 2.0})]
    got = views.run_mismatch(views.run_metrics(run_record([]), steps))
    assert [(s.stage_name, [p.step_index for p in s.points]) for s in got.stages] == [("if-rl", [0]), ("mopd", [0, 1])]
    assert got.stages[0].points[0].stats == {"mismatch_max": 0.2}
    assert got.latest["mismatch_mean"] == 0.5 and got.latest["kl_inf_train"] == pytest.approx(0.05)
    assert got.stats == list(views.MISMATCH_STATS)
