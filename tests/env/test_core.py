"""EnvCore: episodes isolated from each other, deadlines and the reaper, the turn / env-seconds / call
limits with their verdicts, an environment failure as `error`, bad requests naming the field, metrics."""

from __future__ import annotations

import json
import threading
import time

import pytest
from prometheus_client import REGISTRY

from services.common.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from services.common.sandbox.sandbox import Sandbox
from services.common.toolcalls import format_tool_calls
from services.env.config import EnvConfig
from services.env.core import EnvCore


def calls(*items: tuple) -> str:
    return format_tool_calls([{"name": n, "arguments": a} for n, a in items])


def workbench_task(truth=(), seed: int = 7) -> str:
    return json.dumps({"messages": [{"role": "user", "content": "x"}], "tables": {"synthetic": seed},
                       "ground_truth": [{"name": n, "arguments": json.dumps(a)} for n, a in truth]})


PY_TASK = json.dumps({"messages": [{"role": "user", "content": "x"}], "ground_truth": "1"})


def metric(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def side_core(env_core):
    """A second core on the same sandbox, for settings the shared one does not have."""
    made = []

    def build(**settings) -> EnvCore:
        core = EnvCore(EnvConfig(reap_interval_s=0.2, tool_timeout_s=3.0, **settings), sandbox=env_core.sandbox)
        made.append(core)
        return core

    yield build
    for core in made:
        core.close_all()


def test_two_concurrent_episodes_never_see_each_others_state(env_core):
    delete = ("calendar_delete_event", {"event_id": "00000001"})
    a, b = env_core.open("workbench", workbench_task([delete])), env_core.open("workbench", workbench_task([delete]))
    barrier, seen = threading.Barrier(2), {}

    def run(episode, text, key):
        barrier.wait()
        seen[key] = env_core.step(episode.id, text)

    threads = [threading.Thread(target=run, args=(a, calls(delete), "a")),
               threading.Thread(target=run, args=(b, calls(("calendar_get_event_information_by_id", {"event_id": "00000001", "field": "event_id"})), "b"))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert seen["a"].messages[0]["content"] == "Event deleted successfully."
    assert seen["b"].messages[0]["content"] == '{"event_id": "00000001"}'
    assert env_core.step(a.id, "done").reward == 1.0 and env_core.step(b.id, "done").reward == 0.0
    pa, pb = env_core.open("python", PY_TASK), env_core.open("python", PY_TASK)
    env_core.step(pa.id, calls(("python", {"code": "x = 'a'"})))
    env_core.step(pb.id, calls(("python", {"code": "x = 'b'"})))
    assert env_core.step(pa.id, calls(("python", {"code": "print(x)"}))).messages[0]["content"] == "a\n"
    assert env_core.step(pb.id, calls(("python", {"code": "print(x)"}))).messages[0]["content"] == "b\n"
    for e in (a, b, pa, pb):
        env_core.close(e.id)


def test_an_expired_episode_is_closed_by_the_reaper(env_core):
    before = metric("cascade_env_episodes_closed_total", environment="workbench", verdict="limit_deadline")
    opened = env_core.open("workbench", workbench_task(), deadline_s=0.3)
    end = time.monotonic() + 5
    while time.monotonic() < end:
        try:
            env_core._get(opened.id)
        except NotFound:
            break
        time.sleep(0.05)
    with pytest.raises(NotFound, match="closed at its deadline"):
        env_core.step(opened.id, "hi")
    assert metric("cascade_env_episodes_closed_total", environment="workbench", verdict="limit_deadline") == before + 1


def test_a_tool_call_is_cut_at_the_episode_deadline(env_core):
    opened = env_core.open("python", PY_TASK, deadline_s=1.2)
    start = time.monotonic()
    s = env_core.step(opened.id, calls(("python", {"code": "while True:\n    pass"})))
    assert time.monotonic() - start < 2.5  # the budget was the 1.2 s left, not tool_timeout_s = 3
    assert (s.done, s.verdict, s.tool_errors) == (True, "limit_deadline", 1)
    assert "limit deadline reached" in s.reason
    with pytest.raises(FailedPrecondition, match="has ended"):
        env_core.step(opened.id, "more")
    assert env_core.close(opened.id).verdict == "limit_deadline"


def test_turn_limit_ends_the_episode_with_its_verdict_and_the_state_scored(env_core):
    delete = ("calendar_delete_event", {"event_id": "00000003"})
    opened = env_core.open("workbench", workbench_task([delete]), max_turns=2)
    assert not env_core.step(opened.id, calls(("email_search_emails", {}))).done
    s = env_core.step(opened.id, calls(delete))
    assert (s.done, s.verdict, s.reward, s.turns) == (True, "limit_turns", 1.0, 2)
    env_core.close(opened.id)


def test_env_seconds_limit(side_core):
    core = side_core(max_env_seconds=1.0)
    opened = core.open("python", PY_TASK)
    s = core.step(opened.id, calls(("python", {"code": "import time\ntime.sleep(5)"})))
    assert (s.done, s.verdict) == (True, "limit_env_seconds") and s.env_seconds < 2.5


def test_calls_past_the_per_turn_limit_are_refused(side_core):
    core = side_core(max_calls_per_turn=2)
    opened = core.open("workbench", workbench_task())
    s = core.step(opened.id, calls(*[("company_directory_find_email_address", {"name": "a"})] * 3))
    assert s.tool_errors == 1 and "at most 2 tool calls" in s.messages[2]["content"]


def test_open_episode_limit(side_core):
    core = side_core(max_open_episodes=1)
    core.open("workbench", workbench_task())
    with pytest.raises(ResourceExhausted, match="max_open_episodes"):
        core.open("workbench", workbench_task())


def test_a_failing_environment_ends_the_episode_with_error(env_core):
    sandbox = Sandbox(workers=1, base_uid=63300, limits=env_core.sandbox.limits)
    core = EnvCore(EnvConfig(tool_timeout_s=3.0), sandbox=sandbox)
    try:
        opened = core.open("python", PY_TASK)
        sandbox._all[0].launcher.kill()  # the sandbox, not the model, fails
        s = core.step(opened.id, calls(("python", {"code": "print(1)"})))
        assert (s.done, s.verdict, s.reward) == (True, "error", 0.0) and "launcher" in s.reason
    finally:
        core.close_all()
        sandbox.close()


def test_bad_requests_name_the_field(env_core):
    with pytest.raises(NotFound, match="unknown environment 'chess'; environments: python, swe, workbench"):
        env_core.open("chess", "{}")
    for kwargs, field in (({"deadline_s": -1}, "deadline_s"), ({"deadline_s": 1e9}, "deadline_s"),
                          ({"max_turns": 10_000}, "max_turns")):
        with pytest.raises(InvalidArgument) as err:
            env_core.open("workbench", workbench_task(), **kwargs)
        assert err.value.field == field
    with pytest.raises(InvalidArgument) as err:
        env_core.open("workbench", "{not json")
    assert err.value.field == "task_json"
    with pytest.raises(InvalidArgument) as err:
        env_core.open("workbench", json.dumps({"messages": [{"role": "user", "content": "x"}], "ground_truth": [{}]}))
    assert err.value.field == "task_json.ground_truth[0].name"
    with pytest.raises(NotFound, match="^no episode"):  # the rollout loop retries these (episodes.env_lost)
        env_core.step("workbench-nope", "x")
    with pytest.raises(InvalidArgument) as err:
        env_core.close("")
    assert err.value.field == "episode_id"


def test_one_turn_at_a_time_and_close_once(env_core):
    opened = env_core.open("python", PY_TASK)
    done = threading.Event()
    t = threading.Thread(target=lambda: (env_core.step(opened.id, calls(("python", {"code": "import time\ntime.sleep(1)"}))),
                                         done.set()))
    t.start()
    time.sleep(0.3)
    with pytest.raises(FailedPrecondition, match="one turn at a time"):
        env_core.step(opened.id, "x")
    t.join()
    assert done.is_set()
    env_core.close(opened.id)
    with pytest.raises(NotFound, match="closed by the caller"):
        env_core.close(opened.id)


def test_metrics_count_turns_verdicts_and_tool_errors(env_core):
    turns = metric("cascade_env_turns_total", environment="workbench")
    errors = metric("cascade_env_tool_errors_total", environment="workbench", tool="email_delete_email")
    ok = metric("cascade_env_episodes_closed_total", environment="workbench", verdict="ok")
    opened = env_core.open("workbench", workbench_task())
    env_core.step(opened.id, calls(("email_delete_email", {"email_id": "nope"})))
    env_core.step(opened.id, "done")
    env_core.close(opened.id)
    assert metric("cascade_env_turns_total", environment="workbench") == turns + 2
    assert metric("cascade_env_tool_errors_total", environment="workbench", tool="email_delete_email") == errors + 1
    assert metric("cascade_env_episodes_closed_total", environment="workbench", verdict="ok") == ok + 1
    assert metric("cascade_env_turn_duration_seconds_count", environment="workbench") > 0


@pytest.mark.parametrize("environment", ["workbench", "swe", "python"])
@pytest.mark.parametrize("task_json", [
    "[]", "1", "null", '"x"', "{}", '{"messages": "x"}', '{"messages": [1]}', '{"messages": [{"role": "bot", "content": "x"}]}',
    '{"responses_create_params": {"input": 5}}', '{"responses_create_params": "x", "messages": [{"role": "user", "content": "x"}]}',
    '{"messages": [{"role": "user", "content": "x"}], "ground_truth": {"a": 1}, "repo": [], "patch_tests": []}',
    '{"messages": [{"role": "user", "content": "x"}], "ground_truth": [null], "repo": {"files": []}}',
    '{"messages": [{"role": "user", "content": "x"}], "tables": [], "ground_truth": []}',
])
def test_any_json_gets_a_clear_refusal_never_a_crash(env_core, environment, task_json):
    with pytest.raises((InvalidArgument, FailedPrecondition)) as err:
        env_core.open(environment, task_json)
    assert str(err.value)
