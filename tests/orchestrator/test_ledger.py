"""The step ledger on SQLite: exactly-once steps, forward-only phases, resume points, evals, weights."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound
from services.orchestrator.ledger import PHASES, Ledger, ResumePoint, step_id_for


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield led
    led.close()


@pytest.fixture
def run(ledger):
    run_id = ledger.create_run("demo", {"name": "demo", "stages": []})
    ledger.begin_stage(run_id, 0, "if-rl", "grpo", steps=3, start_weight_version=0)
    return run_id


def test_sqlite_file_is_in_wal_mode(ledger, tmp_path):
    with sqlite3.connect(tmp_path / "ledger.sqlite") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


class TestRuns:
    def test_create_read_status_and_cancel(self, ledger):
        run_id = ledger.create_run("demo", {"seed": 1})
        rec = ledger.run(run_id)
        assert (rec.name, rec.config, rec.status, rec.cancel_requested) == ("demo", {"seed": 1}, "pending", False)
        ledger.set_run_status(run_id, "running")
        ledger.request_cancel(run_id)
        assert ledger.run(run_id).status == "running" and ledger.cancel_requested(run_id)

    def test_bad_status_and_unknown_run(self, ledger):
        run_id = ledger.create_run("demo", {})
        with pytest.raises(InvalidArgument) as info:
            ledger.set_run_status(run_id, "paused")
        assert info.value.field == "status"
        with pytest.raises(NotFound, match="run 999"):
            ledger.run(999)

    def test_begin_stage_is_idempotent_and_checks_identity(self, ledger, run):
        again = ledger.begin_stage(run, 0, "if-rl", "grpo", steps=3)
        assert (again.status, again.start_weight_version) == ("running", 0)
        with pytest.raises(FailedPrecondition, match="stage 0 is 'if-rl'"):
            ledger.begin_stage(run, 0, "code-rl", "grpo", steps=3)
        assert [s.name for s in ledger.run(run).stages] == ["if-rl"]


class TestSteps:
    def test_begin_step_returns_the_existing_row_on_redelivery(self, ledger, run):
        first = ledger.begin_step(run, 0, 1)
        assert (first.step_id, first.phase, first.attempts) == (step_id_for(run, 0, 1), "drawn", 1)
        ledger.advance(first.step_id, "generated")
        again = ledger.begin_step(run, 0, 1)
        assert (again.phase, again.attempts) == ("generated", 2)
        assert len(ledger.steps(run)) == 1

    def test_advance_moves_forward_only(self, ledger, run):
        sid = ledger.begin_step(run, 0, 0).step_id
        assert ledger.advance(sid, "scored", metrics={"reward_mean": 0.25}, seconds=1.5)
        assert not ledger.advance(sid, "generated")          # going back is refused
        assert not ledger.advance(sid, "scored")             # the same phase again changes nothing
        assert ledger.advance(sid, "trained", metrics={"loss": 0.5}, seconds=2.0, weight_version=1)
        rec = ledger.step(sid)
        assert rec.phase == "trained" and rec.weight_version == 1
        assert rec.metrics == {"reward_mean": 0.25, "loss": 0.5}
        assert rec.timings == {"scored": 1.5, "trained": 2.0}
        assert rec.reached("scored") and not rec.reached("published")

    def test_a_refused_advance_does_not_touch_metrics(self, ledger, run):
        sid = ledger.begin_step(run, 0, 0).step_id
        ledger.advance(sid, "trained", metrics={"loss": 1.0})
        assert not ledger.advance(sid, "trained", metrics={"loss": 9.0})
        assert ledger.step(sid).metrics == {"loss": 1.0}

    def test_nan_metrics_are_stored_as_null(self, ledger, run):
        sid = ledger.begin_step(run, 0, 0).step_id
        ledger.advance(sid, "scored", metrics={"reward_mean": float("nan"), "n": 3})
        assert ledger.step(sid).metrics == {"reward_mean": None, "n": 3}

    def test_unknown_phase_and_step(self, ledger, run):
        sid = ledger.begin_step(run, 0, 0).step_id
        with pytest.raises(InvalidArgument) as info:
            ledger.advance(sid, "finished")
        assert info.value.field == "phase"
        with pytest.raises(NotFound, match="begin_step first"):
            ledger.advance("run-1/stage-0/step-99", "generated")
        with pytest.raises(NotFound):
            ledger.begin_step(12345, 0, 0)

    def test_concurrent_advances_exactly_one_wins(self, ledger, run):
        sid = ledger.begin_step(run, 0, 0).step_id
        barrier = threading.Barrier(6)
        results: list[bool] = []

        def worker(i: int) -> None:
            barrier.wait()
            results.append(ledger.advance(sid, "trained", metrics={"winner": i}))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [False] * 5 + [True]
        assert ledger.step(sid).phase == "trained" and "winner" in ledger.step(sid).metrics

    def test_concurrent_begin_step_creates_one_row(self, ledger, run):
        barrier = threading.Barrier(4)
        out = []

        def worker() -> None:
            barrier.wait()
            out.append(ledger.begin_step(run, 0, 2))

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(ledger.steps(run)) == 1 and sorted(r.attempts for r in out) == [1, 2, 3, 4]


class TestResumePoint:
    def test_walks_through_a_run(self, ledger, run):
        assert ledger.resume_point(run) == ResumePoint(0, 0, None, 0)
        sid = ledger.begin_step(run, 0, 0).step_id
        ledger.advance(sid, "scored")
        assert ledger.resume_point(run) == ResumePoint(0, 0, "scored", 0)
        ledger.advance(sid, "done", weight_version=1)
        assert ledger.resume_point(run) == ResumePoint(0, 1, None, 1)
        for step in (1, 2):
            ledger.advance(ledger.begin_step(run, 0, step).step_id, "done", weight_version=step + 1)
        assert ledger.resume_point(run) == ResumePoint(0, 3, None, 3)  # only the stage's end remains
        ledger.set_stage_status(run, 0, "succeeded")
        ledger.begin_stage(run, 1, "mopd", "mopd", steps=2, start_weight_version=3)
        assert ledger.resume_point(run) == ResumePoint(1, 0, None, 3)
        ledger.set_stage_status(run, 1, "succeeded")
        assert ledger.resume_point(run).finished

    def test_a_step_begun_ahead_does_not_hide_the_one_before_it(self, ledger, run):
        """max_staleness: step 1 sampled while step 0 trains; a crash then resumes step 0, not 1."""
        first = ledger.begin_step(run, 0, 0).step_id
        ledger.advance(first, "trained")
        ledger.advance(ledger.begin_step(run, 0, 1).step_id, "generated")
        assert ledger.resume_point(run) == ResumePoint(0, 0, "trained", 0)
        ledger.advance(first, "done", weight_version=1)
        assert ledger.resume_point(run) == ResumePoint(0, 1, "generated", 1)

    def test_survives_a_new_ledger_object(self, ledger, run, tmp_path):
        ledger.advance(ledger.begin_step(run, 0, 0).step_id, "published", weight_version=1)
        reopened = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
        assert reopened.resume_point(run) == ResumePoint(0, 0, "published", 1)
        reopened.close()

    def test_phases_are_the_design_order(self):
        assert PHASES == ("drawn", "generated", "scored", "trained", "published", "synced", "done")


class TestEvalsTeachersWeights:
    def test_evals_are_recorded_once_in_order(self, ledger, run):
        assert ledger.record_eval(run, 0, 3, 3, "ckpt/v3", "if", 0.5, 16)
        assert not ledger.record_eval(run, 0, 3, 3, "ckpt/v3", "if", 0.9, 16)
        ledger.record_eval(run, 0, 1, 1, "ckpt/v1", "if", 0.25, 16)
        ledger.record_eval(run, 1, 0, 4, "ckpt/v4", "mcqa", 0.75, 16)
        assert [(e.step_index, e.score) for e in ledger.evals(run, domain="if")] == [(1, 0.25), (3, 0.5)]
        assert [e.domain for e in ledger.evals(run, before_stage=1)] == ["if", "if"]

    @pytest.mark.parametrize(("score", "n", "field"), [(float("nan"), 4, "score"), (0.5, 0, "n")])
    def test_bad_eval_names_the_field(self, ledger, run, score, n, field):
        with pytest.raises(InvalidArgument) as info:
            ledger.record_eval(run, 0, 0, 0, "c", "if", score, n)
        assert info.value.field == field

    def test_per_prompt_scores_are_kept_with_their_evaluation_and_fresh_draw(self, ledger, run):
        assert ledger.record_eval(run, 0, -1, 0, "ckpt/v0", "if", 0.25, 4, per_prompt={"t1": 0.5, "t2": 0.0})
        assert not ledger.record_eval(run, 0, -1, 0, "ckpt/v0", "if", 0.25, 4, per_prompt={"t1": 1.0, "t2": 1.0})
        ledger.record_eval(run, 0, 3, 3, "ckpt/v3", "if", 0.5, 4)  # without them: the evaluation alone
        ledger.record_fresh_eval(run, 1, "teacher", "if", "ckpt/v3", 0.75, 4, per_prompt={"t1": 1.0, "t2": 0.5})
        assert ledger.prompt_scores(run) == {("eval", 0, -1, "if"): {"t1": 0.5, "t2": 0.0},
                                             ("teacher", 1, 0, "if"): {"t1": 1.0, "t2": 0.5}}
        assert [e.step_index for e in ledger.evals(run)] == [-1, 3]

    @pytest.mark.parametrize("per_prompt", [{}, {"t1": float("nan")}, {"t1": "high"}, {1: 0.5}])
    def test_bad_per_prompt_scores_name_the_field_and_record_nothing(self, ledger, run, per_prompt):
        with pytest.raises(InvalidArgument, match="per_prompt"):
            ledger.record_eval(run, 0, 0, 0, "c", "if", 0.5, 4, per_prompt=per_prompt)
        assert ledger.evals(run) == [] and ledger.prompt_scores(run) == {}

    def test_a_ledger_written_before_per_prompt_scores_gains_their_table(self, ledger, run, tmp_path):
        ledger.record_eval(run, 0, 0, 0, "c", "if", 0.5, 4, per_prompt={"t1": 0.5})
        with ledger.engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE cascade_prompt_scores")
        reopened = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
        assert reopened.prompt_scores(run) == {} and [e.score for e in reopened.evals(run)] == [0.5]
        reopened.record_eval(run, 0, 1, 1, "c", "if", 0.75, 4, per_prompt={"t1": 0.75})
        assert reopened.prompt_scores(run) == {("eval", 0, 1, "if"): {"t1": 0.75}}
        reopened.close()

    def test_teacher_choice_is_fixed_once_made(self, ledger, run):
        ledger.record_teacher(run, 1, "if", "ckpt/v3", 0.5)
        ledger.record_teacher(run, 1, "if", "ckpt/v3", 0.5)
        with pytest.raises(FailedPrecondition, match="already 'ckpt/v3'"):
            ledger.record_teacher(run, 1, "if", "ckpt/v9", 0.9)
        assert ledger.teachers(run, 1) == {"if": ("ckpt/v3", 0.5)}

    def test_a_fresh_draw_is_recorded_once_per_stage_role_and_domain(self, ledger, run):
        assert ledger.fresh_evals(run, 1, "teacher") == {}
        assert ledger.record_fresh_eval(run, 1, "teacher", "if", "ckpt/v3", 0.25, 256)
        assert not ledger.record_fresh_eval(run, 1, "teacher", "if", "ckpt/v3", 0.5, 256), "a retried task records nothing new"
        assert ledger.record_fresh_eval(run, 1, "student", "if", "ckpt/v9", 0.5, 256), "the student is another role"
        ledger.record_fresh_eval(run, 1, "teacher", "mcqa", "ckpt/v4", 0.75, 255)
        assert ledger.fresh_evals(run, 1, "teacher") == {"if": 0.25, "mcqa": 0.75}
        assert ledger.fresh_evals(run, 1, "student") == {"if": 0.5} and ledger.fresh_evals(run, 2, "teacher") == {}
        with pytest.raises(InvalidArgument, match="score"):
            ledger.record_fresh_eval(run, 2, "teacher", "if", "ckpt/v3", float("nan"), 4)
        with pytest.raises(InvalidArgument, match="n"):
            ledger.record_fresh_eval(run, 2, "teacher", "if", "ckpt/v3", 0.5, 0)
        with pytest.raises(InvalidArgument, match="role"):
            ledger.record_fresh_eval(run, 2, "judge", "if", "ckpt/v3", 0.5, 4)

    def test_weight_versions_refuse_a_different_checksum(self, ledger, run):
        ledger.record_weight_version(run, 1, "file:///w/v1", "a" * 64)
        ledger.record_weight_version(run, 1, "file:///w/v1", "a" * 64)
        ledger.record_weight_version(run, 2, "file:///w/v2", "b" * 64)
        with pytest.raises(FailedPrecondition, match="version 2 already has"):
            ledger.record_weight_version(run, 2, "file:///w/v2", "c" * 64)
        assert [v for v, _, _ in ledger.weight_versions(run)] == [1, 2]


def test_a_missing_folder_for_the_sqlite_file_is_created(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'new' / 'dir' / 'ledger.sqlite'}")
    assert led.create_run("r", {}) == 1 and (tmp_path / "new" / "dir" / "ledger.sqlite").is_file()
    led.close()
