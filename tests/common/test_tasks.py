"""Task records: the accepted shapes, per-domain rules, and the loader's file:line:field errors."""

from __future__ import annotations

import json

import pytest

from services.common.errors import InvalidArgument
from services.common.tasks import DOMAINS, TaskFileError, TaskRecord, load_tasks, task_to_json

USER = [{"role": "user", "content": "hi"}]
VALID = {
    "math": {"ground_truth": "42"},
    "code": {
        "tests": [{"input": "1 2\n", "output": "3\n"}, {"assert": "add(1, 2) == 3"}],
        "entry_point": "add",
    },
    "if": {
        "instruction_id_list": ["punctuation:no_comma", "keywords:existence"],
        "kwargs": [{}, {"keywords": ["sea"]}],
    },
    "mcqa": {"ground_truth": "B", "choices": {"A": "3", "B": "9", "C": "4", "D": "1"}},
    "structured": {"schema_str": '{"type": "object", "properties": {"age": {"type": "integer"}}}'},
    "tool": {
        "tools": [{"name": "get_weather", "description": "d", "parameters": {"type": "object"}}],
        "expected_calls": [{"name": "get_weather", "arguments": {"city": "oslo"}}],
    },
    "rlhf": {"chosen": "Sure, here it is.", "rejected": ""},
    "long_context": {"ground_truth": "4821"},
    "swe": {
        "repo": {"files": {"pkg/m.py": "x = 1\n", "tests/test_m.py": "def test_x(): pass\n"}},
        "patch_tests": {"fail_to_pass": ["tests/test_m.py::test_x"], "pass_to_pass": []},
        "reference_patch": "--- a/pkg/m.py\n+++ b/pkg/m.py\n",
    },
    "workbench": {
        "environment_name": "workbench",
        "category": "workbench_email",
        "responses_create_params": {
            "input": USER,
            "tools": [{"type": "function", "name": "email_send_email", "parameters": {"type": "object"}}],
        },
        "ground_truth": [{"name": "email_send_email", "arguments": '{"recipient": "a@b.c"}'}],
    },
    "python": {"ground_truth": "17575"},
}
# (domain, change to the valid record, field the error must name)
INVALID = [
    ("math", {"ground_truth": None}, "ground_truth"),
    ("long_context", {"ground_truth": ""}, "ground_truth"),
    ("python", {"ground_truth": None}, "ground_truth"),
    ("mcqa", {"ground_truth": "E"}, "ground_truth"),
    ("code", {"tests": []}, "tests"),
    ("code", {"tests": [{"input": "1\n"}]}, "tests[0]"),
    ("code", {"entry_point": "not a name"}, "entry_point"),
    ("if", {"kwargs": [{}]}, "kwargs"),
    ("if", {"instruction_id_list": [], "kwargs": []}, "instruction_id_list"),
    ("if", {"instruction_id_list": ["no colon", "x:y"]}, "instruction_id_list[0]"),
    ("structured", {"schema_str": "{not json"}, "schema_str"),
    ("structured", {"schema_str": "[1, 2]"}, "schema_str"),
    ("tool", {"expected_calls": None}, "expected_calls"),
    ("tool", {"expected_calls": [{"name": "get_time", "arguments": {}}]}, "expected_calls[0].name"),
    ("tool", {"tools": [{"description": "no name"}]}, "tools[0].name"),
    ("rlhf", {"rejected": None}, "rejected"),
    ("rlhf", {"chosen": " "}, "chosen"),
    ("swe", {"repo": {"files": {}}}, "repo"),
    ("swe", {"patch_tests": {"fail_to_pass": []}}, "patch_tests.fail_to_pass"),
    ("swe", {"patch_tests": {"fail_to_pass": ["tests/other.py::t"]}}, "patch_tests.fail_to_pass[0]"),
]


def record(domain: str, **changes) -> dict:
    return {"id": f"{domain}-1", "domain": domain, "messages": USER, **VALID[domain], **changes}


@pytest.mark.parametrize("domain", DOMAINS)
def test_one_valid_record_per_domain_round_trips(domain):
    rec = TaskRecord.parse(record(domain))
    assert rec.domain == domain and rec.messages[0].content == "hi"
    back = TaskRecord.from_json(task_to_json(rec))
    assert back == rec


@pytest.mark.parametrize(("domain", "change", "field"), INVALID)
def test_invalid_record_names_the_field(domain, change, field):
    with pytest.raises(InvalidArgument) as err:
        TaskRecord.parse(record(domain, **change))
    assert err.value.field == field


def test_nvidia_shape_with_message_list_is_normalised_and_extras_kept():
    raw = {
        "responses_create_params": {
            "input": [
                {"role": "developer", "content": "be brief"},
                {"role": "user", "content": [{"type": "input_text", "text": "Write a poem."}]},
            ]
        },
        "instruction_id_list": ["punctuation:no_comma"],
        "kwargs": [{"num_words": None}],
        "agent_ref": {"name": "instruction_following"},
    }
    rec = TaskRecord.parse(raw)
    assert rec.domain == "if"  # inferred from instruction_id_list
    assert [(m.role, m.content) for m in rec.messages] == [("system", "be brief"), ("user", "Write a poem.")]
    assert rec.model_extra["agent_ref"] == {"name": "instruction_following"}
    assert rec.id.startswith("if-") and rec.id == TaskRecord.parse(raw).id  # derived, stable
    assert json.loads(task_to_json(rec))["agent_ref"] == {"name": "instruction_following"}


