"""RewardCore on the synthetic tasks of every domain: right answers score 1, wrong ones 0, and
failures become explicit verdicts; plus back-pressure, deadlines and thinking removal."""

import json

import pytest

from services.common.errors import InvalidArgument, ResourceExhausted
from services.common.tasks import load_tasks
from services.common.toolcalls import format_tool_calls
from services.reward.config import RewardConfig
from services.reward.core import RewardCore, strip_thinking


def right_and_wrong(task):
    """A correct and an incorrect response built from the record's own fields."""
    d = task.domain
    if d == "math":
        return f"\\boxed{{{task.ground_truth}}}", "\\boxed{123456789}"
    if d == "mcqa":
        other = next(k for k in "ABCD" if k != task.ground_truth)
        return f"Answer: {task.ground_truth}", f"Answer: {other}"
    if d == "long_context":
        return f"Answer: {task.ground_truth}", "Answer: nobody knows"
    if d == "structured":
        return f"```json\n{task.ground_truth}\n```", "{}"
    if d == "tool":
        wrong = [] if task.expected_calls else [{"name": task.tools[0]["name"], "arguments": {}}]
        return format_tool_calls(task.expected_calls), format_tool_calls(wrong) or "no call needed"
    if d == "swe":
        return f"```diff\n{task.reference_patch}```", "```diff\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n```"
    raise AssertionError(d)


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    cfg = RewardConfig(verify_workers=1, max_parallel=2, sandbox_workers=1, sandbox_base_uid=62300,
                       sandbox_timeout_s=8.0, max_pending_items=40)
    c = RewardCore(cfg)
    c.warm_up()
    yield c
    c.close()


@pytest.mark.parametrize("domain", ["math", "mcqa", "long_context", "structured", "tool", "swe"])
def test_synthetic_tasks_score_right_and_wrong(core, synth_dir, domain):
    tasks = load_tasks(synth_dir / domain / "validation.jsonl")[:2]
    items = [(t, r) for t in tasks for r in right_and_wrong(t)]
    results = core.score(items)
    verdicts = [s.outcome.verdict for s in results]
    rewards = [s.outcome.reward for s in results]
    assert verdicts[0::2] == ["correct"] * len(tasks), [s.outcome.reason for s in results]
    assert rewards[0::2] == [1.0] * len(tasks) and rewards[1::2] == [0.0] * len(tasks)
    assert all(v in ("incorrect", "invalid") for v in verdicts[1::2])
    assert [s.id for s in results] == [t.id for t, _ in items]


def test_thinking_is_dropped_and_unclosed_thinking_is_invalid(core):
    task = json.dumps({"domain": "math", "messages": [{"role": "user", "content": "1+1"}], "ground_truth": "2"})
    out = core.score([(task, "hmm \\boxed{3}? no.</think>\\boxed{2}"), (task, "<think>\\boxed{2} maybe")])
    assert [s.outcome.verdict for s in out] == ["correct", "invalid"]
    assert strip_thinking("plain") == "plain"


def test_bad_record_names_the_item_and_field(core):
    with pytest.raises(InvalidArgument) as err:
        core.score([(json.dumps({"domain": "math", "messages": [{"role": "user", "content": "q"}]}), "x")] * 1)
    assert err.value.field == "items[0].task_json.ground_truth"
    with pytest.raises(InvalidArgument, match=r"items\[0\].task_json"):
        core.score([("{not json", "x")])


def test_queue_full_is_resource_exhausted(core):
    task = json.dumps({"domain": "mcqa", "messages": [{"role": "user", "content": "q"}], "ground_truth": "A"})
    with pytest.raises(ResourceExhausted, match="max_pending_items"):
        core.score([(task, "A")] * 41)


def test_expired_deadline_gives_timeout_verdicts(core):
    task = json.dumps({"domain": "mcqa", "messages": [{"role": "user", "content": "q"}], "ground_truth": "A"})
    out = core.score([(task, "A")], timeout_s=0.0)
    assert out[0].outcome.verdict == "timeout"


def test_rlhf_without_a_model_is_an_error_not_a_zero(core):
    task = json.dumps({"domain": "rlhf", "messages": [{"role": "user", "content": "hi"}]})
    (out,) = core.score([(task, "hello")])
    assert out.outcome.verdict == "error" and "reward model" in out.outcome.reason


def test_a_workbench_row_is_refused_plainly(core):
    row = {"id": 0, "environment_name": "workbench", "ground_truth": [{"name": "f", "arguments": "{}"}],
           "responses_create_params": {"input": "hi", "tools": [{"type": "function", "name": "f"}]}}
    with pytest.raises(InvalidArgument) as err:
        core.score([(json.dumps(row), "<tool_call><function=f></function></tool_call>")])
    assert err.value.field == "items[0].task_json.domain" and "multi-turn" in err.value.message


def sandbox_runs() -> float:
    from prometheus_client import REGISTRY

    return sum(REGISTRY.get_sample_value("cascade_reward_sandbox_executions_total", {"outcome": o}) or 0.0
               for o in ("ok", "failed", "timeout"))


def test_a_pair_repeated_in_a_batch_is_verified_once_and_every_copy_gets_its_result(core):
    """A group's agreeing samples (the same record, the same response) run the sandbox once."""
    add = json.dumps({"domain": "code", "messages": [{"role": "user", "content": "add"}],
                      "tests": [{"assert": "add(1, 2) == 3"}]})
    sub = json.dumps({"domain": "code", "messages": [{"role": "user", "content": "sub"}],
                      "tests": [{"assert": "sub(3, 2) == 1"}]})
    right = "```python\ndef add(a, b):\n    return a + b\n```"
    wrong = "```python\ndef add(a, b):\n    return a - b\n```"
    items = [(add, right), (add, wrong), (add, right), (sub, right), (add, right), (add, wrong)]
    before = sandbox_runs()
    out = core.score(items)
    assert sandbox_runs() - before == 3  # (add, right), (add, wrong), (sub, right)
    assert [s.outcome.verdict for s in out] == ["correct", "incorrect", "correct", "incorrect", "correct", "incorrect"]
    assert [s.outcome.reward for s in out] == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    alone = [core.score([item])[0].outcome for item in items[:2]]
    assert [o.verdict for o in alone] == ["correct", "incorrect"]
