"""structured verifier: fenced and bare JSON against a JSON Schema, typed reasons."""

import json

import pytest

from services.reward.verifiers.structured import extract_json_text, structured_reward
from tests.reward.helpers import ctx, task

SCHEMA = json.dumps({
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                   "born": {"type": "string", "format": "date"}},
    "required": ["name", "age"],
    "additionalProperties": False,
})


class TestStructured:
    @pytest.mark.parametrize(
        "response, verdict, reason_start",
        [
            ('{"name": "Ann", "age": 3}', "correct", "valid"),
            ('Here you go:\n```json\n{"name": "Ann", "age": 3}\n```\nDone.', "correct", "valid"),
            ('```\n{"name": "Ann", "age": 3}\n```', "correct", "valid"),
            ('{"name": "Ann", "age": -1}', "incorrect", "validation_error"),
            ('{"name": "Ann"}', "incorrect", "validation_error"),
            ('{"name": "Ann", "age": 3, "extra": true}', "incorrect", "validation_error"),
            ('{"name": "Ann", "age": "3"}', "incorrect", "validation_error"),
            ('{"name": "Ann", "age": 3, "born": "yesterday"}', "incorrect", "validation_error"),
            ('{"name": "Ann", "age": 3,}', "invalid", "parse_error"),
            ("```json\n```", "invalid", "empty"),
            ("   ", "invalid", "empty"),
        ],
    )
    def test_table(self, response, verdict, reason_start):
        out = structured_reward(task("structured", schema_str=SCHEMA), response, ctx())
        assert out.verdict == verdict and out.reason.startswith(reason_start), out.reason

    def test_broken_schema_is_an_error_not_a_zero(self):
        bad = json.dumps({"type": "object", "properties": {"a": {"type": "nonsense"}}})
        out = structured_reward(task("structured", schema_str=bad), "{}", ctx())
        assert out.verdict == "error" and out.reason.startswith("schema_error")

    def test_reason_names_the_path(self):
        out = structured_reward(task("structured", schema_str=SCHEMA), '{"name": 5, "age": 1}', ctx())
        assert "/name" in out.reason

    def test_last_fence_wins(self):
        assert extract_json_text("```json\n[1]\n```\nfixed:\n```json\n[2]\n```") == "[2]"


class TestNemoGymRule:
    """NeMo Gym rows: the whole text parsed in `schema_type`, the schema made strict."""

    SCHEMA = '{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "object", "properties": {"c": {"type": "string"}}}}}'

    def row(self, schema_type="json"):
        return task("structured", schema_str=self.SCHEMA, schema_type=schema_type, responses_create_params={"input": "q"})

    def test_every_property_required_and_no_others(self):
        assert structured_reward(self.row(), '{"a": 1, "b": {"c": "x"}}', ctx()).reward == 1.0
        missing = structured_reward(self.row(), '{"a": 1, "b": {}}', ctx())
        assert missing.verdict == "incorrect" and "'c' is a required property" in missing.reason
        extra = structured_reward(self.row(), '{"a": 1, "b": {"c": "x"}, "z": 0}', ctx())
        assert extra.verdict == "incorrect"

    def test_a_fenced_answer_does_not_parse(self):
        out = structured_reward(self.row(), '```json\n{"a": 1, "b": {"c": "x"}}\n```', ctx())
        assert out.verdict == "invalid" and out.reason.startswith("parse_error")

    def test_yaml_and_an_unparsed_format(self):
        assert structured_reward(self.row("yaml"), "a: 1\nb:\n  c: x\n", ctx()).reward == 1.0
        assert structured_reward(self.row("xml"), "<a>1</a>", ctx()).verdict == "error"

    def test_formats_are_not_checked_for_nemo_gym_rows(self):
        schema = '{"type": "object", "properties": {"d": {"type": "string", "format": "date"}}}'
        row = task("structured", schema_str=schema, schema_type="json", responses_create_params={"input": "q"})
        assert structured_reward(row, '{"d": "spring"}', ctx()).reward == 1.0
        assert structured_reward(row, '{"d": 3}', ctx()).reward == 0.0
