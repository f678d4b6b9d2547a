"""GRPO seconds per step, Cascade vs TRL at TRL's best thread setting, on-policy and one step off (issue #23).

    .venv/bin/python bench/grpo_speed.py [--seeds 0,1,2] [--trl-threads 1,2] [--out bench/results/grpo_speed.md]

Needs the `bench` extra (TRL). Per seed (the tiny model's initialisation, its data and its SFT all
come from the seed, bench/trl_models.py), one round of four runs on the same student, prompts, group
size, token budget, learning rate and steps (the shapes of bench/trl_compare.py):

- `cascade`: one strictly on-policy `grpo` stage on the embedded stack as `cascade up` starts it
  (the stack's core pool on: each heavy call runs on every core, two at once take turns);
- `cascade-stale1`: the same stage with `max_staleness: 1` (the policy samples step t+1 on version
  t while the trainer trains step t; MOPD's window / GRPO's importance weights correct for it);
- `trl-<k>`: TRL's GRPOTrainer strictly on-policy (`steps_per_generation=1`, `num_iterations=1`)
  with k torch threads, for each k of `--trl-threads`; the baseline is the k with the lowest median.

The order of the runs rotates between seeds so the machine's load hits every side alike. Seconds
per step: medians over every step after the first of each run (warm-up). Validation reward: greedy,
the final weights of every run scored by one in-process evaluator; the stale run's reward is checked
against the on-policy runs' seed-to-seed spread (min..max over seeds of the on-policy side).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trl_cascade import CascadeStack  # noqa: E402
from trl_compare import cascade_config, fresh, run_trl, shape_arguments, trl_spec  # noqa: E402
from trl_models import build_models, validation_reward  # noqa: E402
from trl_report import fmt, machine, phase_seconds, ratio, step_seconds, steps, table  # noqa: E402

from services.orchestrator import datasets  # noqa: E402


def run_cascade(args, models, home: Path, staleness: int) -> dict:
    config = cascade_config(args, "grpo", models)
    config["stages"][0]["max_staleness"] = staleness
    with CascadeStack(fresh(home), models.base) as stack:
        return stack.run(config)


def one_seed(args, seed: int, turn: int) -> dict:
    """Every side's run for one seed: {side: run output}, the start model's validation reward."""
    args.seed = seed
    models = build_models(args.work / f"models-{seed}", args.domain, seed)
    spec = trl_spec(args, models)
    jobs = [("cascade", lambda: run_cascade(args, models, args.work / f"s{seed}-cascade", 0)),
            ("cascade-stale1", lambda: run_cascade(args, models, args.work / f"s{seed}-stale1", 1))]
    jobs += [(f"trl-{k}", lambda k=k: run_trl("grpo", spec, args.work / f"s{seed}-trl-{k}", threads=k))
             for k in args.trl_threads]
    jobs = jobs[turn % len(jobs):] + jobs[: turn % len(jobs)]
    out: dict = {}
    for name, job in jobs:
        started = time.perf_counter()
        out[name] = job()
        print(f"  seed {seed}: {name} done in {time.perf_counter() - started:.0f}s", flush=True)
    val = datasets.tasks(models.data, [args.domain], "validation")[: args.eval_prompts]
    scores = {name: validation_reward(Path(run["final"]), val, args.max_tokens) for name, run in out.items()}
    scores["start"] = validation_reward(models.base, val, args.max_tokens)
    return {"runs": out, "scores": scores}


def report(args, seeds: dict, seconds: float) -> str:
    sides = ["cascade", "cascade-stale1"] + [f"trl-{k}" for k in args.trl_threads]
    def runs(side: str) -> list[list[dict]]:  # the side's per-step records, one list per seed
        return steps([seeds[x]["runs"][side] for x in seeds])

    per = {s: step_seconds(runs(s)) for s in sides}
    best = min((f"trl-{k}" for k in args.trl_threads), key=per.get)
    base = per[best]

    def gen(side: str) -> str:  # Cascade's ledger phase `generated`, TRL's timed `_generate`
        return fmt(phase_seconds(runs(side), "generated" if side.startswith("cascade") else "generate"))

    rows = [[s, fmt(per[s]), gen(s), " ".join(fmt(step_seconds([run])) for run in runs(s)),
             ratio(per[s], base)] for s in sides]
    targets = [["Cascade on-policy / TRL best", ratio(per["cascade"], base), "≤ 0.75x",
                "yes" if per["cascade"] <= 0.75 * base else "no"],
               ["Cascade max_staleness 1 / TRL best", ratio(per["cascade-stale1"], base), "≤ 0.6x",
                "yes" if per["cascade-stale1"] <= 0.6 * base else "no"]]
    on = [seeds[x]["scores"]["cascade"] for x in seeds]
    stale = [seeds[x]["scores"]["cascade-stale1"] for x in seeds]
    inside = all(min(on) <= v <= max(on) for v in stale)
    targets.append(["stale run's validation reward inside the on-policy seeds' spread",
                    f"{' '.join(fmt(v) for v in stale)} vs {fmt(min(on))}..{fmt(max(on))}", "every seed",
                    "yes" if inside else "no"])
    score_rows = [[str(x), fmt(seeds[x]["scores"]["start"])] + [fmt(seeds[x]["scores"][s]) for s in sides]
                  for x in seeds]
    return "\n".join([
        "# GRPO seconds per step: Cascade vs TRL at its best thread setting", "",
        f"Machine: {machine()}.", "",
        f"Command: `.venv/bin/python bench/grpo_speed.py --seeds {','.join(map(str, seeds))} --trl-threads "
        f"{','.join(map(str, args.trl_threads))}` ({seconds / 60:.1f} min in all; load average at the end "
        f"{os.getloadavg()[0]:.1f}). Shapes: {args.prompts} prompts × G = {args.group}, at most {args.max_tokens} "
        f"new tokens, {args.steps} steps, lr {args.lr:g}, domain `{args.domain}`; one round of every side per seed, "
        "the order rotating; medians over every step after each run's first.", "",
        *table(["side", "s / step (median)", "generation s / step", "s / step per seed", f"/ {best}"], rows), "",
        f"TRL's best thread setting on this machine: {best} ({fmt(base)} s a step).", "",
        *table(["comparison", "measured", "target", "met"], targets), "",
        "Validation reward (greedy, the final weights):", "",
        *table(["seed", "start"] + sides, score_rows), "",
    ]) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results/grpo_speed.md"))
    ap.add_argument("--work", type=Path, default=Path(".cascade/bench-grpo-speed"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--trl-threads", default="1,2")
    ap.add_argument("--eval-prompts", type=int, default=32)
    shape_arguments(ap)
    args = ap.parse_args()
    args.work = args.work.resolve()
    args.trl_threads = [int(k) for k in args.trl_threads.split(",")]
    started = time.perf_counter()
    seeds = {}
    for turn, seed in enumerate(int(s) for s in args.seeds.split(",")):
        print(f"seed {seed}: models, then every side ...", flush=True)
        seeds[seed] = one_seed(args, seed, turn)
    (args.work / "results.json").write_text(json.dumps({str(k): v for k, v in seeds.items()}))
    text = report(args, seeds, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