def test_nvidia_shape_with_string_input_and_plain_prompt():
    a = TaskRecord.parse(
        {
            "id": "a",
            "domain": "math",
            "ground_truth": 7,
            "responses_create_params": {"input": "What is 3 + 4?"},
        }
    )
    b = TaskRecord.parse({"id": "b", "domain": "math", "ground_truth": "7", "prompt": "What is 3 + 4?"})
    assert a.messages == b.messages and a.messages[0].role == "user"
    assert a.ground_truth == "7"  # numbers become strings


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"domain": "math", "ground_truth": "1"}, "messages"),
        ({"domain": "math", "ground_truth": "1", "prompt": 5}, "prompt"),
        (
            {"domain": "math", "ground_truth": "1", "responses_create_params": {"model": "x"}},
            "responses_create_params",
        ),
        ({"domain": "chess", "prompt": "x"}, "domain"),
        ({"prompt": "x"}, "domain"),
        (
            {"domain": "math", "ground_truth": "1", "messages": [{"role": "robot", "content": "x"}]},
            "messages.0.role",
        ),
        ({"domain": "if", "prompt": "x", "instruction_id_list": ["a:b"], "kwargs": "[{]"}, "kwargs"),
    ],
)
def test_bad_shapes_name_the_field(raw, field):
    with pytest.raises(InvalidArgument) as err:
        TaskRecord.parse(raw)
    assert err.value.field == field


def test_json_text_fields_are_decoded():
    rec = TaskRecord.parse(
        {
            "id": "x",
            "domain": "if",
            "prompt": "p",
            "instruction_id_list": ["keywords:existence"],
            "kwargs": '[{"keywords": ["a"]}]',
        }
    )
    assert rec.kwargs == [{"keywords": ["a"]}]


def test_from_json_rejects_bad_json():
    with pytest.raises(InvalidArgument) as err:
        TaskRecord.from_json("{oops")
    assert err.value.field == "task_json"


def _write(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_load_tasks_reads_good_file(tmp_path):
    path = _write(tmp_path / "tasks.jsonl", [record(d, id=f"r{i}") for i, d in enumerate(DOMAINS)] + [""])
    recs = load_tasks(path)
    assert [r.domain for r in recs] == list(DOMAINS)


def test_load_tasks_error_names_file_line_and_field(tmp_path):
    rows = [record("math", id=f"m{i}") for i in range(16)] + [record("if", kwargs=[])]
    path = _write(tmp_path / "tasks.jsonl", rows)
    with pytest.raises(TaskFileError) as err:
        load_tasks(path)
    assert str(err.value).startswith(f"{path}:17: field 'kwargs': ")
    assert (err.value.line, err.value.field) == (17, "kwargs")
    assert isinstance(err.value, InvalidArgument)


def test_collect_mode_returns_good_records_and_every_error(tmp_path):
    rows = [
        record("math", id="a"),
        "{broken json",
        record("code", tests=[]),
        record("math", id="a"),
        record("mcqa", id="b"),
    ]
    path = _write(tmp_path / "t.jsonl", rows)
    good, bad = load_tasks(path, errors="collect")
    assert [r.id for r in good] == ["a", "b"]
    assert [(e.line, e.field) for e in bad] == [(2, "line"), (3, "tests"), (4, "id")]
    assert "repeats line 1" in str(bad[2])


def test_default_domain_applies_to_records_without_one(tmp_path):
    path = _write(tmp_path / "t.jsonl", [{"id": "x", "prompt": "What is 1 + 1?", "ground_truth": "2"}])
    assert load_tasks(path, domain="math")[0].domain == "math"
    with pytest.raises(InvalidArgument) as err:
        load_tasks(path, domain="poetry")
    assert err.value.field == "domain"


def test_load_tasks_reads_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"id": "p1", "domain": "math", "prompt": "What is 2 + 2?", "ground_truth": "4"},
        {"id": "p2", "domain": "math", "prompt": "What is 2 + 3?", "ground_truth": None},
    ]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    good, bad = load_tasks(tmp_path / "t.parquet", errors="collect")
    assert [r.ground_truth for r in good] == ["4"]
    assert [(e.line, e.field) for e in bad] == [(2, "ground_truth")]


def test_load_tasks_rejects_missing_file_and_bad_mode(tmp_path):
    with pytest.raises(InvalidArgument, match="path"):
        load_tasks(tmp_path / "nope.jsonl")
    _write(tmp_path / "t.jsonl", [record("math")])
    with pytest.raises(InvalidArgument, match="errors"):
        load_tasks(tmp_path / "t.jsonl", errors="ignore")
