"""MOPD vs GRPO at equal steps, from the same checkpoint after the stage that caused forgetting.

    .venv/bin/python bench/mopd_vs_grpo.py [--config configs/demo.yaml] [--steps 10]
        [--grpo-steps 40] [--from-run HOME RUN [--from-run HOME2 RUN2 ...] [--after STAGE]] [--domains if,...]
        [--lrs 1.5e-4,3e-4,6e-4] [--out FILE]

1. Runs the cascade's stages before its MOPD stage (SFT, IF-RL, multi-domain RL) on a local stack;
   the ledger's evals give each MOPD domain's best checkpoint (its teacher) and the final weights
   (the common starting point). `--from-run HOME RUN` takes both from a run of the whole cascade
   instead (e.g. a `cascade demo` run): its evaluations before the MOPD stage and the weights that
   stage started from. Repeat it for several seeds' runs. `--after STAGE` starts from the end of that
   stage instead (the one that made the model forget, e.g. `rlhf`), teachers from it and the stages
   before; `--domains` races only some of the MOPD stage's domains (e.g. the forgotten one).
2. From that checkpoint, two single-stage runs on fresh stacks, evaluated after every step:
   the MOPD stage (teachers = those best checkpoints) and a GRPO stage on the same domains, same
   batch, rollouts, sampling and learning rate, evaluated at the MOPD stage's claim precision
   (`fresh_samples` answers a prompt). `--grpo-steps` lets GRPO run longer than MOPD, so
   that its steps to the target are measured rather than bounded (the paper's GRPO ran 160 steps to
   MOPD's 52).
3. Reports, per domain and arm, the first step at which validation reward reaches 90 % of the
   teacher's score (the paper: MOPD recovers teacher level within ~30 steps where GRPO gains
   ~1 point in 25), and writes bench/results/mopd_vs_grpo.md: per run and domain, then the mean and
   range of each arm's steps and their ratio (the target: MOPD ≤ 1/3 of GRPO's steps).
4. `--lrs` sweeps the learning rate: both arms run at each rate, and each arm is then raced at its own
   best rate (the fewest steps until it stays at the target, mean over the runs; then to the target),
   since a method tuned against one left at a rate that suits the other proves little. The table
   shows every rate's means, and the race at the rates picked.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import yaml
from machine import cpu_name

from services.cli.runs import _ledger, start_stack, submit
from services.common.errors import InvalidArgument
from services.common.floatpath import FLOAT_PATHS, pin_float_path
from services.common.floatpath import describe as describe_path
from services.orchestrator.cascade_config import load_cascade
from services.orchestrator.ledger import Ledger
from services.orchestrator.selection import select_teachers

ROOT = Path(__file__).resolve().parents[1]
TARGET = 0.9


def run_cascade(home: Path, model: Path, cascade: dict) -> int:
    """Start a stack for `model`, run `cascade` to the end, stop the stack; return the run id."""
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
    if not (home / "ledger.sqlite").exists():
        return None
    os.environ["CASCADE_ORCH_HOME"] = str(home)
    done = [r.id for r in _ledger().runs() if r.status == "succeeded"]
    return done[-1] if done else None


def steps_to_target(evals, stage: int, domain: str, teacher: float) -> tuple[int | None, float]:
    """First step (1-based) whose eval reaches TARGET x teacher; and the final score."""
    rows = _curve(evals, stage, domain)
    for e in rows:
        if e.score >= TARGET * teacher:
            return e.step_index + 1, rows[-1].score
    return None, rows[-1].score if rows else float("nan")


def steps_to_hold(evals, stage: int, domain: str, teacher: float) -> int | None:
    """The step (1-based) from which every later eval stays at or above TARGET x teacher; None when the
    last one is below. Stricter than the first crossing, which one lucky evaluation can bring forward."""
    held = None
    for e in reversed(_curve(evals, stage, domain)):
        if e.score < TARGET * teacher:
            break
        held = e.step_index + 1
    return held


def _curve(evals, stage: int, domain: str) -> list:
    return sorted((e for e in evals if e.stage_index == stage and e.domain == domain), key=lambda e: e.step_index)


def describe_steps(n: int | None) -> str:
    """Steps to the target as the table shows them (0 = already there at the start)."""
    if n is None:
        return "not reached"
    return "0 (at start)" if n == 0 else str(n)


def start_point(ledger, run_id: int, stages: list[dict], after: str | None, mopd_index: int) -> tuple[Path, int]:
    """(the checkpoint both arms start from, the stage index teachers are chosen before) in a whole run:
    the weights the MOPD stage started from, teachers from the stages before it; or with `after`, the
    weights at the end of the stage named `after` (the forgetting stage), teachers from it and those before."""
    names = [st["name"] for st in stages]
    if after is not None and after not in names:
        raise SystemExit(f"--after: no stage named {after!r}; the recipe's stages are {names}")
    end_of = names.index(after) if after is not None else mopd_index - 1
    begun = {st.index: st for st in ledger.run(run_id).stages}
    versions = dict((v, u) for v, u, _s in ledger.weight_versions(run_id))
    if end_of + 1 in begun:
        version = begun[end_of + 1].start_weight_version
    elif end_of in begun and end_of == len(stages) - 1 and begun[end_of].status == "succeeded":
        version = max(versions)
    else:
        raise SystemExit(f"--from-run: run {run_id} did not finish stage {stages[end_of]['name']!r}")
    return Path(versions[version]), end_of + 1


def race(args, cfg: dict, mopd: dict, work: Path, start_ckpt: Path, picks: dict, lr: float | None = None
         ) -> dict[str, list]:
    """Both arms from `start_ckpt` on fresh stacks under `work`, at learning rate `lr` (None: the MOPD
    stage's): {arm: its evaluations}."""
    arms = race_arms(at_lr(mopd, lr), {d: p.checkpoint for d, p in picks.items()}, arm_steps(args),
                     args.eval_samples or race_samples(mopd))
    results = {}
    for name, stage in arms.items():
        if args.report_only:  # the arms' ledgers a previous call left
            results[name] = Ledger(f"sqlite:///{(work / name / 'ledger.sqlite').resolve()}").evals(1)
            continue
        shutil.rmtree(work / name, ignore_errors=True)  # a fresh stack home: no broker or teacher state left over
        run = run_cascade(work / name, start_ckpt, {**cfg, "name": name, "model": str(start_ckpt), "stages": [stage]})
        results[name] = _ledger().evals(run)
    return results


def race_arms(mopd: dict, teachers: dict[str, str], steps: dict[str, int], eval_samples: int) -> dict[str, dict]:
    """The two single-stage arms: {arm: stage}. Both take the MOPD stage's batch, rollouts, sampling,
    optimizer and prompt sharing, and are evaluated after every step at `eval_samples` answers a prompt.
    The MOPD arm is the paper's: the teacher's advantage on the sampled token alone. A `grpo_alpha` of
    the cascade's stage (MiMo's outcome term: the GRPO advantage added to it) is left out, since that
    term is the other arm: with it the race would set GRPO against GRPO plus a teacher."""
    domains = sorted(teachers)
    eval_cfg = {**mopd["eval"], "domains": domains, "samples_per_prompt": eval_samples}
    common = {k: mopd[k] for k in ("batch_size", "rollouts_per_prompt", "sampling", "optimizer", "share_prompts")}
    common.update(domains=domains, eval=eval_cfg, eval_every=1)
    return {
        "mopd": {**common, "name": "mopd", "type": "mopd", "steps": steps["mopd"], "teachers": dict(teachers),
                 "eps_low": mopd["eps_low"], "eps_high": mopd["eps_high"],
                 "remeasure_teachers": False},  # both arms are judged against the same chosen scores
        "grpo": {**common, "name": "grpo", "type": "grpo", "steps": steps["grpo"],
                 "rollouts_per_prompt": max(2, mopd["rollouts_per_prompt"]), "dynamic_filtering": True},
    }


def at_lr(stage: dict, lr: float | None) -> dict:
    """`stage` with its optimizer's peak learning rate set to `lr` (None: unchanged); its schedule stays."""
    return stage if lr is None else {**stage, "optimizer": {**stage["optimizer"], "lr": lr}}


def parse_lrs(text: str | None) -> list[float | None]:
    """`--lrs 1.5e-4,3e-4`: the rates to sweep, in order; none given: [None] (the stage's own rate)."""
    if not text:
        return [None]
    try:
        lrs = [float(x) for x in text.split(",")]
    except ValueError:
        raise ValueError(f"--lrs: {text!r} is not a comma-separated list of numbers (e.g. 1.5e-4,3e-4,6e-4)") from None
    if any(not lr > 0 for lr in lrs) or len(set(lrs)) != len(lrs):
        raise ValueError(f"--lrs: {text!r}: give distinct rates above zero")
    return lrs


def lr_home(work: Path, lr: float | None) -> Path:
    """Where one rate's arms live: `work` itself without a sweep (the layout before it), else work/lr-<rate>."""
    return work if lr is None else work / f"lr-{lr:g}"


def best_lr(outcomes: dict, arm: str) -> float | None:
    """The rate at which `arm` did best: {rate: {arm: [(steps until it stays, steps to the target), ...
    per run, counted]}} -> the rate with the fewest mean steps until it stays, ties by steps to the
    target, then the rate listed first."""
    return min(outcomes, key=lambda lr: _means(outcomes[lr][arm]))


def _means(runs: list[tuple[int, int]]) -> tuple[float, float]:
    """(mean steps until it stays, mean steps to the target) over the runs' counted pairs."""
    return sum(h for h, _ in runs) / len(runs), sum(t for _, t in runs) / len(runs)


def race_samples(mopd: dict) -> int:
    """Answers a prompt at each of the race's evaluations: as many as the MOPD stage's recovery claim draws
    (`fresh_samples`, else its eval.samples_per_prompt); a first crossing of 90 % on a noisier curve
    comes early by chance, for either arm."""
    return mopd.get("fresh_samples") or mopd["eval"]["samples_per_prompt"]


def arm_steps(args) -> dict[str, int]:
    """Each arm's number of steps: MOPD `--steps`, GRPO `--grpo-steps` (default: the same)."""
    return {"mopd": args.steps, "grpo": args.grpo_steps or args.steps}


def counted(n: int | None, steps: int) -> int:
    """Steps to the target for averaging: a target not reached counts as steps + 1 (a lower bound)."""
    return steps + 1 if n is None else n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "demo.yaml")
    ap.add_argument("--steps", type=int, default=10, help="MOPD's steps (and GRPO's, without --grpo-steps).")
    ap.add_argument("--grpo-steps", type=int, help="GRPO's steps, when it should run longer than MOPD.")
    ap.add_argument("--eval-samples", type=int, help="Answers a prompt at each evaluation (default: the MOPD stage's "
                                                     "fresh_samples, the precision of its claim).")
    ap.add_argument("--home", type=Path, default=ROOT / "bench" / ".work" / "mopd_vs_grpo")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "mopd_vs_grpo.md")
    ap.add_argument("--reuse-prefix", action="store_true", help="Start from the prefix run a previous call left.")
    ap.add_argument("--report-only", action="store_true", help="Rewrite the table from the arms a previous call ran.")
    ap.add_argument("--from-run", nargs=2, metavar=("HOME", "RUN"), action="append",
                    help="Teachers and start checkpoint from run RUN of the stack home HOME (a whole-cascade run); "
                         "repeat it for several seeds' runs.")
    ap.add_argument("--after", help="With --from-run: start from the end of this stage (the one that made the model "
                                    "forget) instead of the MOPD stage's start.")
    ap.add_argument("--domains", help="Race these of the MOPD stage's domains (comma-separated; default all).")
    ap.add_argument("--lrs", help="Learning rates to sweep (comma-separated): both arms run at each, and each is "
                                  "raced at its own best; default: the MOPD stage's rate only.")
    ap.add_argument("--float-path", default="avx2", choices=list(FLOAT_PATHS),
                    help="CPU kernels of the arms (services/common/floatpath.py); avx2, as `cascade demo` (runs "
                         "given by --from-run should have been drawn on it).")
    args = ap.parse_args()
    try:  # before anything computes; the stacks inherit it
        pin_float_path(args.float_path, field="--float-path")
    except InvalidArgument as exc:
        ap.error(str(exc))
    for flag, value in (("--steps", args.steps), ("--grpo-steps", args.grpo_steps), ("--eval-samples", args.eval_samples)):
        if value is not None and value < 1:
            ap.error(f"{flag}: {value}; give at least 1")
    if args.after and not args.from_run:
        ap.error("--after needs --from-run (a whole-cascade run that went past that stage)")
    try:
        lrs = parse_lrs(args.lrs)
    except ValueError as exc:
        ap.error(str(exc))
    cfg = load_cascade(args.config).model_dump(mode="json")
    mopd_index = next(i for i, s in enumerate(cfg["stages"]) if s["type"] == "mopd")
    mopd = cfg["stages"][mopd_index]
    domains = args.domains.split(",") if args.domains else mopd["domains"]
    unknown = [d for d in domains if d not in mopd["domains"]]
    if unknown:
        ap.error(f"--domains: {unknown} are not domains of the MOPD stage ({mopd['domains']})")
    started = time.monotonic()
    seeds = []  # per seed: (label, teacher picks, start scores, {rate: {arm: evals}})
    sources = args.from_run or [None]
    for i, source in enumerate(sources):
        work = args.home / f"from-{i}" if args.from_run else args.home
        if source is not None:
            os.environ["CASCADE_ORCH_HOME"] = str(Path(source[0]).resolve())
            prefix_run = int(source[1])
            ledger = _ledger()
            start_ckpt, before = start_point(ledger, prefix_run, cfg["stages"], args.after, mopd_index)
            label = f"{Path(source[0]).name} run {prefix_run}"
            # the run's own seed: its data, validation prompts and evaluation draws (a seed's demo is
            # judged on that seed's prompts, as its teachers were)
            run_cfg = {**cfg, "seed": ledger.run(prefix_run).config.get("seed", cfg["seed"])}
        else:
            model = (ROOT / cfg["model"]).resolve() if not Path(cfg["model"]).is_absolute() else Path(cfg["model"])
            if not (model / "config.json").exists():
                from services.common.tinymodel import init_model

                init_model(model, preset="tiny", seed=cfg["seed"])
            prefix = {**cfg, "name": "prefix", "model": str(model), "stages": cfg["stages"][:mopd_index]}
            prefix_home = args.home / "prefix"
            prefix_run = previous_prefix(prefix_home) if args.reuse_prefix else None
            if prefix_run is None:
                prefix_run = run_cascade(prefix_home, model, prefix)
            ledger = _ledger()
            start_ckpt, before = Path(max(ledger.weight_versions(prefix_run))[1]), mopd_index
            label = f"seed {cfg['seed']}"
            run_cfg = cfg
        picks = select_teachers(ledger, prefix_run, domains, before_stage=before)
        start_scores = {e.domain: e.score for e in ledger.evals(prefix_run, before_stage=before)
                        if e.stage_index == before - 1}
        print(f"{label}: racing from {start_ckpt}", flush=True)
        seeds.append((label, picks, start_scores,
                      {lr: race(args, run_cfg, mopd, lr_home(work, lr), start_ckpt, picks, lr) for lr in lrs}))

    took = (f"total {time.monotonic() - started:.0f} s." if not args.report_only
            else "table rewritten (--report-only) from the arms' ledgers of the previous call.")
    limits = arm_steps(args)
    where = f"the end of stage `{args.after}`" if args.after else "the MOPD stage's start"
    lines = ["# MOPD vs GRPO from the checkpoint after the forgetting stage", "",
             f"Machine: {cpu_name()}, {os.cpu_count()} cores; "
             f"tiny model; cascade {args.config.name}; from {where}; MOPD {limits['mopd']} steps, GRPO "
             f"{limits['grpo']}, eval (avg@{args.eval_samples or race_samples(mopd)}) after every step; {took}", "",
             f"Float path: {describe_path(args.float_path)}.", "",
             "MOPD arm: the teacher's advantage on the sampled token alone (the paper's)"
             + (f"; the cascade's MOPD stage adds MiMo's outcome term (grpo_alpha {mopd['grpo_alpha']}), "
                "left out here since that term is the GRPO arm." if mopd.get("grpo_alpha") else "."), "",
             f"Target: {TARGET:.0%} of the teacher's validation reward (teacher = best evaluated checkpoint "
             "of the stages up to the start point).", "",
             "| run | domain | teacher | start | MOPD: steps to target | MOPD: stays from | MOPD final (of teacher) "
             "| GRPO: steps to target | GRPO: stays from | GRPO final (of teacher) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    outcomes = {lr: {arm: [(counted(steps_to_hold(results[lr][arm], 0, d, p.score), limits[arm]),
                            counted(steps_to_target(results[lr][arm], 0, d, p.score)[0], limits[arm]))
                           for _l, picks, _s, results in seeds for d, p in sorted(picks.items())]
                     for arm in ("mopd", "grpo")} for lr in lrs}
    chosen = {arm: best_lr(outcomes, arm) for arm in ("mopd", "grpo")}
    if len(lrs) > 1:
        lines[-2:-2] = [f"Learning rate: swept over {', '.join(f'{lr:g}' for lr in lrs)}; each arm raced at its own "
                        f"best (MOPD {chosen['mopd']:g}, GRPO {chosen['grpo']:g}); every rate's means below the table.", ""]
    # each arm at its picked rate, per run and domain in the table's order (counted)
    held_of = {arm: [h for h, _ in outcomes[chosen[arm]][arm]] for arm in ("mopd", "grpo")}
    steps_of = {arm: [t for _, t in outcomes[chosen[arm]][arm]] for arm in ("mopd", "grpo")}
    for label, picks, start_scores, results in seeds:
        for d, p in sorted(picks.items()):
            cells = []
            for arm in ("mopd", "grpo"):
                evals = results[chosen[arm]][arm]
                n, final = steps_to_target(evals, 0, d, p.score)
                held = steps_to_hold(evals, 0, d, p.score)
                fraction = final / p.score if p.score > 0 else 1.0
                cells.append(f"{describe_steps(n)} | {describe_steps(held)} | {final:.2f} ({fraction:.0%})")
            lines.append(f"| {label} | {d} | {p.score:.2f} | {start_scores.get(d, float('nan')):.2f} | "
                         f"{' | '.join(cells)} |")
    lines += ["", summary(steps_of, limits), "", summary(held_of, limits, "Steps until it stays at the target"),
              "", per_run_ratios([label for label, picks, _, _ in seeds for _ in picks], steps_of, held_of)]
    if len(lrs) > 1:
        lines += ["", sweep_table(outcomes, chosen)]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def summary(steps_of: dict[str, list[int]], limits: dict[str, int], what: str = "Steps to the target") -> str:
    """Mean and range of the steps each arm took to the target (not reached within the arm's `limits[arm]`
    steps counts as limits[arm] + 1), and the ratio of the means, MOPD / GRPO."""
    def stat(xs: list[int]) -> str:
        return f"mean {sum(xs) / len(xs):.1f}, range {min(xs)}-{max(xs)}" if xs else "none"

    m, g = steps_of["mopd"], steps_of["grpo"]
    ratio = (sum(m) / sum(g)) if m and sum(g) else float("nan")
    bounds = "; ".join(f"{arm.upper()} within {n} counts as {n + 1}" for arm, n in limits.items())
    return (f"{what} over every run and domain (not reached: {bounds}, a lower bound): "
            f"MOPD {stat(m)}; GRPO {stat(g)}; MOPD / GRPO {ratio:.2f} (target ≤ 0.33).")


