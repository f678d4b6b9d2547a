"""Figures and tables of the TRL comparison: medians over interleaved runs, the machine, markdown.

Pure functions over the per-step records both sides produce ({"seconds", "phases", "tokens",
"reward_mean"}); the first step of every run is a warm-up (model and thread-pool start, first
Celery hops) and is left out of timing medians, never out of reward curves. This module knows
nothing about how the runs were made.
"""

from __future__ import annotations

import os
import platform
import statistics
from importlib import metadata

WARMUP_STEPS = 1


def median(values) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def step_seconds(runs: list[list[dict]]) -> float:
    """Median wall seconds per step over every timed step of every run."""
    return median(r["seconds"] for run in runs for r in run[WARMUP_STEPS:])


def phase_seconds(runs: list[list[dict]], phase: str) -> float:
    """Median seconds of one phase per step (0 where a step did not record it)."""
    return median(r["phases"].get(phase, 0.0) for run in runs for r in run[WARMUP_STEPS:])


def tokens_per_second(runs: list[list[dict]]) -> float:
    """Generated tokens / wall seconds, per run over its timed steps; the median of runs."""
    rates = []
    for run in runs:
        timed = run[WARMUP_STEPS:]
        if timed:
            rates.append(sum(r["tokens"] for r in timed) / sum(r["seconds"] for r in timed))
    return median(rates)


