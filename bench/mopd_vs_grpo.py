"""MOPD vs GRPO at equal steps, from the same checkpoint after the stage that caused forgetting.

    .venv/bin/python bench/mopd_vs_grpo.py [--config configs/demo.yaml] [--steps 10]

1. Runs the cascade's stages before its MOPD stage (SFT, IF-RL, multi-domain RL) on a local stack;
   the ledger's evals give each MOPD domain's best checkpoint (its teacher) and the final weights
   (the common starting point). `--from-run HOME RUN` takes both from a run of the whole cascade
   instead (e.g. a `cascade demo` run): its evaluations before the MOPD stage and the weights that
   stage started from.
2. From that checkpoint, two single-stage runs on fresh stacks, evaluated after every step:
   the MOPD stage (teachers = those best checkpoints) and a GRPO stage on the same domains, same
   batch, rollouts, sampling and learning rate.
3. Reports, per domain and arm, the first step at which validation reward reaches 90 % of the
   teacher's score (the paper: MOPD recovers teacher level within ~30 steps where GRPO gains
   ~1 point in 25), and writes bench/results/mopd_vs_grpo.md.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import time
from pathlib import Path

import yaml

from services.cli.runs import _ledger, start_stack, submit
from services.orchestrator.cascade_config import load_cascade
from services.orchestrator.ledger import Ledger
from services.orchestrator.selection import select_teachers

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.9


def run_cascade(home: Path, model: Path, cascade: dict) -> int:
    """Start a stack for `model`, run `cascade` to the end, stop the stack; return the run id."""
    import os

    os.environ["CASCADE_ORCH_HOME"] = str(home)
    for key in [k for k in os.environ if k.startswith("CASCADE_ORCH_") and k != "CASCADE_ORCH_HOME"]:
        del os.environ[key]
    path = home / "cascade.yaml"
    home.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cascade, sort_keys=False))
    sup, _ = start_stack(home, model)
    try:
        run_id = submit(path, home)
        ledger = _ledger()
        while ledger.run(run_id).status not in ("succeeded", "failed", "cancelled"):
            time.sleep(1)
        run = ledger.run(run_id)
        if run.status != "succeeded":
            raise RuntimeError(f"{cascade['name']}: run {run_id} {run.status}: {run.error}")
        return run_id
    finally:
        sup.stop()


def previous_prefix(home: Path) -> int | None:
    """The succeeded prefix run a previous call left under `home`, if any."""
    import os

    if not (home / "ledger.sqlite").exists():
        return None
    os.environ["CASCADE_ORCH_HOME"] = str(home)
    done = [r.id for r in _ledger().runs() if r.status == "succeeded"]
    return done[-1] if done else None


def steps_to_target(evals, stage: int, domain: str, teacher: float) -> tuple[int | None, float]:
    """First step (1-based) whose eval reaches TARGET x teacher; and the final score."""
    rows = sorted((e for e in evals if e.stage_index == stage and e.domain == domain), key=lambda e: e.step_index)
    for e in rows:
        if e.score >= TARGET * teacher:
            return e.step_index + 1, rows[-1].score
    return None, rows[-1].score if rows else float("nan")


def describe_steps(n: int | None) -> str:
    """Steps to the target as the table shows them (0 = already there at the start)."""
    if n is None:
        return "not reached"
    return "0 (at start)" if n == 0 else str(n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "demo.yaml")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--home", type=Path, default=ROOT / "bench" / ".work" / "mopd_vs_grpo")
    ap.add_argument("--reuse-prefix", action="store_true", help="Start from the prefix run a previous call left.")
    ap.add_argument("--report-only", action="store_true", help="Rewrite the table from the arms a previous call ran.")
    ap.add_argument("--from-run", nargs=2, metavar=("HOME", "RUN"),
                    help="Teachers and start checkpoint from run RUN of the stack home HOME (a whole-cascade run).")
    args = ap.parse_args()
    cfg = load_cascade(args.config).model_dump(mode="json")
    mopd_index = next(i for i, s in enumerate(cfg["stages"]) if s["type"] == "mopd")
    mopd = cfg["stages"][mopd_index]
    model = (ROOT / cfg["model"]).resolve() if not Path(cfg["model"]).is_absolute() else Path(cfg["model"])
    if not (model / "config.json").exists():
        from services.common.tinymodel import init_model

        init_model(model, preset="tiny", seed=cfg["seed"])
    started = time.monotonic()

    if args.from_run:
        import os

        os.environ["CASCADE_ORCH_HOME"] = str(Path(args.from_run[0]).resolve())
        prefix_run = int(args.from_run[1])
        ledger = _ledger()
        begun = {st.index: st for st in ledger.run(prefix_run).stages}
        if mopd_index not in begun:
            raise SystemExit(f"--from-run: run {prefix_run} never started its MOPD stage (stage {mopd_index})")
        version = begun[mopd_index].start_weight_version
        start_ckpt = Path(next(u for v, u, _s in ledger.weight_versions(prefix_run) if v == version))
    else:
        prefix = {**cfg, "name": "prefix", "model": str(model), "stages": cfg["stages"][:mopd_index]}
        prefix_home = args.home / "prefix"
        prefix_run = previous_prefix(prefix_home) if args.reuse_prefix else None
        if prefix_run is None:
            prefix_run = run_cascade(prefix_home, model, prefix)
        ledger = _ledger()
        start_ckpt = Path(max(ledger.weight_versions(prefix_run))[1])
    picks = select_teachers(ledger, prefix_run, mopd["domains"], before_stage=mopd_index)
    start_scores = {e.domain: e.score for e in ledger.evals(prefix_run, before_stage=mopd_index)
                    if e.stage_index == mopd_index - 1}

    common = {k: mopd[k] for k in ("domains", "batch_size", "rollouts_per_prompt", "sampling", "optimizer", "eval")}
    common.update(steps=args.steps, eval_every=1)
    arms = {
        "mopd": {**common, "name": "mopd", "type": "mopd", "teachers": {d: p.checkpoint for d, p in picks.items()},
                 "eps_low": mopd["eps_low"], "eps_high": mopd["eps_high"],
                 "remeasure_teachers": False},  # both arms are judged against the same chosen scores
        "grpo": {**common, "name": "grpo", "type": "grpo", "rollouts_per_prompt": max(2, mopd["rollouts_per_prompt"]),
                 "dynamic_filtering": True},
    }
    results = {}
    for name, stage in arms.items():
        if args.report_only:  # the arms' ledgers a previous call left
            results[name] = Ledger(f"sqlite:///{(args.home / name / 'ledger.sqlite').resolve()}").evals(1)
            continue
        shutil.rmtree(args.home / name, ignore_errors=True)  # a fresh stack home: no broker or teacher state left over
        run = run_cascade(args.home / name, start_ckpt, {**cfg, "name": name, "model": str(start_ckpt), "stages": [stage]})
        results[name] = _ledger().evals(run)

    took = (f"total {time.monotonic() - started:.0f} s." if not args.report_only
            else "table rewritten (--report-only) from the arms' ledgers of the previous call.")
    lines = ["# MOPD vs GRPO from the checkpoint after the forgetting stage", "",
             f"Machine: {platform.processor() or platform.machine()}, {__import__('os').cpu_count()} cores; "
             f"tiny model; cascade {args.config.name}; {args.steps} steps per arm, eval after every step; {took}", "",
             f"Target: {TARGET:.0%} of the teacher's validation reward (teacher = best evaluated checkpoint "
             "of the stages before MOPD).", "",
             "| domain | teacher | start | MOPD: steps to target | MOPD final (of teacher) "
             "| GRPO: steps to target | GRPO final (of teacher) |",
             "|---|---|---|---|---|---|---|"]
    fractions: dict[str, list[float]] = {"mopd": [], "grpo": []}
    for d, p in sorted(picks.items()):
        cells = []
        for arm in ("mopd", "grpo"):
            n, final = steps_to_target(results[arm], 0, d, p.score)
            fraction = final / p.score if p.score > 0 else 1.0
            fractions[arm].append(fraction)
            cells.append(f"{describe_steps(n)} | {final:.2f} ({fraction:.0%})")
        lines.append(f"| {d} | {p.score:.2f} | {start_scores.get(d, float('nan')):.2f} | {' | '.join(cells)} |")
    mean = {arm: sum(f) / max(len(f), 1) for arm, f in fractions.items()}
    lines += ["", f"Mean final reward as a fraction of the teacher's: MOPD {mean['mopd']:.0%}, GRPO {mean['grpo']:.0%}. "
              "A domain already at 90 % when the arm starts counts 0 steps: how much there is to recover depends on "
              "how much the stage before MOPD made the model forget."]
    out = ROOT / "bench" / "results" / "mopd_vs_grpo.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
