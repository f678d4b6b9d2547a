"""swe: file tools over the episode's own copy, tests run in the sandbox, reward = the hidden tests pass
(test files put back, hidden files added), a fix by replace_in_file scores 1."""

from __future__ import annotations

import json
import random

import pytest

from services.common.errors import InvalidArgument
from services.common.synth.multiturn import swe as synth
from services.common.toolcalls import format_tool_calls
from services.env.environments.swe import from_record


def call(name: str, **arguments) -> str:
    return format_tool_calls([{"name": name, "arguments": arguments}])


@pytest.fixture(scope="module")
def record() -> dict:
    return synth.make_tasks(random.Random(0), 1, "train")[0]


def fix_of(record: dict) -> tuple[str, str, str]:
    """(path, old, new) of the reference patch's one changed line."""
    lines = record["reference_patch"].splitlines()
    path = lines[1].removeprefix("+++ b/")
    old = next(ln[1:] for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    new = next(ln[1:] for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    return path, old, new


def test_fix_with_the_tools_and_the_hidden_tests_pass(env_core, record):
    opened = env_core.open("swe", json.dumps(record))
    assert {t["name"] for t in opened.tools} == {"list_files", "read_file", "replace_in_file", "run_tests"}
    files = env_core.step(opened.id, call("list_files")).messages[0]["content"].splitlines()
    assert set(files) == set(record["repo"]["files"])
    path, old, new = fix_of(record)
    assert old in env_core.step(opened.id, call("read_file", path=path)).messages[0]["content"]
    assert "1 failed" in env_core.step(opened.id, call("run_tests")).messages[0]["content"]
    assert env_core.step(opened.id, call("replace_in_file", path=path, old=old, new=new)).tool_errors == 0
    assert "passed" in env_core.step(opened.id, call("run_tests")).messages[0]["content"]
    final = env_core.step(opened.id, "fixed")
    assert (final.verdict, final.reward) == ("ok", 1.0), final.reason
    env_core.close(opened.id)


def test_editing_the_tests_does_not_pass_the_judge(env_core, record):
    opened = env_core.open("swe", json.dumps(record))
    test_path = record["patch_tests"]["fail_to_pass"][0].split("::")[0]
    text = record["repo"]["files"][test_path]
    body = "def test_" + record["patch_tests"]["fail_to_pass"][0].split("::test_")[1]
    s = env_core.step(opened.id, call("replace_in_file", path=test_path, old=body, new=body + "():\n    return\ndef _old"))
    assert s.tool_errors == 0, s.messages
    assert "failed" not in env_core.step(opened.id, call("run_tests")).messages[0]["content"]
    final = env_core.step(opened.id, "fixed")
    assert final.reward == 0.0 and "hidden tests fail" in final.reason
    assert text == record["repo"]["files"][test_path]  # the task's own copy never changes
    env_core.close(opened.id)


def test_hidden_test_files_are_added_only_for_the_judge(env_core, record):
    hidden = {"tests/test_hidden.py": "def test_hidden():\n    assert False\n"}
    rec = {**record, "hidden_tests": hidden,
           "patch_tests": {**record["patch_tests"], "pass_to_pass": ["tests/test_hidden.py::test_hidden"]}}
    opened = env_core.open("swe", json.dumps(rec))
    assert "test_hidden" not in env_core.step(opened.id, call("list_files")).messages[0]["content"]
    path, old, new = fix_of(record)
    env_core.step(opened.id, call("replace_in_file", path=path, old=old, new=new))
    final = env_core.step(opened.id, "fixed")
    assert final.reward == 0.0 and "tests/test_hidden.py::test_hidden" in final.reason
    env_core.close(opened.id)


def test_file_tool_errors(env_core, record):
    opened = env_core.open("swe", json.dumps(record))
    s = env_core.step(opened.id, call("read_file", path="../etc/passwd") + "\n" + call("replace_in_file", path="conftest.py", old="zzz-not-there", new="x"))
    assert s.tool_errors == 2 and "no file" in s.messages[0]["content"] and "0 times" in s.messages[1]["content"]
    env_core.close(opened.id)


@pytest.mark.parametrize("change, field", [
    ({"repo": {"files": {"../x.py": ""}}}, "repo.files"),
    ({"repo": None}, "repo.files"),
    ({"patch_tests": {"fail_to_pass": []}}, "patch_tests.fail_to_pass"),
    ({"hidden_tests": {"/abs.py": ""}}, "hidden_tests"),
])
def test_bad_records_name_the_field(record, change, field):
    with pytest.raises(InvalidArgument) as err:
        from_record({**record, **change})
    assert err.value.field == field
