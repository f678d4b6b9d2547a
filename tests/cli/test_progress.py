"""services.cli.progress: the plain progress lines, on hand-built ledger records and a fake clock."""

from __future__ import annotations

import inspect
import io
import time
from datetime import UTC, datetime

import pytest
from rich.console import Console

from services.cli import demo
from services.cli.progress import (
    DEFAULT_EVERY_S,
    Narrator,
    ProgressLog,
    compute_seconds_per_step,
    compute_time_left,
    format_duration,
)
from services.orchestrator.ledger import EvalRecord, RunRecord, StageRecord, StepRecord

STAGES = [{"name": "sft", "type": "sft", "steps": 10, "domains": ["code"]},
          {"name": "rl", "type": "grpo", "steps": 4, "domains": ["code"]}]
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def run(*stage_status: str, status: str = "running") -> RunRecord:
    stages = [StageRecord(i, s["name"], s["type"], s["steps"], st, 0) for i, (s, st) in enumerate(zip(STAGES, stage_status))]
    return RunRecord(1, "small", {"stages": STAGES}, status, False, NOW, NOW, stages)


def steps(stage: int, done: int, in_flight: str | None = None, seconds: float = 0.0) -> list[StepRecord]:
    out = [StepRecord(1, stage, k, f"s{stage}-{k}", "done", None, {}, {"trained": seconds}, 1) for k in range(done)]
    if in_flight:
        out.append(StepRecord(1, stage, done, f"s{stage}-{done}", in_flight, None, {}, {}, 1))
    return out


def test_durations_and_estimates():
    assert [format_duration(s) for s in (0, 42, 245, 3720)] == ["0s", "42s", "4m05s", "1h02m"]
    assert compute_seconds_per_step(10.0, 4) == 2.5 and compute_seconds_per_step(10.0, 0) is None
    assert compute_time_left(4, 10, 2.5) == 15.0 and compute_time_left(4, 10, None) is None


def test_stage_start_heartbeat_with_measured_time_left_and_stage_end():
    log = ProgressLog(1, STAGES, every=60, now=0)
    assert log.update(run("running"), steps(0, 0, "drawn"), [], 0) == [
        "stage 1/2 sft (sft, 10 steps; code) started"]
    assert log.update(run("running"), steps(0, 2, "trained"), [], 59) == [], "quiet until a minute has passed"
    beat = log.update(run("running"), steps(0, 4, "trained"), [], 60)
    assert beat == ["stage 1/2 sft: step 4/10 (trained) · elapsed stage 1m00s, run 1m00s · "
                    "about 1m30s left in this stage (15.00 s/step measured)"], "6 steps left x 60 s / 4 steps"
    assert log.update(run("running"), steps(0, 5), [], 100) == []
    assert log.update(run("running"), steps(0, 10), [], 125)[0].endswith(
        "step 10/10 (evaluating) · elapsed stage 2m05s, run 2m05s · every step done; evaluating the stage's end")
    evals = [EvalRecord(0, 9, 1, "/w/v1", "code", 0.5, 16)]
    lines = log.update(run("succeeded", "running"), steps(0, 10), evals, 130)  # the clock saw step 10 at 125 s
    assert lines == ["validation after sft step 10: code=0.50",
                     "stage 1/2 sft succeeded: 10/10 steps in 2m10s (12.50 s/step)",
                     "stage 2/2 rl (grpo, 4 steps; code) started"]


def test_a_stage_already_under_way_is_estimated_from_the_ledgers_recorded_seconds():
    log = ProgressLog(1, STAGES, every=2, now=0)
    log.update(run("succeeded", "running"), steps(0, 10) + steps(1, 2, "generated", seconds=3.0), [], 0)
    beat = log.update(run("succeeded", "running"), steps(0, 10) + steps(1, 2, "generated", seconds=3.0), [], 2)
    assert beat[0].endswith("about 6s left in this stage (3.00 s/step measured)"), beat


def test_without_a_running_stage_the_heartbeat_says_it_waits():
    log = ProgressLog(1, STAGES, every=5, now=0)
    assert log.update(run(status="pending"), [], [], 5) == [
        "run 1 pending: waiting for a worker to take the next stage (run 5s)"]


