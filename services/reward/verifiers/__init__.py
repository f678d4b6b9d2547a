"""The verifier registry: domain name -> `Verifier` (one signature: `(task, response, ctx) -> Outcome`).

`where` says what a verifier needs to run: `pure` ones are CPU-only functions of their inputs and
run in the core's deadline pool (a worker process killed on time-out); `sandbox` ones drive the
code sandbox from a thread; `model` ones call the reward model. Adding a domain is one line here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from services.reward.verifiers.base import Context, Outcome, VerifyFn, VerifyOptions
from services.reward.verifiers.code import code_reward
from services.reward.verifiers.ifeval import if_reward
from services.reward.verifiers.long_context import long_context_reward
from services.reward.verifiers.math import math_reward
from services.reward.verifiers.mcqa import mcqa_reward
from services.reward.verifiers.rlhf import rlhf_reward
from services.reward.verifiers.structured import structured_reward
from services.reward.verifiers.swe import swe_reward
from services.reward.verifiers.tool import tool_reward


@dataclass(frozen=True)
class Verifier:
    """One domain's scorer and where it runs."""

    fn: VerifyFn
    where: Literal["pure", "sandbox", "model"]


VERIFIERS: dict[str, Verifier] = {
    "math": Verifier(math_reward, "pure"),
    "if": Verifier(if_reward, "pure"),
    "structured": Verifier(structured_reward, "pure"),
    "tool": Verifier(tool_reward, "pure"),
    "mcqa": Verifier(mcqa_reward, "pure"),
    "long_context": Verifier(long_context_reward, "pure"),
    "code": Verifier(code_reward, "sandbox"),
    "swe": Verifier(swe_reward, "sandbox"),
    "rlhf": Verifier(rlhf_reward, "model"),
}

UNSCORED: dict[str, str] = {
    "workbench": (
        "workbench rows are multi-turn tasks scored by the end state of the WorkBench tables in the "
        "workbench environment (the env service, with the tables folder configured), not by the reward service"
    ),
    "python": (
        "python rows are tool-integrated reasoning episodes: the model runs cells in the python environment "
        "of the env service, which scores the final answer; the reward service never sees the cells' output"
    ),
}
"""Domains the reward service refuses, with why: their reward comes from an environment's end state."""

__all__ = ["UNSCORED", "VERIFIERS", "Context", "Outcome", "Verifier", "VerifyOptions"]
