"""Seconds per MOPD step (and per stage-start evaluation) with overlap off and on, A/B in one invocation.

    .venv/bin/python bench/overlap_bench.py [--rounds 4] [--steps 3] [--out bench/results/overlap.md]

One local stack (policy, teacher, reward, trainer: real processes over gRPC, the tiny model, one
torch thread each as `cascade demo` runs them) serves every run. Each round runs the demo's MOPD
stage (as configs/demo.yaml had it when measured: five domains, 32 prompts x 4 rollouts, 48 new tokens; teachers = the
initial model, grpo_alpha 0.5 so the verifiers score each batch too) for `--steps` steps once with
CASCADE_ORCH_OVERLAP off (every call in turn: the baseline), once on, and once on with
max_staleness 1, the order reversed every other round; before its steps each off / on run takes the
stage's start evaluation with the teachers drawn again (runner.evaluate: 8 validation prompts per
domain x 4 samples). The phases run in this process
(what a worker does per task), timed per step from generate to the end of update. A warm-up run
first is not counted. Reports medians of seconds per step, per phase and per evaluation, the ratio
arm / off per round (runs minutes apart: load drift between rounds cancels) and its median, the
machine and its load average; writes the markdown table to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOMAINS = ["if", "mcqa", "structured", "tool", "code"]
SERVICES = ("policy", "teacher", "reward", "trainer")


def mopd_stage(model: str, steps: int, staleness: int = 0) -> dict:
    """configs/demo.yaml's MOPD stage, its teachers the initial model, with grpo_alpha."""
    return {"max_staleness": staleness, "name": "mopd", "type": "mopd", "domains": DOMAINS, "teachers": {d: model for d in DOMAINS},
            "batch_size": 32, "rollouts_per_prompt": 4, "steps": steps, "grpo_alpha": 0.5,
            "sampling": {"temperature": 1.0, "max_tokens": 48, "thinking": False},
            "optimizer": {"lr": 3.0e-4}, "eps_low": 0.5, "eps_high": 2.0, "remeasure_teachers": True,
            "eval": {"prompts_per_domain": 8, "samples_per_prompt": 4,
                     "sampling": {"temperature": 1.0, "max_tokens": 48, "thinking": False}}}


def one_run(ledger, settings, model: str, steps: int, staleness: int = 0, evaluate: bool = True) -> dict:
    """A fresh MOPD run of `steps` steps under `settings` (and `max_staleness`): seconds of its start
    evaluation (when `evaluate`), of each step and of each step's phases."""
    from services.orchestrator import runner
    from services.orchestrator.cascade_config import CascadeConfig
    from services.orchestrator.clients import ServiceClients
    from services.orchestrator.context import RunContext
    from services.orchestrator.steps import STEP_KINDS
    from services.orchestrator.weights import load_policy_weights

    config = CascadeConfig.model_validate({"name": "overlap-bench", "seed": 0, "model": model, "data": "synthetic",
                                           "stages": [mopd_stage(model, steps, staleness)]})
    run_id = ledger.create_run("overlap-bench", config.model_dump(mode="json"))
    ctx = RunContext(run_id, config, settings, ledger, ServiceClients(settings))
    load_policy_weights(ctx, 0)
    kind = STEP_KINDS["mopd"]
    kind.start_stage(ctx, 0)
    ctx.ledger.begin_stage(run_id, 0, "mopd", "mopd", steps, start_weight_version=0)
    start = time.perf_counter()
    if evaluate:
        runner.evaluate(ctx, 0, runner.BASELINE)
    out: dict = {"eval": time.perf_counter() - start, "steps": [], "phases": {p.name: [] for p in kind.phases}}
    for step in range(steps):
        t0 = time.perf_counter()
        for phase in kind.phases:
            p0 = time.perf_counter()
            phase.run(ctx, 0, step)
            out["phases"][phase.name].append(time.perf_counter() - p0)
        out["steps"].append(time.perf_counter() - t0)
    ctx.clients.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/overlap.md")
    args = ap.parse_args()

    from services.common.supervisor import Supervisor
    from services.common.tinymodel import init_model
    from services.orchestrator.config import OrchestratorSettings
    from services.orchestrator.ledger import Ledger
    from services.orchestrator.stack import local_stack

    home = Path(tempfile.mkdtemp(prefix="overlap-bench-"))
    model = init_model(home / "model", preset="tiny", seed=0)
    stack = local_stack(home, model)
    sup = Supervisor(home / "logs")
    sup.start_all([s for s in stack.specs if s.name in SERVICES])
    try:
        base = OrchestratorSettings(**{k.removeprefix("CASCADE_ORCH_").lower(): v for k, v in stack.env.items()})
        ledger = Ledger(f"sqlite:///{home}/ledger.sqlite")
        arms = {"off": base.model_copy(update={"overlap": False}), "on": base.model_copy(update={"overlap": True})}
        one_run(ledger, arms["on"], str(model), 1)  # warm-up: first calls, data written, caches filled
        results: dict[str, list[dict]] = {"off": [], "on": [], "stale": []}
        loads = [os.getloadavg()[0]]
        for r in range(args.rounds):
            for arm in (("off", "on", "stale") if r % 2 == 0 else ("stale", "on", "off")):
                stale = arm == "stale"
                results[arm].append(one_run(ledger, arms["on" if stale else arm], str(model), args.steps,
                                            staleness=int(stale), evaluate=not stale))
                loads.append(os.getloadavg()[0])
                print(f"round {r + 1} {arm}: steps {[round(s, 2) for s in results[arm][-1]['steps']]} s, "
                      f"evaluation {results[arm][-1]['eval']:.2f} s", flush=True)
    finally:
        sup.stop()
    print(json.dumps({"results": results, "loads": loads}))
    report = render(results, args, loads)
    print(report)
    args.out.write_text(report)


