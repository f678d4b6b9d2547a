"""Same cascade, two checkouts: every evaluation and step metric the ledger records, side by side.

    PYTHONPATH=<checkout> .venv/bin/python bench/orchestrator_parity.py run OUT.json
    .venv/bin/python bench/orchestrator_parity.py compare BEFORE.json AFTER.json

`run` starts the local stack of the checkout on PYTHONPATH (the tiny model, seed 0, CPU), runs a
short cascade that visits every step kind and phase (SFT; GRPO with KL and the overlong rule; an rm
stage and an rlhf GRPO stage scored by it; MOPD with `teachers: auto`, an outcome advantage, sampled
evaluations and the teachers drawn again) on the embedded SQLite broker, and writes the ledger's
evaluations, fresh draws, teachers and step metrics (timings left out) as JSON. It uses only
interfaces both checkouts have (local_stack, Ledger, tasks.submit), so the same file runs against
the commit before a change and after it. `compare` prints every value that differs and exits 1 if
any does. The result of the orchestrator reshape (issue 21) is in bench/results/orchestrator_parity.md.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path

SAMPLING = {"temperature": 1.0, "max_tokens": 12, "thinking": False}
EVAL = {"prompts_per_domain": 4, "samples_per_prompt": 2, "sampling": SAMPLING}


def cascade(model: str) -> dict:
    grpo = {"type": "grpo", "domains": ["mcqa"], "batch_size": 4, "rollouts_per_prompt": 2, "steps": 2,
            "sampling": SAMPLING, "optimizer": {"lr": 1e-3}, "eval_every": 1, "dynamic_filtering": False}
    return {"name": "parity", "seed": 0, "model": model, "data": "synthetic", "stages": [
        {"name": "sft", "type": "sft", "domains": ["mcqa"], "batch_size": 2, "steps": 2, "max_seq_len": 64,
         "optimizer": {"lr": 1e-3, "schedule": {"type": "cosine", "warmup_steps": 1}}, "eval": EVAL},
        {**grpo, "name": "grpo", "kl_coef": 0.1, "overlong": "zero_reward",
         "optimizer": {"lr": 1e-3, "schedule": {"type": "linear_warmup", "warmup_steps": 2, "start_lr": 1e-4}}},
        {"name": "rm", "type": "rm", "domains": ["rlhf"], "output": "parity-rm", "batch_size": 2, "steps": 1,
         "max_seq_len": 64, "optimizer": {"lr": 1e-3}},
        {**grpo, "name": "rlhf", "domains": ["rlhf"], "reward_model": "parity-rm", "steps": 1,
         "eval": {"prompts_per_domain": 2}},
        {"name": "mopd", "type": "mopd", "domains": ["mcqa"], "teachers": "auto", "batch_size": 4,
         "rollouts_per_prompt": 2, "steps": 2, "sampling": SAMPLING, "optimizer": {"lr": 1e-3},
         "grpo_alpha": 0.5, "eval": EVAL},
    ]}


def run(out: Path) -> None:
    from services.common.supervisor import Supervisor
    from services.common.tinymodel import init_model
    from services.orchestrator.cascade_config import CascadeConfig
    from services.orchestrator.config import OrchestratorSettings
    from services.orchestrator.ledger import Ledger
    from services.orchestrator.stack import local_stack
    from services.orchestrator.tasks import submit

    home = Path(tempfile.mkdtemp(prefix="parity-"))
    model = init_model(home / "model", preset="tiny", seed=0)
    built = local_stack(home, model)
    broker = f"sqla+sqlite:///{home}/broker.sqlite"
    env = {**built.env, "CASCADE_ORCH_BROKER_URL": broker}
    settings = OrchestratorSettings(**{k[len("CASCADE_ORCH_"):].lower(): v for k, v in env.items()})
    sup = Supervisor(home / "logs")
    try:
        sup.start_all([s for s in built.specs if s.name != "worker"])
        worker = next(s for s in built.specs if s.name == "worker")
        sup.start(type(worker)("worker", worker.argv, {**worker.env, **env}, restart=False), wait=False)
        ledger = Ledger(settings.ledger())
        config = CascadeConfig.model_validate(cascade(str(model))).model_dump(mode="json")
        run_id = ledger.create_run("parity", config)
        start = time.monotonic()
        submit(run_id, settings)
        while ledger.run(run_id).status not in ("succeeded", "failed", "cancelled"):
            if time.monotonic() - start > 1800:
                raise TimeoutError(f"run did not finish: {ledger.resume_point(run_id)}")
            time.sleep(0.5)
        record = ledger.run(run_id)
        if record.status != "succeeded":
            raise RuntimeError(f"run {record.status}: {record.error}\n{sup.tail('worker')}")
        out.write_text(json.dumps(snapshot(ledger, run_id, config, home), indent=1, sort_keys=True))
        print(f"{out}: {time.monotonic() - start:.0f} s")
    finally:
        sup.stop(grace=5)


def snapshot(ledger, run_id: int, config: dict, home: Path) -> dict:
    """Everything the ledger holds about the run's numbers, paths made relative to the stack's home."""
    def rel(path: str) -> str:
        return path.replace(str(home), "<home>")

    n = len(config["stages"])
    return {
        "steps": {f"{s.stage_index}/{s.step_index}": {"weight_version": s.weight_version, "phase": s.phase,
                                                      "metrics": s.metrics} for s in ledger.steps(run_id)},
        "evals": {f"{e.stage_index}/{e.step_index}/{e.domain}": {"score": e.score, "n": e.n,
                                                                  "weight_version": e.weight_version,
                                                                  "checkpoint": rel(e.checkpoint)}
                  for e in ledger.evals(run_id)},
        "fresh": {f"{s}/{role}": ledger.fresh_evals(run_id, s, role) for s in range(n) for role in ("teacher", "student")},
        "teachers": {str(s): {d: [rel(c), score] for d, (c, score) in ledger.teachers(run_id, s).items()}
                     for s in range(n)},
    }


def flatten(tree, prefix: str = "") -> dict[str, object]:
    if isinstance(tree, dict):
        out: dict[str, object] = {}
        for k, v in tree.items():
            out.update(flatten(v, f"{prefix}{k}." if prefix or k else k))
        return out
    return {prefix.rstrip("."): tree}


def compare(before: Path, after: Path) -> int:
    a, b = (flatten(json.loads(p.read_text())) for p in (before, after))
    differ = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, "<absent>"), b.get(key, "<absent>")
        same = x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        if not same:
            differ.append(f"{key}: {x!r} -> {y!r}")
    print(f"{len(a)} values before, {len(b)} after, {len(differ)} differ")
    print("\n".join(differ))
    return 1 if differ else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        run(Path(sys.argv[2]))
    elif sys.argv[1:2] == ["compare"]:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
    else:
        sys.exit(__doc__)
