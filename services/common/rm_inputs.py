"""What a reward model reads: the token ids of a (conversation, response) pair and the pad id.

Training (the trainer's `bt` rows) and serving (the reward service's rlhf scores) must read
identical ids, or the score served is not the score trained. One definition:

    ids = encode(chat_template(messages + [assistant: response], enable_thinking=False),
                 add_special_tokens=False)[-max_length:]

(no BOS/EOS added by the tokenizer: the chat template already carries every special token the
model is trained on; cut from the left, since the end of the response matters most). A sequence
classifier pools the score at the last token that is not padding, so the pad id must be the one
both sides pad with: `resolve_pad_id` (the model config's, else the tokenizer's; never a silent 0).
"""

from __future__ import annotations

from typing import Any

from services.common.errors import FailedPrecondition


def reward_text(tokenizer: Any, messages: list[dict], response: str) -> str:
    """The conversation with `response` as its final assistant turn, rendered as the model reads it."""
    turns = [*messages, {"role": "assistant", "content": response}]
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(turns, tokenize=False, enable_thinking=False)
    return "\n".join(f"{t['role']}: {t['content']}" for t in turns)


def reward_input_ids(tokenizer: Any, messages: list[dict], response: str, max_length: int) -> list[int]:
    """The module docstring's ids of one (messages, response) pair, at most `max_length` of them."""
    ids = tokenizer.encode(reward_text(tokenizer, messages, response), add_special_tokens=False)
    return list(ids[-max_length:])


def resolve_pad_id(config_pad_id: int | None, tokenizer: Any, where: str) -> int:
    """The pad id a sequence classifier pools with: the model config's `pad_token_id` when set, else
    the tokenizer's pad token; refused when neither exists (`where` names the model)."""
    if config_pad_id is not None:
        return int(config_pad_id)
    if getattr(tokenizer, "pad_token_id", None) is not None:
        return int(tokenizer.pad_token_id)
    raise FailedPrecondition(f"{where}: neither the model config nor the tokenizer defines a pad token; "
                             "set pad_token_id in config.json (a sequence classifier pools at the last non-pad token)")
