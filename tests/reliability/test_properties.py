"""Property tests: any bytes, records or configs thrown at the parsers get a clear, typed error.

The ragged codec, task records (services/common/tasks.py) and cascade configs
(services/orchestrator/cascade_config.py) are fed arbitrary and mutated input. Allowed outcomes:
a valid value, or the module's own error naming a field (InvalidArgument with `.field`,
CascadeConfigError with one `source: path: message` line per problem). Anything else — KeyError,
TypeError, a crash — is a bug.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common import codec
from services.common.errors import InvalidArgument
from services.common.pb import common_pb2
from services.common.tasks import TaskRecord
from services.orchestrator.cascade_config import CascadeConfigError, load_cascade

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
json_scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True) | st.text(max_size=20)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=12)


# ------------------------------------------------------------------------------- ragged codec
@FAST
@given(data=st.binary(max_size=64), lengths=st.lists(st.integers(-5, 40), max_size=6),
       dtype=st.integers(-1, 4), want=st.sampled_from([None, "int32", "float32"]))
def test_any_ragged_message_decodes_or_names_the_field(data, lengths, dtype, want):
    try:
        msg = common_pb2.Ragged(data=data, lengths=lengths, dtype=dtype)
    except ValueError:
        return  # protobuf refuses a negative uint32 before it reaches us
    try:
        rows = codec.decode(msg, "batch.input_ids", want)
    except InvalidArgument as err:
        assert err.field == "batch.input_ids" and err.message
        return
    assert [len(r) for r in rows] == list(lengths)
    assert sum(r.nbytes for r in rows) == len(data)


@FAST
@given(rows=st.lists(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), max_size=5), min_size=1, max_size=4))
def test_non_finite_values_are_refused_by_name(rows):
    flat, lengths = codec.decode_flat(codec.encode(rows, "float32"), "logprobs", "float32")
    finite = bool(np.isfinite(flat).all())
    try:
        codec.require_finite(flat, "logprobs")
    except InvalidArgument as err:
        assert not finite and err.field == "logprobs" and "finite" in err.message
    else:
        assert finite


# ------------------------------------------------------------------------------- task records
VALID = {"domain": "mcqa", "messages": [{"role": "user", "content": "Pick one: A or B"}], "ground_truth": "A"}
FIELDS = ["domain", "messages", "ground_truth", "id", "instruction_id_list", "kwargs", "schema_str", "tests",
          "tools", "expected_calls", "patch_tests", "responses_create_params", "chosen", "rejected"]


@FAST
@given(data=json_values)
def test_any_json_value_as_a_task_record_is_valid_or_a_named_error(data):
    _parse_or_named_error(data)


@FAST
@given(field=st.sampled_from(FIELDS), value=json_values, drop=st.sampled_from([None, "domain", "messages", "ground_truth"]))
def test_a_mutated_task_record_is_valid_or_a_named_error(field, value, drop):
    record = {**VALID, field: value}
    if drop:
        record.pop(drop, None)
    _parse_or_named_error(record)


@FAST
@given(text=st.text(max_size=60) | st.binary(max_size=60).map(lambda b: b.decode("latin-1")))
def test_task_json_text_is_valid_or_a_named_error(text):
    try:
        TaskRecord.from_json(text)
    except InvalidArgument as err:
        assert err.field and err.message


def _parse_or_named_error(data) -> None:
    try:
        TaskRecord.parse(data)
    except InvalidArgument as err:
        assert err.field and err.message and str(err).startswith(err.field)


# ------------------------------------------------------------------------------- cascade configs
BASE = {"name": "c", "seed": 0, "model": "tiny", "data": "synthetic", "stages": [
    {"name": "grpo", "type": "grpo", "domains": ["mcqa"], "batch_size": 4, "rollouts_per_prompt": 2, "steps": 2},
    {"name": "mopd", "type": "mopd", "domains": ["mcqa"], "teachers": "auto", "batch_size": 4,
     "rollouts_per_prompt": 2, "steps": 2}]}
STAGE_KEYS = ["name", "type", "domains", "batch_size", "rollouts_per_prompt", "steps", "sampling", "optimizer",
              "eval", "eval_every", "teachers", "kl_coef", "eps_low", "eps_high", "overlong", "dynamic_filtering", "bogus"]
PROBLEM = re.compile(r"^c\.json: \S.*: .+")


@pytest.fixture(scope="module")
def cfg_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cfg")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(stage=st.integers(0, 1), key=st.sampled_from(STAGE_KEYS), value=json_values,
       top=st.sampled_from([None, "name", "seed", "model", "stages", "extra"]), top_value=json_values)
def test_a_mutated_cascade_config_is_valid_or_lists_each_problem_by_path(cfg_dir, stage, key, value, top, top_value):
    raw = json.loads(json.dumps(BASE))
    raw["stages"][stage][key] = value
    if top:
        raw[top] = top_value
    path = cfg_dir / "c.json"
    path.write_text(json.dumps(raw, allow_nan=True))
    try:
        load_cascade(path)
    except CascadeConfigError as err:
        assert err.problems, "an error without problems"
        for line in err.problems:
            assert PROBLEM.match(line), f"problem line does not name a path: {line!r}"


@FAST
@given(text=st.text(max_size=80))
def test_any_text_as_a_cascade_file_is_valid_or_a_clear_error(tmp_path_factory, text):
    path = tmp_path_factory.getbasetemp() / "c.yaml"
    path.write_text(text)
    try:
        load_cascade(path)
    except CascadeConfigError as err:
        assert err.problems and all(line.startswith("c.yaml: ") for line in err.problems)
