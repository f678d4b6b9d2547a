"""ControlCore over a real SQLite ledger: cascade parsing, submit, cancel, reads."""

from __future__ import annotations

import json

import pytest
import yaml

from services.api.core import ControlCore, PayloadTooLarge, SubmitFailed, UnsupportedMediaType, parse_cascade
from services.common.errors import FailedPrecondition, NotFound
from services.orchestrator.cascade_config import CascadeConfigError
from services.orchestrator.ledger import Ledger
from tests.api.conftest import CASCADE, record_run

YAML = yaml.safe_dump(CASCADE).encode()
JSON = json.dumps(CASCADE).encode()


class TestParseCascade:
    @pytest.mark.parametrize(("body", "content_type"), [
        (YAML, "application/yaml"), (YAML, "text/yaml; charset=utf-8"), (YAML, "application/x-yaml"),
        (JSON, "application/json"), (JSON, "Application/JSON"),
    ])
    def test_yaml_and_json(self, body, content_type):
        cascade = parse_cascade(body, content_type)
        assert cascade.name == "small" and [s.name for s in cascade.stages] == ["if-rl", "mcqa-rl", "rm", "mopd"]

    @pytest.mark.parametrize("content_type", [None, "", "text/plain", "application/x-www-form-urlencoded"])
    def test_other_media_types_are_refused(self, content_type):
        with pytest.raises(UnsupportedMediaType, match="application/yaml"):
            parse_cascade(YAML, content_type)

    def test_every_bad_field_is_listed(self):
        bad = {**CASCADE, "seed": -1, "stages": [
            {**CASCADE["stages"][0], "steps": 0, "rollouts_per_prompt": 1},
            {**CASCADE["stages"][1], "sampling": {"temprature": 1.0}},
        ]}
        with pytest.raises(CascadeConfigError) as err:
            parse_cascade(json.dumps(bad).encode(), "application/json")
        problems = err.value.problems
        for where in ("body: seed:", "body: stages[0].steps:", "body: stages[0].rollouts_per_prompt:",
                      "body: stages[1].sampling.temprature: unknown key; did you mean 'temperature'?"):
            assert any(p.startswith(where) for p in problems), (where, problems)

    @pytest.mark.parametrize(("body", "content_type", "message"), [
        (b"name: [unclosed", "application/yaml", "body: not valid YAML"),
        (b"{", "application/json", "body: not valid JSON"),
        (b"- a\n- b\n", "text/yaml", "the top level must be a mapping .* \\(got list\\)"),
        (b"\xff\xfe", "application/yaml", "body: not UTF-8 text"),
    ])
    def test_unreadable_bodies(self, body, content_type, message):
        with pytest.raises(CascadeConfigError, match=message):
            parse_cascade(body, content_type)


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield led
    led.close()


def test_submit_records_the_run_then_hands_its_id_to_the_submitter(ledger):
    handed: list[int] = []

    def submit(run_id: int) -> None:  # the submitter sees the run already in the ledger
        assert ledger.run(run_id).status == "pending"
        handed.append(run_id)

    run = ControlCore(ledger, submit).submit(YAML, "application/yaml")
    assert handed == [run.id] and run.status == "pending" and run.steps_total == 8
    assert ledger.run(run.id).config["stages"][3]["teachers"] == "auto"


def test_a_failed_hand_over_marks_the_run_failed_and_says_why(ledger):
    def submit(run_id: int) -> None:
        raise ConnectionRefusedError("broker at 127.0.0.1:1 refused")

    with pytest.raises(SubmitFailed, match="run 1: could not hand the run to the orchestrator"):
        ControlCore(ledger, submit).submit(YAML, "application/yaml")
    assert ledger.run(1).status == "failed" and "broker at 127.0.0.1:1 refused" in ledger.run(1).error


def test_an_invalid_cascade_records_nothing(ledger):
    with pytest.raises(CascadeConfigError):
        ControlCore(ledger, lambda _id: None).submit(b"name: x", "application/yaml")
    assert ledger.runs() == []


def test_a_body_over_the_limit_is_refused(ledger):
    with pytest.raises(PayloadTooLarge, match="limit is 64"):
        ControlCore(ledger, lambda _id: None, max_body_bytes=64).submit(YAML, "application/yaml")


def test_cancel_a_running_run_but_not_a_finished_one(ledger):
    core = ControlCore(ledger, lambda _id: None)
    running = record_run(ledger)
    assert core.cancel(running).cancel_requested and ledger.cancel_requested(running)
    done = record_run(ledger, status="succeeded")
    with pytest.raises(FailedPrecondition, match=f"run {done} already succeeded"):
        core.cancel(done)


def test_reads_of_an_unknown_run_raise_not_found(ledger):
    core = ControlCore(ledger, lambda _id: None)
    for read in (core.run, core.cancel, core.metrics, core.evals, core.teachers):
        with pytest.raises(NotFound, match="run 42 is not in the ledger"):
            read(42)


def test_reads_of_a_recorded_run(ledger):
    core = ControlCore(ledger, lambda _id: None)
    run_id = record_run(ledger)
    run = core.run(run_id)
    assert [(s.name, s.status, s.steps_done, s.steps_total) for s in run.stages] == [
        ("if-rl", "succeeded", 2, 2), ("mcqa-rl", "succeeded", 2, 2), ("rm", "succeeded", 1, 1), ("mopd", "running", 1, 3)]
    assert run.stages[3].current_phase == "scored"
    teachers = core.teachers(run_id)
    assert [(s.stage_name, [t.domain for t in s.teachers]) for s in teachers.stages] == [("mopd", ["if", "mcqa"])]
    assert core.run_index() == [(run_id, "running")] and core.healthy()


def test_a_domain_without_data_in_the_data_folder_is_refused_at_submit(ledger, tmp_path):
    from services.common.synth import write_dataset

    write_dataset(tmp_path / "data", n_train=2, n_val=2, n_sft=2, n_pref=2, domains=["if"])
    cascade = {**CASCADE, "data": str(tmp_path / "data")}
    with pytest.raises(CascadeConfigError) as err:
        ControlCore(ledger, lambda _id: None).submit(yaml.safe_dump(cascade).encode(), "application/yaml")
    problems = err.value.problems
    assert f"body: stages[0] (if-rl).domains: domain 'mcqa' has no data in {tmp_path / 'data'} " \
           "(mcqa/validation.jsonl is missing)" in problems
    assert any(p.startswith("body: stages[1] (mcqa-rl).domains: domain 'mcqa'") and "mcqa/train.jsonl" in p
               for p in problems)
    assert any(p.startswith("body: stages[2] (rm).domains: domain 'rlhf'") and "rlhf/preferences.jsonl" in p
               for p in problems)
    assert not any("'if'" in p for p in problems), problems
    assert ledger.runs() == []


def test_a_data_folder_that_does_not_exist_is_refused_at_submit(ledger, tmp_path):
    cascade = {**CASCADE, "data": str(tmp_path / "nowhere")}
    with pytest.raises(CascadeConfigError, match=r"stages\[0\] \(if-rl\)\.data: .*nowhere is not a folder"):
        ControlCore(ledger, lambda _id: None).submit(yaml.safe_dump(cascade).encode(), "application/yaml")