def sweep_table(outcomes: dict, chosen: dict) -> str:
    """Each swept rate's mean steps per arm (to the target, until it stays; counted), the picked ones marked."""
    rows = ["| learning rate | MOPD: steps to target | MOPD: stays from | GRPO: steps to target | GRPO: stays from |",
            "|---|---|---|---|---|"]
    for lr, arms in outcomes.items():
        cells = []
        for arm in ("mopd", "grpo"):
            held, to_target = _means(arms[arm])
            cells += [f"{to_target:.1f}", f"{held:.1f}" + (" (picked)" if chosen[arm] == lr else "")]
        rows.append(f"| {lr:g} | {' | '.join(cells)} |")
    return "Every swept rate, mean over the runs (not reached counts as the arm's steps + 1):\n\n" + "\n".join(rows)


def per_run_ratios(labels: list[str], steps_of: dict[str, list[int]], held_of: dict[str, list[int]]) -> str:
    """MOPD / GRPO for each run and domain, by the first crossing and by staying at the target: the race is
    won with margin when every one of them is at most 1/3, not only their mean."""
    def ratio(m: int, g: int) -> str:
        return f"{m / g:.2f}" if g else "n/a"

    cells = [f"{label}: {ratio(m, g)} / {ratio(hm, hg)}" for label, m, g, hm, hg in
             zip(labels, steps_of["mopd"], steps_of["grpo"], held_of["mopd"], held_of["grpo"])]
    worst = max((m / g for m, g in zip(steps_of["mopd"], steps_of["grpo"]) if g), default=float("nan"))
    worst_held = max((m / g for m, g in zip(held_of["mopd"], held_of["grpo"]) if g), default=float("nan"))
    return (f"MOPD / GRPO per run (to the target / until it stays there): {'; '.join(cells)}. "
            f"Largest: {worst:.2f} / {worst_held:.2f} (target ≤ 0.33 in every run).")


if __name__ == "__main__":
    main()
