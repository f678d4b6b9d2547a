"""A multi-turn episode as a training sample, checked token by token: the policy's sampled ids with
mask 1 and their π_inf, the prompt and every environment token (tool results, the next generation
prompt) with mask 0 and no π_inf, and the sequence equal to the template's own rendering."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from services.common.chat_template import assistant_mask, render
from services.common.errors import InvalidArgument
from services.common.toolcalls import format_tool_calls
from services.common.trajectory import Trajectory

TOOLS = [{"type": "function", "name": "python", "description": "Runs code.",
          "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}]
PROMPT = [{"role": "system", "content": "Use the tool."}, {"role": "user", "content": "What is 6 * 7?"}]
CALL = format_tool_calls([{"name": "python", "arguments": {"code": "print(6 * 7)"}}])
TURN_1 = f"I will compute it.\n</think>\n\n{CALL}<|im_end|>"
TURN_2 = "It printed 42.\n</think>\n\nThe answer is 42.<|im_end|>"
OBSERVATION = [{"role": "tool", "content": "42\n"}]


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(str(tiny_model_dir), local_files_only=True)


def enc(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def episode(tok):
    t1, t2 = enc(tok, TURN_1), enc(tok, TURN_2)
    lp1, lp2 = [-0.01 * (k + 1) for k in range(len(t1))], [-0.5 - 0.01 * k for k in range(len(t2))]
    traj = Trajectory.start(tok, PROMPT, TOOLS)
    prompt_ids = list(traj.ids)
    traj.add_turn(t1, lp1)
    traj.add_observation(OBSERVATION)
    env_ids = traj.ids[len(prompt_ids) + len(t1):]
    traj.add_turn(t2, lp2)
    return traj, prompt_ids, (t1, lp1), env_ids, (t2, lp2)


def test_the_loss_mask_token_by_token(tok):
    traj, prompt_ids, (t1, lp1), env_ids, (t2, lp2) = episode(tok)
    s = traj.sample()
    assert prompt_ids == enc(tok, render(tok, PROMPT, tools=TOOLS))
    assert env_ids == enc(tok, "\n<|im_start|>tool\n42\n<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert s.input_ids == prompt_ids + t1 + env_ids + t2
    spans = [(prompt_ids, 0, None), (t1, 1, lp1), (env_ids, 0, None), (t2, 1, lp2)]
    pos = 0
    for ids, mask, lps in spans:
        for k, token in enumerate(ids):
            assert s.input_ids[pos] == token
            assert s.loss_mask[pos] == mask, (pos, tok.decode([token]))
            assert s.inference_logprobs[pos] == (lps[k] if lps else 0.0), pos
            pos += 1
    assert pos == len(s.input_ids) == len(s.loss_mask) == len(s.inference_logprobs)
    assert s.turns == 2 and sum(s.loss_mask) == len(t1) + len(t2)


def test_the_sequence_is_the_templates_rendering_and_its_mask_the_sft_mask(tok):
    traj, *_ = episode(tok)
    s = traj.sample()
    conversation = [*PROMPT, {"role": "assistant", "content": "<think>\nI will compute it.\n</think>\n\n" + CALL},
                    *OBSERVATION, {"role": "assistant", "content": "<think>\nIt printed 42.\n</think>\n\nThe answer is 42."}]
    assert tok.decode(s.input_ids, skip_special_tokens=False) == render(
        tok, conversation, add_generation_prompt=False, tools=TOOLS).rstrip("\n")
    sft_ids, sft_mask = assistant_mask(tok, conversation, tools=TOOLS)
    n = len(s.input_ids)
    assert (sft_ids[:n], sft_mask[:n]) == (s.input_ids, s.loss_mask) and sum(sft_mask[n:]) == 0


def test_ids_are_always_the_next_turns_prompt(tok):
    traj = Trajectory.start(tok, PROMPT, TOOLS)
    traj.add_turn(enc(tok, TURN_1), [0.0] * len(enc(tok, TURN_1)))
    traj.add_observation(OBSERVATION)
    conversation = [*PROMPT, {"role": "assistant", "content": "<think>\nI will compute it.\n</think>\n\n" + CALL},
                    *OBSERVATION]
    assert tok.decode(traj.ids, skip_special_tokens=False) == render(tok, conversation, tools=TOOLS)


def test_a_turn_cut_before_its_im_end_gets_it_as_an_environment_token(tok):
    cut = enc(tok, f"I will compute it.\n</think>\n\n{CALL}")
    traj = Trajectory.start(tok, PROMPT, TOOLS)
    start = len(traj.ids)
    traj.add_turn(cut, [-1.0] * len(cut))
    traj.add_observation(OBSERVATION)
    s = traj.sample()
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    after = start + len(cut)
    assert s.input_ids[after] == im_end and s.loss_mask[after] == 0 and s.inference_logprobs[after] == 0.0
    assert s.loss_mask[start:after] == [1] * len(cut)


def test_non_thinking_mode(tok):
    traj = Trajectory.start(tok, PROMPT, TOOLS, thinking=False)
    assert tok.decode(traj.ids, skip_special_tokens=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    ids = enc(tok, f"{CALL}<|im_end|>")
    traj.add_turn(ids, [0.0] * len(ids))
    traj.add_observation(OBSERVATION)
    assert tok.decode(traj.ids, skip_special_tokens=False).endswith(
        "<|im_start|>tool\n42\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_misuse_names_the_field(tok):
    traj = Trajectory.start(tok, PROMPT)
    with pytest.raises(InvalidArgument, match="logprobs"):
        traj.add_turn([1, 2], [0.0])
    with pytest.raises(InvalidArgument, match="tool_messages"):
        traj.add_observation(OBSERVATION)
    traj.add_turn(enc(tok, TURN_2), [0.0] * len(enc(tok, TURN_2)))
    with pytest.raises(InvalidArgument, match="two assistant turns"):
        traj.add_turn([1], [0.0])
    with pytest.raises(InvalidArgument, match=r"tool_messages\[0\].role"):
        traj.add_observation([{"role": "user", "content": "x"}])
