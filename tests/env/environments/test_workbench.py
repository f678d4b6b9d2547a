"""workbench: the 27 tools, NeMo Gym rows read as is and scored as NeMo Gym scores them, our synthetic
tasks, the end-state reward's rules (lookups and order do not count, case rules), tool errors."""

from __future__ import annotations

import json
import random

import pytest

from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.synth.multiturn import workbench as synth
from services.common.toolcalls import format_tool_calls
from services.env.config import EnvConfig
from services.env.environments.base import Services
from services.env.environments.workbench import TOOLS, WorkbenchEnvironment, replay
from services.env.environments.workbench.tables import end_state, synthetic
from services.env.environments.workbench.task import from_record
from tests.needs import NEMO_GYM_SAMPLES as SAMPLES

NEMO_TOOLKITS = {"company_directory": 1, "email": 6, "calendar": 5, "analytics": 6, "project_management": 5,
                 "customer_relationship_manager": 4}


def nemo_rows() -> list[dict]:
    with open(SAMPLES) as f:
        return [r for r in map(json.loads, f) if r.get("environment_name") == "workbench"]


def call(name: str, **arguments) -> str:
    return format_tool_calls([{"name": name, "arguments": arguments}])


def synthetic_task(truth: list[dict], seed: int = 5) -> str:
    return json.dumps({"id": "t", "messages": [{"role": "user", "content": "do it"}], "tables": {"synthetic": seed},
                       "ground_truth": [{"name": c["name"], "arguments": json.dumps(c["arguments"])} for c in truth]})


class TestTools:
    def test_the_27_tools_of_nemo_gyms_workbench_with_the_rows_parameters(self):
        assert len(TOOLS) == 27
        for prefix, n in NEMO_TOOLKITS.items():
            assert sum(name.startswith(prefix) for name in TOOLS) == n, prefix
        row_tools = {t["name"]: t for t in nemo_rows()[0]["responses_create_params"]["tools"]}
        assert set(row_tools) == set(TOOLS)
        for name, spec in TOOLS.items():
            ours, theirs = spec.schema["parameters"], row_tools[name]["parameters"]
            assert set(ours["properties"]) == set(theirs["properties"]), name
            assert sorted(ours["required"]) == sorted(theirs["required"]), name
            assert {k: v["type"] for k, v in ours["properties"].items()} == {
                k: v["type"] for k, v in theirs["properties"].items()}, name

    def test_lookups_answer_and_writes_change_only_their_table(self):
        t = synthetic(3)
        before = end_state(t)
        email = t.emails[0]
        assert TOOLS["email_get_email_information_by_id"].fn(t, email["email_id"], "subject") == {"subject": email["subject"]}
        assert TOOLS["company_directory_find_email_address"].fn(t, "ANA") == ["ana.lopez@northwind.com"]
        found = TOOLS["calendar_search_events"].fn(t, query=t.events[0]["event_name"])
        assert found["events"][0]["event_id"] == t.events[0]["event_id"]
        assert end_state(t) == before
        new_id = TOOLS["calendar_create_event"].fn(t, "kickoff", "Ana.Lopez@northwind.com", "2023-12-20 10:00:00", "30")
        assert new_id == "00000009" and t.events[-1]["participant_email"] == "ana.lopez@northwind.com"
        assert end_state(t)["emails"] == before["emails"] and end_state(t)["events"] != before["events"]

    def test_end_state_lowercases_all_but_status_list_name_and_board(self):
        t = synthetic(3)
        a, b = t.copy(), t.copy()
        b.tasks[0]["task_name"] = b.tasks[0]["task_name"].upper()
        assert end_state(a) == end_state(b)
        b.tasks[0]["board"] = b.tasks[0]["board"].upper()
        assert end_state(a) != end_state(b)
        c = t.copy()
        c.customers[0]["status"] = c.customers[0]["status"].lower()
        assert end_state(a) != end_state(c)

    def test_a_call_that_errs_changes_nothing_in_replay(self):
        t = synthetic(3)
        assert end_state(replay(t, [{"name": "calendar_delete_event", "arguments": {"event_id": "123"}}])) == end_state(t)


