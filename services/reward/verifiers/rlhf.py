"""`rlhf`: a reward model's scalar for (the task's messages, the response).

The reward is the model's raw Bradley–Terry score (not 0/1), so the verdict is `correct` whenever
a score was produced; group-relative advantages make the scale irrelevant. This module knows
nothing about how the model is loaded (see `rm.py`) or about gRPC.
"""

from __future__ import annotations

import math
from typing import Any

from services.reward.verifiers.base import Check, Context, Outcome, error, invalid


def rlhf_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """The reward model's score of the response; `error` when no model is configured."""
    if ctx.reward_model is None:
        return error("no reward model configured (set CASCADE_REWARD_REWARD_MODEL)")
    if not response.strip():
        return invalid("empty response")
    messages = [{"role": m.role, "content": m.content} if hasattr(m, "role") else dict(m) for m in task.messages]
    (score,) = ctx.reward_model.score([(messages, response)])
    if not math.isfinite(score):
        return error(f"reward model returned {score}")
    return Outcome(score, "correct", f"reward model score {score:.4f}", (Check("reward_model", True, f"{score:.6f}"),))
