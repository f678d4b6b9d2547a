"""NeMo Gym rows (the released Nemotron-Cascade-2 RL data) read exactly as they are: the shared
sample rows, the domain of each shape, and refusals naming what a row lacks."""

from __future__ import annotations

import json

import pytest

from services.common.errors import InvalidArgument
from services.common.tasks import TaskRecord, load_tasks
from services.common.workbench_task import from_nemo_gym
from tests.needs import NEMO_GYM_SAMPLES as SAMPLES
from tests.needs import needs_samples

OURS = ("response", "expect", "subset", "provenance")  # the fields the fixture adds to each record
DOMAIN_OF_SUBSET = {
    "IF-RL": "if", "multi-domain-RL/mcqa": "mcqa", "multi-domain-RL/workbench": "workbench",
    "multi-domain-RL/structured_outputs": "structured", "SWE-RL": "swe",
}


def sample_rows() -> list[dict]:
    return [json.loads(line) for line in SAMPLES.read_text().splitlines() if line.strip()]


def as_released(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in OURS}


@needs_samples
def test_every_shared_row_is_read_as_is_with_its_domain_from_its_shape(tmp_path):
    rows = sample_rows()
    path = tmp_path / "mixed.jsonl"  # one file of every shape, as MOPD's is
    path.write_text("".join(json.dumps(as_released(r)) + "\n" for r in rows))
    records = load_tasks(path)
    assert len(records) == len(rows) == 17
    for row, rec in zip(rows, records):
        want = DOMAIN_OF_SUBSET.get(row["subset"]) or rec.domain
        assert rec.domain == want and rec.nemo_gym_shaped
        assert rec.messages[-1].content == row["responses_create_params"]["input"][-1]["content"]
        if "id" in row:
            assert rec.id == str(row["id"])
    mopd = [rec.domain for row, rec in zip(rows, records) if row["subset"] == "MOPD"]
    assert mopd == ["mcqa", "if"]


@needs_samples
def test_if_rows_keep_integer_ids_and_null_kwargs():
    row = as_released(sample_rows()[0])
    rec = TaskRecord.parse(row)
    assert (rec.id, rec.kwargs) == ("8654", [{}, None, {"num_words": 204, "relation": "less than"}])
    assert row["id"] == 8654  # the row itself is not changed


@needs_samples
def test_workbench_rows_parse_into_the_task_form():
    rows = [r for r in sample_rows() if r["subset"] == "multi-domain-RL/workbench"]
    tasks = [from_nemo_gym(as_released(r)) for r in rows]
    assert [t.id for t in tasks] == ["0", "1", "2"]
    assert all(len(t.tools) == 27 and t.messages[0]["role"] == "system" for t in tasks)
    first = tasks[0].ground_truth[0]
    assert first.name == "email_reply_email" and first.arguments["email_id"] == "00000057"
    assert [len(t.ground_truth) for t in tasks] == [1, 1, 3]
    assert tasks[1].category == "workbench_calendar" and tasks[0].params["parallel_tool_calls"] is False
    assert tasks[0].tool("email_reply_email") is not None


@pytest.mark.parametrize(
    ("raw", "field", "words"),
    [
        ({"prompt": "x"}, "domain", "options + expected_answer"),
        ({"prompt": "x", "options": [{"A": "a"}]}, "expected_answer", "missing"),
        ({"prompt": "x", "expected_answer": "A"}, "options", "missing"),
        ({"prompt": "x", "options": [{"A": "a"}], "expected_answer": "B"}, "expected_answer", "option letters"),
        ({"prompt": "x", "options": [{"A": "a"}], "expected_answer": "A", "grading_mode": "vibes"}, "grading_mode", "one of"),
        ({"prompt": "x", "environment_name": "chess"}, "environment_name", "workbench"),
        ({"prompt": "x", "schema_str": "{}", "schema_type": "ini"}, "schema_type", "one of"),
        ({"prompt": "x", "instance": {"instance_id": "a"}}, "instance.FAIL_TO_PASS", "at least one"),
        ({"prompt": "x", "instance": {"instance_id": "a", "FAIL_TO_PASS": "[\"t\"]"}}, "metadata.relevant_file_contents", "map"),
        ({"responses_create_params": {"input": "x"}, "environment_name": "workbench", "ground_truth": []},
         "responses_create_params.tools", "tools"),
    ],
)
def test_a_row_that_fits_no_shape_is_refused_naming_what_is_missing(raw, field, words):
    with pytest.raises(InvalidArgument) as err:
        TaskRecord.parse(raw)
    assert err.value.field == field and words in err.value.message


def test_workbench_ground_truth_arguments_must_be_json_objects():
    row = {
        "id": 3, "environment_name": "workbench",
        "responses_create_params": {"input": "hi", "tools": [{"type": "function", "name": "f"}]},
        "ground_truth": [{"name": "f", "arguments": "{oops"}],
    }
    with pytest.raises(InvalidArgument) as err:
        TaskRecord.parse(row)
    assert err.value.field == "ground_truth[0].arguments"
    row["ground_truth"] = [{"name": "g", "arguments": "{}"}]
    with pytest.raises(InvalidArgument) as err:
        from_nemo_gym(row)
    assert err.value.field == "ground_truth[0].name"


def test_verifier_metadata_layout_is_an_if_row():
    rec = TaskRecord.parse({
        "id": 1, "responses_create_params": {"input": "hi"},
        "verifier_metadata": {"instruction_id_list": ["punctuation:no_comma"], "kwargs": [None], "prompt": "hi"},
    })
    assert rec.domain == "if"


def test_a_workbench_row_id_zero_is_kept():
    row = {"id": 0, "environment_name": "workbench", "ground_truth": [],
           "responses_create_params": {"input": "hi", "tools": [{"name": "f"}]}}
    assert TaskRecord.parse(row).id == "0"


def test_the_renamed_environment_and_ground_truth_kept_as_text():
    row = {"id": "4", "environment_name": "workplace_assistant", "category": "workplace_assistant_email",
           "responses_create_params": {"input": "hi", "tools": [{"type": "function", "name": "f"}]},
           "ground_truth": "[{'name': 'f', 'arguments': '{\"a\": 1}'}]"}
    assert TaskRecord.parse(row).domain == "workbench"
    assert from_nemo_gym(row).ground_truth[0].arguments == {"a": 1}
    row["ground_truth"] = "[{'name': 'f', oops"
    with pytest.raises(InvalidArgument) as err:
        TaskRecord.parse(row)
    assert err.value.field == "ground_truth"