class TestRecords:
    def test_nemo_gym_row_read_as_is(self):
        row = nemo_rows()[2]
        task = from_record(row)
        assert task.messages[0]["role"] == "system" and task.tools == row["responses_create_params"]["tools"]
        assert task.ground_truth[0]["arguments"]["new_value"] == "raj.patel@atlas.com"
        assert task.synthetic_seed is None and task.category == row["category"]

    def test_the_renamed_nemo_gym_environment_is_the_common_parsers(self):
        row = {**nemo_rows()[2], "environment_name": "workplace_assistant"}
        assert from_record(row).ground_truth == from_record(nemo_rows()[2]).ground_truth
        with pytest.raises(InvalidArgument, match="environment_name"):
            from_record({**nemo_rows()[2], "environment_name": "chess"})

    def test_our_tasks_offer_their_tools_by_name(self):
        record = synth.make_tasks(random.Random(0), 1, "train")[0]
        task = from_record(record)
        assert [t["name"] for t in task.tools] == record["tool_names"] and task.tools[0] == TOOLS[record["tool_names"][0]].schema
        with pytest.raises(InvalidArgument, match=r"tool_names: \['nope'\] are not workbench tools"):
            from_record({**record, "tool_names": ["nope"]})

    @pytest.mark.parametrize("record, field", [
        ({"messages": [{"role": "user", "content": "x"}], "ground_truth": [{"name": "nope", "arguments": "{}"}]},
         "ground_truth[0].name"),
        ({"messages": [{"role": "user", "content": "x"}], "ground_truth": [{"name": "email_send_email", "arguments": "{"}]},
         "ground_truth[0].arguments"),
        ({"messages": [{"role": "user", "content": "x"}], "ground_truth": "x"}, "ground_truth"),
        ({"messages": [], "ground_truth": []}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}], "ground_truth": [], "tables": {"synthetic": "a"}}, "tables"),
        ({"environment_name": "swe", "messages": [{"role": "user", "content": "x"}], "ground_truth": []},
         "environment_name"),
    ])
    def test_bad_records_name_the_field(self, record, field):
        with pytest.raises(InvalidArgument) as err:
            from_record(record)
        assert err.value.field == field

    def test_a_nemo_row_without_tables_is_refused_plainly(self):
        env = WorkbenchEnvironment(Services(config=EnvConfig()))
        with pytest.raises(FailedPrecondition, match="CASCADE_ENV_WORKBENCH_TABLES"):
            env.open(env.parse(nemo_rows()[0]))


class TestEpisodes:
    @pytest.mark.parametrize("index", [0, 1, 2])
    def test_nemo_rows_response_scores_as_nemo_gym_does(self, env_core, index):
        row = nemo_rows()[index]
        opened = env_core.open("workbench", json.dumps(row))
        assert opened.tools == row["responses_create_params"]["tools"]
        step = env_core.step(opened.id, row["response"])
        assert not step.done and step.tool_errors == 0
        final = env_core.step(opened.id, "Done.")
        assert (final.done, final.verdict, final.reward) == (True, "ok", row["expect"])
        env_core.close(opened.id)

    def test_a_wrong_change_scores_zero_and_lookups_alone_score_zero(self, env_core):
        row = nemo_rows()[0]
        wrong = env_core.open("workbench", json.dumps(row))
        env_core.step(wrong.id, call("email_reply_email", email_id="00000056", body="Thanks"))
        assert env_core.step(wrong.id, "Done.").reward == 0.0
        lookups = env_core.open("workbench", json.dumps(row))
        env_core.step(lookups.id, call("email_search_emails", query="carlos"))
        closed = env_core.close(lookups.id)
        assert (closed.verdict, closed.reward) == ("closed", 0.0) and "emails" in closed.reason
        env_core.close(wrong.id)

    def test_synthetic_tasks_solved_by_their_ground_truth(self, env_core):
        for record in synth.make_tasks(random.Random(0), 10, "validation"):
            opened = env_core.open("workbench", json.dumps(record))
            calls = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in record["ground_truth"]]
            assert env_core.step(opened.id, format_tool_calls(calls)).tool_errors == 0
            assert env_core.step(opened.id, "Done.").reward == 1.0, record["messages"][-1]["content"]
            env_core.close(opened.id)

    def test_order_of_changes_does_not_count(self, env_core):
        a = {"name": "project_management_update_task", "arguments": {"task_id": "00000001", "field": "board", "new_value": "Design"}}
        b = {"name": "calendar_delete_event", "arguments": {"event_id": "00000002"}}
        opened = env_core.open("workbench", synthetic_task([a, b]))
        env_core.step(opened.id, format_tool_calls([b]))
        env_core.step(opened.id, format_tool_calls([a]))
        assert env_core.step(opened.id, "ok").reward == 1.0
        env_core.close(opened.id)

    def test_malformed_calls_unknown_tools_and_bad_arguments_come_back_as_tool_errors(self, env_core):
        opened = env_core.open("workbench", synthetic_task([]))
        s = env_core.step(opened.id, "<tool_call><function=email_send_email><parameter=body>x</function></tool_call>")
        assert s.tool_errors == 1 and s.messages[0]["content"].startswith("Error: tool_call[0]")
        s = env_core.step(opened.id, call("email_explode") + "\n" + call("email_send_email", recipient="nobody", subject="a", body="b")
                          + "\n" + call("email_delete_email", email_id="1", colour="red"))
        assert s.tool_errors == 3 and [m["role"] for m in s.messages] == ["tool"] * 3
        assert "unknown tool 'email_explode'" in s.messages[0]["content"]
        assert "not an email address" in s.messages[1]["content"]
        assert "unknown parameter 'colour'" in s.messages[2]["content"]
        assert not s.done
        assert env_core.step(opened.id, "nothing to do").reward == 1.0  # no change was asked and none was made
        env_core.close(opened.id)