def reward_curve(runs: list[list[dict]]) -> list[float]:
    """Per step, the median over runs of the mean training reward."""
    steps = min(len(run) for run in runs)
    return [median(run[k].get("reward_mean") for run in runs) for k in range(steps)]


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def machine() -> str:
    """CPU model, cores, RAM, load and the library versions, in one line."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    versions = ", ".join(f"{p} {_version(p)}" for p in ("torch", "transformers", "trl", "accelerate", "deepspeed", "celery"))
    return (f"{cpu}, {os.cpu_count()} cores, {ram:.0f} GiB RAM, Linux {platform.release()}, "
            f"Python {platform.python_version()}; {versions}")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    align = ["---"] + ["---:"] * (len(header) - 1)
    return ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"] + ["| " + " | ".join(r) + " |" for r in rows]


def fmt(x: float, digits: int = 2) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def curve(values: list[float]) -> str:
    return " → ".join(fmt(v) for v in values)


def per_step(runs: list[list[dict]], fn) -> float:
    """Median over timed steps of `fn(record)` (seconds of a phase derived from the record)."""
    return median(fn(r) for run in runs for r in run[WARMUP_STEPS:])


def _ph(name: str):
    return lambda r: r["phases"].get(name, 0.0)


def _rest(r: dict, *names: str) -> float:
    return r["seconds"] - sum(r["phases"].get(n, 0.0) for n in names)


CASCADE_PHASES = ("generated", "scored", "trained", "published", "synced")
GRPO_ROWS = [  # (label, Cascade seconds of a step, TRL seconds of a step)
    ("generation (policy Generate / TRL `_generate`)", _ph("generated"), _ph("generate")),
    ("reward (reward service Score / in-process verifier)", _ph("scored"), _ph("reward")),
    ("TRL: tokenising, advantages (rest of `_generate_and_score_completions`)", lambda r: 0.0,
     lambda r: r["phases"].get("rollout_total", 0.0) - r["phases"].get("generate", 0.0) - r["phases"].get("reward", 0.0)),
    ("train step (TrainStep incl. batch build / forward+backward+AdamW)", _ph("trained"),
     lambda r: r["seconds"] - r["phases"].get("rollout_total", 0.0)),
    ("publish weights + policy load (Cascade only)", lambda r: _ph("published")(r) + _ph("synced")(r), lambda r: 0.0),
    ("Cascade: Celery hops, ledger, runner `advance`", lambda r: _rest(r, *CASCADE_PHASES), lambda r: 0.0),
]
MOPD_ROWS = [
    ("generation", _ph("generated"), _ph("generate")),
    ("teacher log-probs (teacher service ScoreTokens / teacher forward)", _ph("scored"), _ph("teacher")),
    ("train step (Cascade TrainStep / TRL student forward + loss + backward + step)", _ph("trained"),
     lambda r: _rest(r, "generate", "teacher")),
    ("publish weights + policy load (Cascade only)", lambda r: _ph("published")(r) + _ph("synced")(r), lambda r: 0.0),
    ("Cascade: Celery hops, ledger, runner `advance`", lambda r: _rest(r, *CASCADE_PHASES), lambda r: 0.0),
]


def steps(out: list[dict]) -> list[list[dict]]:
    return [o["steps"] if "steps" in o else o["records"] for o in out]


def summary(grpo: dict, mopd: dict, scores: dict) -> list[str]:
    """The table the README quotes."""
    g_c, g_t = step_seconds(steps(grpo["cascade"])), step_seconds(steps(grpo["trl"]))
    m_c, m_t = step_seconds(steps(mopd["cascade"])), step_seconds(steps(mopd["trl"]))
    tok_c, tok_t = tokens_per_second(steps(grpo["cascade"])), tokens_per_second(steps(grpo["trl"]))
    rows = [
        ["GRPO: wall time per step (s)", fmt(g_c), fmt(g_t), ratio(g_c, g_t), "≤ 1.0x", "yes" if g_c <= g_t else "no"],
        ["GRPO: generated tokens/s (whole step)", fmt(tok_c, 0), fmt(tok_t, 0), ratio(tok_c, tok_t), "", ""],
        ["GRPO: validation reward after the run", fmt(median(scores["grpo/cascade"])), fmt(median(scores["grpo/trl"])),
         "", "", ""],
        ["On-policy distillation: wall time per step (s), MOPD vs GKD λ=1", fmt(m_c), fmt(m_t), ratio(m_c, m_t), "", ""],
        ["On-policy distillation: validation reward after the run", fmt(median(scores["mopd/cascade"])),
         fmt(median(scores["mopd/trl"])), "", "", ""],
    ]
    for label, base, var in (("GRPO, Celery workers 1 → 2", grpo["cascade"], grpo["variant"]),
                             ("MOPD, teacher replicas 1 → 2", mopd["cascade"], mopd["variant"])):
        if var:
            a, b = 1 / step_seconds(steps(base[: len(var)])), 1 / step_seconds(steps(var))
            rows.append([f"Scaling: steps/s, {label}", f"{fmt(a, 3)} → {fmt(b, 3)}", "n/a (one process)",
                         ratio(b, a), "", ""])
    return table(["comparison", "Cascade", "TRL", "Cascade / TRL", "target", "met"], rows)


def breakdown(runs: dict, rows_spec, label_c: str, label_t: str) -> list[str]:
    c, t = steps(runs["cascade"]), steps(runs["trl"])
    rows = [[label, fmt(per_step(c, fc)), fmt(per_step(t, ft))] for label, fc, ft in rows_spec]
    rows.append(["**wall time per step**", f"**{fmt(step_seconds(c))}**", f"**{fmt(step_seconds(t))}**"])
    rows.append(["generated tokens/s", fmt(tokens_per_second(c), 0), fmt(tokens_per_second(t), 0)])
    rows.append(["training reward per step (median of runs)", curve(reward_curve(c)), curve(reward_curve(t))]
                if rows_spec is GRPO_ROWS else ["runs", str(len(c)), str(len(t))])
    if rows_spec is GRPO_ROWS:
        rows.append(["runs", str(len(c)), str(len(t))])
    return table(["seconds per step (median)", label_c, label_t], rows)


def write_report(args, models, grpo: dict, mopd: dict, scores: dict, seconds: float) -> str:
    """The whole results file (markdown)."""
    info = models.info
    shapes = (f"{args.prompts} prompts × G = {args.group} samples, at most {args.max_tokens} new tokens, "
              f"{args.steps} optimizer steps, lr {args.lr:g} (constant), temperature 1.0, non-thinking prompts")
    val = (f"greedy, {args.eval_prompts} validation prompts of `{args.domain}`; start model "
           f"{fmt(scores['start'])}, teacher {fmt(scores['teacher'])}")
    lines = [
        "# Cascade vs TRL on one machine", "",
        f"Machine: {machine()}.", "",
        f"Command: `.venv/bin/python bench/trl_compare.py` ({seconds / 60:.1f} min in all; "
        f"{'the SFT models were cached from an earlier run' if info.get('cached') else 'SFT of the models included'}, "
        f"building them took {info['seconds'] / 60:.1f} min). Load average at the end: {os.getloadavg()[0]:.1f} — a shared machine, so figures are "
        "medians of A/B-interleaved rounds, and every ratio below comes from runs of this one invocation.", "",
        f"Models: the `tiny` preset (Qwen3, 4 layers, hidden 192; seed {args.seed}). Student = the tiny model after "
        f"{info['key']['base_steps']} SFT steps on `{args.domain}`; teacher = the same SFT run at "
        f"{info['key']['teacher_steps']} steps. Both sides load the same folders and train in fp32 on CPU with one "
        "torch thread per process (each Cascade service runs with OMP_NUM_THREADS=1; TRL gets the same).", "",
        f"Shapes (both sides): {shapes}. Prompts: Cascade's deterministic batches of stage 0; TRL reads the same "
        "records in the same order (`shuffle_dataset=False`).", "",
        "## Summary", "", *summary(grpo, mopd, scores), "",
        f"Validation reward: {val}; the same in-process evaluator scores both sides' final weights.", "",
        "## GRPO", "",
        "Cascade: one `grpo` stage (β = 0, no dynamic filtering, overlong `none`) on the embedded stack. "
        "TRL: `GRPOTrainer` with `use_vllm=False`, `beta=0`, `loss_type=\"dapo\"` (token-level normalisation, as "
        "Cascade's loss), `scale_rewards=\"group\"`, `num_iterations=1`, `steps_per_generation=1` (strictly on-policy "
        "like Cascade), `bf16=False`, `gradient_checkpointing=False`, and the reward service's verifier called "
        "in-process as its reward function.", "",
        *breakdown(grpo, GRPO_ROWS, "Cascade", "TRL GRPOTrainer"), "",
        "## On-policy distillation", "",
        "Cascade: one `mopd` stage (teacher map to the teacher folder, ε = (0.5, 2.0)). TRL: "
        "`trl.experimental.gkd.GKDTrainer` with `lmbda=1.0` (every batch sampled from the student), `beta=1.0` "
        "(reverse KL, the divergence MOPD's sampled-token advantage estimates), temperature 1.0; each prompt "
        f"appears {args.group} times in a batch of {args.prompts * args.group} rows, as Cascade's G samples.", "",
        *breakdown(mopd, MOPD_ROWS, "Cascade MOPD", "TRL GKD (λ = 1)"), "",
        "## Scaling on one machine", "",
        *scaling(grpo, mopd), "",
        "## Notes", "",
        *gap_notes(grpo, mopd, args),
        "- Per-step time is the interval between consecutive steps' completion (Cascade: the ledger's `done` "
        "timestamps, so Celery hops and the runner's `advance` task count; TRL: `on_step_end` of its callback). "
        "The first step of each run (warm-up) is left out of timing medians, not of reward curves.",
        "- Cascade pays for its boundaries every step: the batch crosses gRPC three times, the trainer "
        "publishes versioned safetensors with a sha256 and the policy verifies and loads them, and each phase is "
        "a Celery task on the SQLite broker. TRL holds one model in one process and pays none of these.",
        "- Scaling: one run's step is a chain (generate → score → train → sync), so a second worker or teacher "
        "replica on the same 2 cores has no independent work to take within one run; the figure shows what "
        "the extra processes cost or save here, not what they give across nodes.",
    ]
    return "\n".join(lines) + "\n"


def scaling(grpo: dict, mopd: dict) -> list[str]:
    rows = []
    same_rounds = [(grpo["cascade"][: len(grpo["variant"])], grpo["variant"]),
                   (mopd["cascade"][: len(mopd["variant"])], mopd["variant"])]
    labels = (("GRPO, 1 Celery worker", "GRPO, 2 Celery workers"), ("MOPD, 1 teacher", "MOPD, 2 teacher replicas"))
    for (base, var), names in zip(same_rounds, labels):
        for label, runs in zip(names, (base, var)):
            if runs:
                s = step_seconds(steps(runs))
                rows.append([label, str(len(runs)), fmt(s), fmt(1 / s, 3)])
    return table(["configuration (the same rounds)", "runs", "s/step (median)", "steps/s"], rows)


def gap_notes(grpo: dict, mopd: dict, args) -> list[str]:
    """Where Cascade's extra time per step goes, from the medians above; how coarse the rewards are."""
    out = []
    for name, runs in (("GRPO", grpo), ("MOPD", mopd)):
        c, t = steps(runs["cascade"]), steps(runs["trl"])
        gap = step_seconds(c) - step_seconds(t)
        fixed = per_step(c, lambda r: _rest(r, *CASCADE_PHASES) + _ph("published")(r) + _ph("synced")(r))
        than = f"{fmt(gap)} s a step more than TRL" if gap > 0 else f"{fmt(-gap)} s a step less than TRL"
        out.append(f"- {name}: Cascade takes {than}; {fmt(fixed)} s of a step is what "
                   "only a distributed design pays (Celery hops, ledger writes, weight publish + checksummed load). "
                   "That cost is per step, not per token, so its share falls as models and batches grow (on this "
                   f"tiny model a whole Cascade step takes {fmt(step_seconds(c))} s).")
    out.append(f"- Rewards are coarse: {args.eval_prompts} validation prompts make one prompt worth "
               f"{1 / args.eval_prompts:.3f}, and {args.steps} steps of {args.prompts} × {args.group} samples move a "
               "tiny model little; the reward rows show both sides run the same algorithm on the same data, not "
               "which learns better.")
    return out
