"""GRPO with vLLM generating: Cascade's policy on its `vllm` backend vs TRL's GRPOTrainer with `use_vllm=True`.

    .venv/bin/python bench/trl_vllm.py [--out bench/results/trl_vllm.md] [--work .cascade/bench-trl-vllm]

Needs TRL beside vLLM (the `bench` extra). Same student, prompts, group size, token budget, learning
rate and steps as bench/trl_compare.py (its models and spec are reused). TRL's vLLM mode is tried
first, in its one-process form (`vllm_mode="colocate"`, the form a one-machine user starts with);
where it cannot run, its own error is recorded word for word and the comparison is made with what
runs: Cascade on `vllm` and on `hf`, and TRL without vLLM, in A/B-interleaved rounds of this one
invocation (medians; the first step of each run is warm-up, as in trl_compare).
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
from trl_models import build_models  # noqa: E402
from trl_report import fmt, machine, phase_seconds, ratio, step_seconds, table, tokens_per_second  # noqa: E402


def try_trl_vllm(spec: dict, work: Path) -> tuple[dict | None, str | None]:
    """TRL's GRPO with vLLM colocated; (its output, None) or (None, the last line of its error)."""
    try:
        return run_trl("grpo_vllm", spec, work), None
    except RuntimeError as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line or "Exception" in line]
        where = [line for line in lines if line.startswith(("[rank0]:   File", "File"))]
        return None, " | ".join(filter(None, [errors[-1] if errors else lines[-1], where[-1] if where else ""]))


def cascade_run(args, models, home: Path, backend: str) -> dict:
    with CascadeStack(fresh(home), models.base, backend=backend) as stack:
        started = time.perf_counter()
        out = stack.run(cascade_config(args, "grpo", models) | {"name": f"grpo-{backend}"}, timeout=1800)
        out["run_seconds"] = time.perf_counter() - started
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results/trl_vllm.md"))
    ap.add_argument("--work", type=Path, default=Path(".cascade/bench-trl-vllm"))
    shape_arguments(ap)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--eval-prompts", type=int, default=32)
    args = ap.parse_args()
    args.work = args.work.resolve()
    started = time.perf_counter()
    models = build_models(args.work / "models", args.domain, args.seed)
    spec = trl_spec(args, models)

    print("TRL GRPOTrainer with use_vllm=True (colocate) ...", flush=True)
    trl_vllm, trl_vllm_error = try_trl_vllm(spec, args.work / "trl-vllm")
    print(f"  {'ran' if trl_vllm else 'could not run: ' + trl_vllm_error}", flush=True)
    runs: dict[str, list] = {"cascade-vllm": [], "cascade-hf": [], "trl": [], "trl-vllm": [trl_vllm] if trl_vllm else []}
    for r in range(args.repeats):
        jobs = [("cascade-vllm", lambda r=r: cascade_run(args, models, args.work / f"vllm-{r}", "vllm")),
                ("cascade-hf", lambda r=r: cascade_run(args, models, args.work / f"hf-{r}", "hf")),
                ("trl", lambda r=r: run_trl("grpo", spec, args.work / f"trl-{r}"))]
        for name, job in (jobs if r % 2 == 0 else jobs[::-1]):
            t = time.perf_counter()
            runs[name].append(job())
            print(f"  round {r + 1}/{args.repeats}: {name} in {time.perf_counter() - t:.0f}s", flush=True)
    (args.work / "results.json").write_text(json.dumps({"runs": runs, "trl_vllm_error": trl_vllm_error}))
    text = report(args, runs, trl_vllm_error, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


def _steps(outs: list[dict]) -> list[list[dict]]:
    return [o["steps"] if "steps" in o else o["records"] for o in outs]


WHY_SYNC = ("It fails at its first weight sync into the engine: vLLM's CPU backend repacks linear weights after "
            "loading, so loading raw checkpoint tensors into the live model (TRL's `sync_weights` calls "
            "`model_runner.model.load_weights` in place) finds parameters in another layout. Cascade's engine swaps "
            "weights through a worker extension that repacks them as the CPU backend does "
            "(services/common/vllm_engine.py). TRL's server mode (`trl vllm-serve`) sends weights with vLLM's NCCL "
            "weight transfer, which needs CUDA. ")


def report(args, runs: dict, trl_vllm_error: str | None, seconds: float) -> str:
    s = {name: _steps(outs) for name, outs in runs.items() if outs}
    sec = {name: step_seconds(v) for name, v in s.items()}
    gen = {name: phase_seconds(v, "generated" if name.startswith("cascade") else "generate") for name, v in s.items()}
    tps = {name: tokens_per_second(v) for name, v in s.items()}
    rows = [[name, fmt(sec[name]), fmt(gen[name]), f"{tps[name]:.0f}", ratio(sec[name], sec["trl"]), str(len(runs[name]))]
            for name in ("cascade-vllm", "cascade-hf", "trl", "trl-vllm") if name in s]
    trl_line = ("TRL's vLLM mode ran: its row is above." if trl_vllm_error is None else
                f"TRL's vLLM mode could not run on this CPU. `GRPOTrainer(use_vllm=True, vllm_mode=\"colocate\")` starts "
                f"vLLM's engine (the CPU build) and then fails: `{trl_vllm_error}`. " + (WHY_SYNC if "weight" in trl_vllm_error
                                                                              else "") + "So the comparison below is with TRL without vLLM, what runs here.")
    return "\n".join([
        "# GRPO with vLLM generating: Cascade vs TRL", "",
        f"Machine: {machine()}.", "",
        f"Command: `.venv/bin/python bench/trl_vllm.py` ({seconds / 60:.1f} min in all; load average at the end "
        f"{os.getloadavg()[0]:.1f}). Shapes: {args.prompts} prompts × G = {args.group}, at most {args.max_tokens} new "
        f"tokens, {args.steps} steps, lr {args.lr:g}, the student and prompts of bench/trl_compare.py (`{args.domain}`). "
        f"{args.repeats} A/B-interleaved rounds; medians over steps after the first of each run.", "",
        trl_line, "",
        *table(["side", "s / step", "generation s / step", "generated tokens/s", "s / step vs TRL (no vLLM)", "runs"], rows),
        "",
        "Cascade's vLLM policy is the engine of services/common/vllm_engine.py (eager mode, a small KV cache, "
        "weights swapped in place after each step); its start (minutes on 2 cores) is outside the step times. "
        "Generation's share of a step: " + ", ".join(f"{name} {gen[name] / sec[name]:.0%}" for name in s) + ".", ""])


if __name__ == "__main__":
    main()
