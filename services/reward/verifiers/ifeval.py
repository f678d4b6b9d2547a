"""`if`: instruction following, IFEval style, over a task's `instruction_id_list` and `kwargs`.

The checks are IFEval's 25 (`ifeval_checks.py`) and the verifiable-instructions ones IF-RL adds
(`verifiable_checks.py`). NeMo Gym rows are read as NeMo Gym reads them: fields under
`verifier_metadata` first, null kwargs entries as no arguments, and the row's own `grading_mode`
(binary / fraction) over the service's `if_reward`.

Strict mode checks the response as is. Loose mode (IFEval's) also tries the response without its
first line, without its last line, without both, and each of those with `*` removed; an
instruction is followed when any of these variants passes. The reward is all-or-nothing on the
configured mode (IF-RL's choice) or the fraction of instructions followed. This module knows
nothing about how the checks work (see `ifeval_checks.py`) or about gRPC.
"""

from __future__ import annotations

from typing import Any

from services.common.errors import InvalidArgument
from services.common.nemo_gym import if_fields
from services.reward.verifiers import verifiable_checks  # noqa: F401  (registers the IF-RL checks)
from services.reward.verifiers.base import Check, Context, Outcome, correct, incorrect, invalid
from services.reward.verifiers.ifeval_checks import CHECKS, RELATIONS, REQUIRED


def loose_variants(response: str) -> list[str]:
    """The response, minus first line, minus last line, minus both; each also with `*` removed."""
    lines = response.split("\n")
    base = [response, "\n".join(lines[1:]).strip(), "\n".join(lines[:-1]).strip(), "\n".join(lines[1:-1]).strip()]
    return base + [v.replace("*", "") for v in base]


def instruction_plan(task: Any) -> list[tuple[str, dict]]:
    """(instruction id, its kwargs without unset values) pairs, validated; InvalidArgument names the field."""
    ids, raw_kwargs, _ = if_fields(task)
    if not isinstance(ids, list) or not ids:
        raise InvalidArgument("instruction_id_list", f"domain 'if' needs a non-empty list, got {ids!r}")
    raw_kwargs = raw_kwargs or [{} for _ in ids]
    if not isinstance(raw_kwargs, list) or len(raw_kwargs) != len(ids):
        raise InvalidArgument("kwargs", f"must be a list with one object per instruction ({len(ids)})")
    plan = []
    for i, (iid, kw) in enumerate(zip(ids, raw_kwargs)):
        if iid not in CHECKS:
            raise InvalidArgument(f"instruction_id_list[{i}]", f"unknown instruction id {iid!r}")
        kw = {k: v for k, v in (kw or {}).items() if v is not None}
        for name in REQUIRED[iid]:
            if name not in kw:
                raise InvalidArgument(f"kwargs[{i}].{name}", f"required by {iid}")
        for name in ("relation", "let_relation", "capital_relation"):
            if name in kw and kw[name] not in RELATIONS:
                raise InvalidArgument(f"kwargs[{i}].{name}", f"must be one of {RELATIONS}, got {kw[name]!r}")
        plan.append((iid, kw))
    return plan


def follows(response: str, iid: str, kwargs: dict, mode: str) -> bool:
    """Whether `response` follows one instruction in `mode` (strict / loose)."""
    fn = CHECKS[iid]
    if mode == "strict":
        return bool(response.strip()) and fn(response, kwargs)
    return any(v.strip() and fn(v, kwargs) for v in loose_variants(response))


def if_reward(task: Any, response: str, ctx: Context) -> Outcome:
    """IFEval reward: 1 if every instruction is followed (or the followed fraction), mode from options."""
    plan = instruction_plan(task)
    if not response.strip():
        return invalid("empty response")
    mode, checks = ctx.options.if_mode, []
    for iid, kw in plan:
        strict = follows(response, iid, kw, "strict")
        loose = strict or follows(response, iid, kw, "loose")
        checks.append(Check(iid, strict if mode == "strict" else loose, f"strict={strict} loose={loose}"))
    followed = sum(c.passed for c in checks)
    grading = {"binary": "all", "fraction": "fraction"}.get(if_fields(task)[2], ctx.options.if_reward)
    reward = followed / len(checks) if grading == "fraction" else float(followed == len(checks))
    if followed == len(checks):
        return correct(f"all {len(checks)} instructions followed ({mode})", checks, reward)
    missed = ", ".join(c.name for c in checks if not c.passed)
    return incorrect(f"{followed}/{len(checks)} followed ({mode}); missed {missed}", checks, reward)
