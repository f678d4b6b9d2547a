"""A multi-turn episode as one training sample: the token ids the policy saw and sampled, the loss mask
with the environment's tokens out, and π_inf on the policy's tokens only.

`Trajectory` is built turn by turn, the way a rollout goes: `start` renders the prompt conversation
with the chat template (generation prompt included); `add_turn` appends the ids the policy sampled
for one assistant turn with their log π_inf, exactly as sampled (never re-tokenised); `add_observation`
appends the environment's part — the close of the assistant turn, the `tool` messages, the next
generation prompt — as the template renders it after that turn, tokenised. `ids` is at every moment
the prompt of the next turn (send it to the policy as token ids), so the sample is the very sequence
the policy conditioned on. `sample()` gives (input_ids, loss_mask, inference_logprobs):
mask 1 on policy tokens, 0 on prompt and environment tokens; logprob = log π_inf on policy tokens,
0.0 elsewhere (never read: the losses use only masked positions).
This module knows nothing about environments, gRPC or the trainer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.chat_template import IM_END, THINK_CLOSE, THINK_OPEN, render
from services.common.errors import InvalidArgument


@dataclass(frozen=True)
class TrajectorySample:
    input_ids: list[int]
    loss_mask: list[int]
    inference_logprobs: list[float]
    turns: int


@dataclass
class Trajectory:
    """One episode's tokens so far (see the module docstring)."""

    tokenizer: Any
    messages: list[dict]
    tools: list[dict] | None = None
    thinking: bool = True
    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: int = 0
    _open_turn: bool = False
    _closed: bool = True

    @classmethod
    def start(cls, tokenizer: Any, messages: Sequence[dict], tools: Sequence[dict] | None = None,
              thinking: bool = True) -> Trajectory:
        """The prompt conversation, rendered with the generation prompt: environment tokens (mask 0)."""
        traj = cls(tokenizer, [dict(m) for m in messages], list(tools) if tools else None, thinking)
        traj._extend(render(tokenizer, traj.messages, thinking, add_generation_prompt=True, tools=traj.tools))
        return traj

    def add_turn(self, policy_ids: Sequence[int], logprobs: Sequence[float]) -> None:
        """The policy's sampled ids of one assistant turn and their log π_inf (mask 1)."""
        if self._open_turn:
            raise InvalidArgument("policy_ids", "two assistant turns in a row: add the observation in between")
        if len(policy_ids) != len(logprobs):
            raise InvalidArgument("logprobs", f"has {len(logprobs)} values for {len(policy_ids)} policy tokens")
        if not policy_ids:
            raise InvalidArgument("policy_ids", "an assistant turn needs at least one token")
        self.ids.extend(int(i) for i in policy_ids)
        self.mask.extend([1] * len(policy_ids))
        self.logprobs.extend(float(x) for x in logprobs)
        text = self.tokenizer.decode(list(policy_ids), skip_special_tokens=False)
        opened = THINK_OPEN + "\n" if self.thinking else f"{THINK_OPEN}\n\n{THINK_CLOSE}\n\n"
        self.messages.append({"role": "assistant", "content": opened + text.split(IM_END)[0]})
        self._closed = text.rstrip().endswith(IM_END)
        self._open_turn = True
        self.turns += 1

    def add_observation(self, tool_messages: Sequence[dict]) -> None:
        """The environment's answer to the last turn, up to the next generation prompt (mask 0).

        Its text is what the template renders after the assistant turn's `<|im_end|>`; a turn the
        sampler cut before its `<|im_end|>` gets it here, as an environment token.
        """
        if not self._open_turn:
            raise InvalidArgument("tool_messages", "an observation must follow an assistant turn")
        for i, m in enumerate(tool_messages):
            if m.get("role") != "tool":
                raise InvalidArgument(f"tool_messages[{i}].role", f"must be 'tool', got {m.get('role')!r}")
        before = render(self.tokenizer, self.messages, self.thinking, add_generation_prompt=False, tools=self.tools)
        cut = before[: before.rindex(IM_END) + len(IM_END)]
        self.messages.extend(dict(m) for m in tool_messages)
        after = render(self.tokenizer, self.messages, self.thinking, add_generation_prompt=True, tools=self.tools)
        if not after.startswith(cut):
            raise InvalidArgument("tool_messages", "the template does not render the conversation as a continuation")
        self._extend(("" if self._closed else IM_END) + after[len(cut):])
        self._open_turn = False

    def sample(self) -> TrajectorySample:
        return TrajectorySample(list(self.ids), list(self.mask), list(self.logprobs), self.turns)

    def _extend(self, text: str) -> None:
        new = self.tokenizer.encode(text, add_special_tokens=False) if text else []
        self.ids.extend(new)
        self.mask.extend([0] * len(new))
        self.logprobs.extend([0.0] * len(new))
