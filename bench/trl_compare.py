"""Side-by-side benchmarks against TRL on one machine (issue #10).

    .venv/bin/python bench/trl_compare.py [--out bench/results/trl_compare.md] [--work .cascade/bench-trl]

1. GRPO: the same student (tiny model, seed 0, a short SFT), prompts (Cascade's deterministic
   batches of one domain), group size, max new tokens, learning rate and number of steps in TRL's
   GRPOTrainer (CPU, no vLLM, β = 0, token-level "dapo" loss, constant lr) and in Cascade (the
   embedded default: every service a local process, Celery on SQLite). Time per step and per
   phase, generated tokens/s, the training-reward curve and the final validation reward.
2. On-policy distillation: Cascade's MOPD stage vs TRL's GKDTrainer with λ = 1 (fully on-policy,
   β = 1: reverse KL, the divergence MOPD's sampled-token advantage estimates), same student and
   teacher (the same SFT run continued for more steps). Time per step and validation reward.
3. Scaling on one machine: Cascade steps/s with 2 Celery worker processes instead of 1 (GRPO) and
   with 2 teacher replicas instead of 1 (MOPD).

Every round runs Cascade, TRL and the Cascade scaling variant back to back (the order alternates
between rounds), so the machine's load hits all sides alike; figures are medians over rounds, and
each ratio comes from runs of this one invocation. Validation reward: greedy decoding of the final
weights of both sides by the same in-process evaluator (bench/trl_models.py).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from trl_models import build_models, validation_reward  # noqa: E402

from services.orchestrator import datasets  # noqa: E402
from services.orchestrator.batches import draw_batch  # noqa: E402


def stage(args, kind: str, models) -> dict:
    """The one stage of a Cascade run: the TRL run's shapes, no dynamic filtering, no overlong rule."""
    common = {"name": kind, "type": kind, "domains": [args.domain], "batch_size": args.prompts,
              "rollouts_per_prompt": args.group, "steps": args.steps, "overlong": "none",
              "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": args.max_tokens, "thinking": False},
              "optimizer": {"lr": args.lr}, "eval": {"prompts_per_domain": args.eval_prompts}}
    if kind == "grpo":
        return {**common, "kl_coef": 0.0, "dynamic_filtering": False}
    return {**common, "teachers": {args.domain: str(models.teacher)}}


def cascade_config(args, kind: str, models) -> dict:
    return {"name": f"bench-{kind}", "seed": args.seed, "model": str(models.base), "data": str(models.data),
            "stages": [stage(args, kind, models)]}


def trl_spec(args, models) -> dict:
    """The prompts of every step in order: exactly the batches Cascade's stage 0 draws."""
    pool = datasets.tasks(models.data, [args.domain], "train")
    records = [r for step in range(args.steps) for r in draw_batch(pool, args.seed, 0, step, args.prompts)]
    return {"model": str(models.base), "teacher": str(models.teacher), "steps": args.steps, "lr": args.lr,
            "seed": args.seed, "prompts_per_step": args.prompts, "group": args.group, "max_tokens": args.max_tokens,
            "records": [{"messages": [m.model_dump() for m in r.messages], "task_json": r.model_dump_json()}
                        for r in records]}


def fresh(folder: Path) -> Path:
    """An empty folder (a previous invocation's broker or ledger must not leak into this run)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def run_trl(kind: str, spec: dict, work: Path, threads: int = 1) -> dict:
    """One TRL run in its own process with `threads` torch threads (each Cascade service gets 1)."""
    fresh(work)
    (work / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(Path(__file__).parent / "trl_runs.py"), kind, str(work / "spec.json"),
                           str(work / "out.json")], capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode:
        raise RuntimeError(f"TRL {kind} run failed:\n{proc.stderr[-3000:]}")
    return json.loads((work / "out.json").read_text())


def run_cascade(args, kind: str, models, home: Path, workers: int = 1, teachers: int = 1) -> dict:
    from trl_cascade import CascadeStack

    with CascadeStack(fresh(home), models.base, workers=workers, teachers=teachers) as stack:
        return stack.run(cascade_config(args, kind, models))


def rounds(args, kind: str, models, spec: dict, variant: dict, repeats: int) -> dict:
    """`repeats` rounds of (Cascade, TRL[, Cascade variant]), order alternating; every run's output.

    The first `args.scaling_repeats` rounds also run Cascade with `variant` (workers= / teachers=)."""
    trl_kind = "grpo" if kind == "grpo" else "gkd"
    out: dict[str, list] = {"cascade": [], "trl": [], "variant": []}
    for r in range(repeats):
        jobs = [("cascade", functools.partial(run_cascade, args, kind, models, args.work / f"{kind}-cascade-{r}")),
                ("trl", functools.partial(run_trl, trl_kind, spec, args.work / f"{kind}-trl-{r}"))]
        if r < args.scaling_repeats:
            jobs.append(("variant", functools.partial(run_cascade, args, kind, models,
                                                      args.work / f"{kind}-variant-{r}", **variant)))
        for name, job in (jobs if r % 2 == 0 else jobs[::-1]):
            start = time.perf_counter()
            out[name].append(job())
            print(f"  {kind} round {r + 1}/{repeats}: {name} done in {time.perf_counter() - start:.0f}s", flush=True)
    return out


def shape_arguments(ap: argparse.ArgumentParser) -> None:
    """The shapes both sides share: domain, seed, prompts per step, group size, token budget, steps, lr."""
    ap.add_argument("--domain", default="structured")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", type=int, default=8, help="prompts per step (B)")
    ap.add_argument("--group", type=int, default=4, help="samples per prompt (G)")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--lr", type=float, default=5e-4)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results/trl_compare.md"))
    ap.add_argument("--work", type=Path, default=Path(".cascade/bench-trl"))
    shape_arguments(ap)
    ap.add_argument("--repeats", type=int, default=3, help="GRPO rounds")
    ap.add_argument("--mopd-repeats", type=int, default=2, help="MOPD rounds")
    ap.add_argument("--scaling-repeats", type=int, default=2, help="rounds that also run the scaling variant")
    ap.add_argument("--eval-prompts", type=int, default=32)
    args = ap.parse_args()
    args.work = args.work.resolve()
    started = time.perf_counter()

    print("the student and teacher: a short SFT (reused when already built) ...", flush=True)
    models = build_models(args.work / "models", args.domain, args.seed)
    spec = trl_spec(args, models)
    print("GRPO: Cascade vs TRL GRPOTrainer vs Cascade with 2 workers", flush=True)
    grpo = rounds(args, "grpo", models, spec, {"workers": 2}, args.repeats)
    print("MOPD: Cascade vs TRL GKDTrainer (lambda=1) vs Cascade with 2 teacher replicas", flush=True)
    mopd = rounds(args, "mopd", models, spec, {"teachers": 2}, args.mopd_repeats)

    print("validation reward of the final weights ...", flush=True)
    val = datasets.tasks(models.data, [args.domain], "validation")[: args.eval_prompts]
    scores = {"start": validation_reward(models.base, val, args.max_tokens),
              "teacher": validation_reward(models.teacher, val, args.max_tokens)}
    for kind, runs in (("grpo", grpo), ("mopd", mopd)):
        for side in ("cascade", "trl"):
            scores[f"{kind}/{side}"] = [validation_reward(Path(r["final"]), val, args.max_tokens) for r in runs[side]]
    from trl_report import write_report

    (args.work / "results.json").write_text(json.dumps({"grpo": grpo, "mopd": mopd, "scores": scores}))
    text = write_report(args, models, grpo, mopd, scores, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
