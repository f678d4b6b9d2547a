"""SFT conversations played on the real env core: solved, their tool results the environment's own, and
their loss mask on the assistant's tokens only — token by token the mask of the rollout's trajectory."""

from __future__ import annotations

import json
import random
import re

import pytest

from services.common.chat_template import assistant_mask
from services.common.errors import InvalidArgument
from services.common.synth.multiturn.workbench import make_demonstrations
from services.common.toolcalls import parse_tool_calls
from services.common.trajectory import Trajectory
from services.env.demonstrations import (
    DemonstrationFailed,
    demonstrations,
    play,
    write_sft,
)


def test_every_demonstration_solves_its_task_with_the_environments_own_answers(env_core):
    records = demonstrations(env_core, "workbench", seed=0, n=30)
    assert len(records) == 30 and env_core.open_count() == 0, "every episode played is closed"
    categories = set()
    for r in records:
        roles = [m["role"] for m in r["messages"]]
        assert roles[:2] == ["system", "user"] and roles[-1] == "assistant"
        assert not parse_tool_calls(r["messages"][-1]["content"]), "the last turn answers without a call"
        tools = [m for m in r["messages"] if m["role"] == "tool"]
        assert tools and not any(m["content"].startswith("Error: ") for m in tools)
        assert r["domain"] == "workbench" and [t["name"] for t in r["tools"]][0] == "company_directory_find_email_address"
        categories.add(r["metadata"]["category"])
        if r["metadata"]["turns"] == 3:  # lookup, change, reply: the change's id or address is in the lookup's answer
            change = parse_tool_calls(r["messages"][4]["content"])[0]["arguments"]
            key = next(v for k, v in change.items() if k in ("event_id", "task_id", "customer_id", "recipient"))
            assert key in r["messages"][3]["content"], (key, r["messages"][3]["content"])
    assert len(categories) == 5


def test_a_turn_that_does_not_solve_the_task_is_refused_naming_it(env_core):
    demo = make_demonstrations(random.Random(5), 1)[0]
    with pytest.raises(DemonstrationFailed, match=r"turns\[0\]: the episode ended after turn 1 of 2"):
        play(env_core, "workbench", demo["task"], ["Nothing to do.", "Done."])
    wrong = '<tool_call><function=calendar_delete_event><parameter=event_id>99999999</parameter></function></tool_call>'
    with pytest.raises(DemonstrationFailed, match=r"turns\[0\]: a tool answered with an error"):
        play(env_core, "workbench", {**demo["task"], "tool_names": ["calendar_delete_event"]}, [wrong, "Done."])
    with pytest.raises(DemonstrationFailed, match=r"\.turns: does not solve the task: reward 0.0"):
        play(env_core, "workbench", demo["task"], ["All done."])
    assert env_core.open_count() == 0


def test_written_file_is_identical_for_a_seed(tmp_path):
    a, b = write_sft(tmp_path / "a", "workbench", seed=3, n=6), write_sft(tmp_path / "b", "workbench", seed=3, n=6)
    assert a.read_bytes() == b.read_bytes() and a == tmp_path / "a" / "workbench" / "sft.jsonl"
    rows = [json.loads(line) for line in a.read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"workbench-sft-{i:05d}" for i in range(6)]


def test_sft_loss_mask_is_the_rollouts_mask_token_by_token(env_core, tiny_model_dir):
    """The SFT ids and mask of a played conversation equal, token by token, those of the Trajectory a
    rollout builds from the same turns (the policy's tokens in, the tool results and prompts out)."""
    from services.common.modelio import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    for record in demonstrations(env_core, "workbench", seed=1, n=5):
        messages, tools = record["messages"], record["tools"]
        ids, mask = assistant_mask(tok, messages, thinking=False, tools=tools)
        first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
        traj = Trajectory.start(tok, messages[:first], tools, thinking=False)
        turn_ids = []
        i = first
        while i < len(messages):
            policy = tok.encode(messages[i]["content"] + "<|im_end|>", add_special_tokens=False)
            turn_ids.append(policy)
            traj.add_turn(policy, [0.0] * len(policy))
            j = i + 1
            while j < len(messages) and messages[j]["role"] == "tool":
                j += 1
            if j < len(messages):
                traj.add_observation(messages[i + 1:j])
            i = j
        sample = traj.sample()
        trailing = len(ids) - len(sample.input_ids)  # the last turn's closing newline: out of both
        assert ids[:len(sample.input_ids)] == sample.input_ids and mask[:len(sample.loss_mask)] == sample.loss_mask
        assert trailing >= 0 and not any(mask[len(sample.loss_mask):])
        assert sum(mask) == sum(map(len, turn_ids)), "exactly the assistant turns' tokens are in the loss"
        masked_text = tok.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=False)
        assert masked_text == "".join(m["content"] + "<|im_end|>" for m in messages if m["role"] == "assistant")
        for m in messages:
            if m["role"] == "tool":  # no token of a tool result is trained on
                assert m["content"] not in masked_text


def test_python_demonstrations_answer_what_their_cell_printed_or_at_once(env_core):
    """Two kinds, about half each: one cell, then the boxed answer — the number in the box is the cell's
    own output (the env's reward 1 says it is the task's answer too), and the cell names the question's
    number — or the boxed answer at once, no tool called (scored 1 by the env all the same)."""
    from services.env.environments.python import last_boxed

    records = demonstrations(env_core, "python", seed=0, n=40)
    assert [r["id"] for r in records] == [f"python-sft-{i:05d}" for i in range(40)] and env_core.open_count() == 0
    kinds = {2: 0, 4: 0}
    for r in records:
        roles = [m["role"] for m in r["messages"]]
        kinds[len(roles)] += 1
        assert [t["name"] for t in r["tools"]] == ["python"] and r["metadata"]["turns"] == len(roles) // 2
        if len(roles) == 2:
            assert roles == ["user", "assistant"] and "<tool_call>" not in r["messages"][1]["content"]
            assert last_boxed(r["messages"][1]["content"]) is not None
            continue
        assert roles == ["user", "assistant", "tool", "assistant"], roles
        code = parse_tool_calls(r["messages"][1]["content"])[0]["arguments"]["code"]
        question = r["messages"][0]["content"].split("?")[0]
        assert re.findall(r"\d+", question)[-1] in re.findall(r"\d+", code), (question, code)
        assert last_boxed(r["messages"][3]["content"]) == r["messages"][2]["content"].strip()
    assert 10 <= kinds[2] <= 30 and kinds[2] + kinds[4] == 40, kinds


def test_python_demonstrations_follow_the_tool_share():
    """`tool_share` 1 calls the tool in every demonstration, 0 in none; the questions are the same draw
    either way; a share outside [0, 1] is refused naming it."""
    import random

    from services.common.synth.multiturn import python as synth

    every = synth.make_demonstrations(random.Random(3), 12, tool_share=1.0)
    none = synth.make_demonstrations(random.Random(3), 12, tool_share=0.0)
    assert [len(d["turns"]) for d in every] == [2] * 12 and [len(d["turns"]) for d in none] == [1] * 12
    assert [d["task"] for d in every] == [d["task"] for d in none]
    with pytest.raises(InvalidArgument, match="tool_share"):
        synth.make_demonstrations(random.Random(3), 1, tool_share=1.5)


def test_an_environment_without_demonstrations_is_refused_naming_those_with(env_core):
    with pytest.raises(InvalidArgument, match=r"env: 'swe' has no synthetic demonstrations; those that do: \['python', 'workbench'\]"):
        demonstrations(env_core, "swe", seed=0, n=1)
