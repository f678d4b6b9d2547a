"""SFT conversations with tool results: scripted solutions played through the env core itself.

`play(core, environment, task, turns)` opens an episode of `task` on an `EnvCore`, steps it with each
assistant turn in order and keeps what came back: the conversation is the episode's first observation,
then each turn as an assistant message followed by the `tool` messages the environment answered with
(the same text, cut to the same `tool_output_chars`, that a rollout's policy reads), and the tools
offered. A demonstration must solve its task: the last turn ends the episode with verdict `ok` and
reward 1, no earlier turn ends it, and no tool answers with an error; otherwise `DemonstrationFailed`
names the task and the turn. `write_sft` writes an environment's synthetic demonstrations (the
`make_demonstrations` of its module in services.common.synth.multiturn: workbench and python have one)
as `<out>/<env>/sft.jsonl`, the SFT record form ({id, domain, messages, tools, metadata}). Nothing
here is a tool result written by hand; a change to a tool changes the demonstrations with it. No gRPC
here.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from services.common.errors import InvalidArgument
from services.common.synth.multiturn import REGISTRY
from services.env.config import EnvConfig
from services.env.core import EnvCore


class DemonstrationFailed(InvalidArgument):
    """A scripted solution that does not solve its task in the environment; `field` names the task and turn."""


def play(core: EnvCore, environment: str, task: dict, turns: list[str]) -> dict:
    """The SFT record of `turns` played on a fresh episode of `task` (see the module docstring)."""
    if not turns:
        raise InvalidArgument("turns", f"task {task.get('id')!r} has no assistant turn to play")
    opened = core.open(environment, json.dumps(task))
    messages = [dict(m) for m in opened.messages]
    where = f"task {task.get('id')!r}"
    try:
        for i, text in enumerate(turns):
            result = core.step(opened.id, text)
            messages.append({"role": "assistant", "content": text})
            messages.extend(dict(m) for m in result.messages)
            bad = [m["content"] for m in result.messages if m["content"].startswith("Error: ")]
            if bad:
                raise DemonstrationFailed(f"{where}.turns[{i}]", f"a tool answered with an error: {bad[0][:200]}")
            if result.done != (i == len(turns) - 1):
                raise DemonstrationFailed(f"{where}.turns[{i}]", f"the episode {'ended' if result.done else 'goes on'} "
                                          f"after turn {i + 1} of {len(turns)} ({result.verdict}: {result.reason})")
        if result.verdict != "ok" or result.reward != 1.0:
            raise DemonstrationFailed(f"{where}.turns", f"does not solve the task: reward {result.reward} "
                                      f"({result.verdict}: {result.reason})")
    finally:
        core.close(opened.id)
    return {"id": str(task.get("id")), "domain": environment, "messages": messages, "tools": list(opened.tools),
            "metadata": {"category": task.get("category", ""), "turns": len(turns), "correct": True}}


DEMONSTRATIONS = {name: module.make_demonstrations for name, module in REGISTRY.items()
                  if hasattr(module, "make_demonstrations")}
"""Environment -> its synthetic demonstrations, `(rng, n) -> [{"task": record, "turns": [text, ...]}]`
(the task generators that have them)."""


def demonstrations(core: EnvCore, environment: str, seed: int, n: int) -> list[dict]:
    """`n` solved conversations of `environment` for `seed` (the tasks of its SFT split: none is a train
    or validation task's), ids `<env>-sft-<i>`."""
    if environment not in DEMONSTRATIONS:
        raise InvalidArgument("env", f"{environment!r} has no synthetic demonstrations; "
                              f"those that do: {sorted(DEMONSTRATIONS)}")
    rng = random.Random(f"cascade-env-synth:{seed}:{environment}:sft")
    out = []
    for i, demo in enumerate(DEMONSTRATIONS[environment](rng, n)):
        record = play(core, environment, demo["task"], demo["turns"])
        record["id"] = f"{environment}-sft-{i:05d}"
        out.append(record)
    return out


def write_sft(out: Path, environment: str, seed: int = 0, n: int = 768, config: EnvConfig | None = None) -> Path:
    """Write `n` demonstrations to `<out>/<environment>/sft.jsonl` (identical for a seed); returns the path.
    `config`: the env settings whose tool output budget the conversations are cut to (default: the
    service's own, CASCADE_ENV_*, as the env service of the same machine would cut them)."""
    if n < 0:
        raise InvalidArgument("n", f"must be >= 0, got {n}")
    core = EnvCore(config or EnvConfig())
    try:
        records = demonstrations(core, environment, seed, n)
    finally:
        core.close_all()
    path = Path(out) / environment / "sft.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records),
                    encoding="utf-8")
    return path