def test_the_interval_must_be_positive_and_the_demo_defaults_to_a_minute():
    with pytest.raises(ValueError, match="progress interval"):
        ProgressLog(1, STAGES, every=0)
    option = inspect.signature(demo.demo).parameters["progress_every"].default
    assert DEFAULT_EVERY_S == 60 and option.default == 60


def test_the_narrator_writes_the_log_and_a_non_terminal_stdout(tmp_path, capsys):
    narrator = Narrator(tmp_path / "logs" / "demo.log", Console(file=io.StringIO(), force_terminal=False), every=60)
    narrator.say("stage 1/2 sft started")
    out = capsys.readouterr().out
    assert out.endswith(" stage 1/2 sft started\n") and out[2] == ":" and out[5] == ":"
    assert (tmp_path / "logs" / "demo.log").read_text() == out
    assert (tmp_path / "logs" / "demo.log").stat().st_mode & 0o077 == 0, "the log holds the page's token: owner only"


def test_on_a_terminal_only_the_log_gets_the_plain_lines(tmp_path, capsys):
    screen = io.StringIO()
    narrator = Narrator(tmp_path / "demo.log", Console(file=screen, force_terminal=True), every=60)
    narrator.say("heartbeat")
    narrator.say("run page: http://127.0.0.1:1/", to_terminal=True)
    assert capsys.readouterr().out == "" and "heartbeat" not in screen.getvalue()
    assert "run page: http://127.0.0.1:1/" in screen.getvalue()
    assert len((tmp_path / "demo.log").read_text().splitlines()) == 2


class FakeLedger:
    """The three reads `watch` makes, answering one snapshot further along each time the run is read."""

    def __init__(self):
        self.snapshots = [(run("running"), steps(0, 3, "trained")),
                          (run("succeeded", "running"), steps(0, 10) + steps(1, 2)),
                          (run("succeeded", "succeeded", status="succeeded"), steps(0, 10) + steps(1, 4))]
        self.reads = -1

    def run(self, run_id):
        self.reads = min(self.reads + 1, len(self.snapshots) - 1)
        return self.snapshots[self.reads][0]

    def steps(self, run_id):
        return self.snapshots[max(0, self.reads)][1]

    def evals(self, run_id):
        return []


@pytest.mark.parametrize("terminal", [False, True])
def test_watch_follows_the_run_to_its_end(tmp_path, capsys, terminal):
    from services.cli.progress import watch

    screen = io.StringIO()
    narrator = Narrator(tmp_path / "demo.log", Console(file=screen, force_terminal=terminal), every=60)
    tables = []
    assert watch(1, FakeLedger(), narrator, table=lambda run_id: tables.append(run_id) or "bars") == "succeeded"
    logged = [line[9:] for line in (tmp_path / "demo.log").read_text().splitlines()]
    assert logged[0] == "stage 1/2 sft (sft, 10 steps; code) started" and logged[-1].startswith("run 1 succeeded after")
    assert "stage 2/2 rl succeeded: 4/4 steps" in " ".join(logged)
    out = capsys.readouterr().out
    assert (out == "") is terminal, "plain lines on stdout only when it is not a terminal"
    assert bool(tables) is terminal and ("bars" in screen.getvalue()) is terminal


@pytest.mark.parametrize("terminal", [False, True])
def test_blocking_work_is_narrated_every_interval_in_the_log(tmp_path, capsys, terminal):
    narrator = Narrator(tmp_path / "demo.log", Console(file=io.StringIO(), force_terminal=terminal), every=0.2)
    with narrator.waiting("starting the stack"):
        time.sleep(0.5)
    logged = [line[9:] for line in (tmp_path / "demo.log").read_text().splitlines()]
    assert logged[0] == "starting the stack ..." and logged[-1].startswith("starting the stack: done in")
    assert sum(line.startswith("starting the stack: still at it after") for line in logged) >= 2
    assert (capsys.readouterr().out == "") is terminal