def paired(results: dict[str, list[dict]], arm: str, pick) -> tuple[float, float, list[float]]:
    """(median over the off runs, median over the `arm` runs, per-round ratio arm / off) of the medians of
    pick(run); each round's ratio compares runs made minutes apart, so load drift between rounds cancels."""
    per = {a: [statistics.median(pick(run)) for run in results[a]] for a in ("off", arm)}
    ratios = [x / y for x, y in zip(per[arm], per["off"])]
    return statistics.median(per["off"]), statistics.median(per[arm]), ratios


def render(results: dict[str, list[dict]], args, loads: list[float]) -> str:
    lines = [
        "# Overlap of independent work (issue 23): seconds per MOPD step, overlap off vs on",
        "",
        "`bench/overlap_bench.py` (its docstring has the set-up): configs/demo.yaml's MOPD stage on the tiny",
        f"model with grpo_alpha 0.5, {args.rounds} rounds x {args.steps} steps per arm, the arms' order reversed",
        "every other round, in one invocation on one stack; off = CASCADE_ORCH_OVERLAP=false (every call in",
        "turn, the code before this change), on = the default; a third arm runs overlap on with max_staleness 1",
        "(step t+1 sampled while step t trains; its first step is on-policy; no start evaluation in that arm).",
        "Per run the median over its steps; the ratio is taken per round (runs minutes apart) and its median",
        "reported, with each round's ratio.",
        "",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, shared with other jobs; "
        f"load average (1 min) during the runs {min(loads):.2f}-{max(loads):.2f}.",
        "",
        "| | arm | off (s) | arm (s) | arm / off, median | per round |",
        "|---|---|---:|---:|---:|---|",
    ]
    rows = [("MOPD step (generate + teach + update)", lambda r: r["steps"])]
    rows += [(f"&nbsp; phase {name}", lambda r, n=name: r["phases"][n]) for name in results["off"][0]["phases"]]
    for arm in ("on", "stale"):
        label = "on" if arm == "on" else "on + max_staleness 1"
        for name, pick in rows:
            off, got, ratios = paired(results, arm, pick)
            lines.append(f"| {name} | {label} | {off:.2f} | {got:.2f} | {statistics.median(ratios):.3f} | "
                         + ", ".join(f"{x:.2f}" for x in ratios) + " |")
    off, got, ratios = paired(results, "on", lambda r: [r["eval"]])
    lines.append(f"| start evaluation + teachers drawn again | on | {off:.2f} | {got:.2f} | "
                 f"{statistics.median(ratios):.3f} | " + ", ".join(f"{x:.2f}" for x in ratios) + " |")
    lines += ["", "Every step of every run, seconds (runs in round order):", ""]
    for arm in ("off", "on", "stale"):
        lines.append(f"- {arm}: " + "; ".join(", ".join(f"{s:.2f}" for s in run["steps"]) for run in results[arm]))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
