"""The demo's claims in several seeds (issue #24: "in three of three seeds, on this machine").

    .venv/bin/python bench/demo_seeds.py [--seeds 0,1,2] [--config configs/demo.yaml]
        [--out bench/results/demo_seeds.md] [--work .cascade/bench-demo-seeds] [--reuse]

Per seed s, the recipe with `seed: s` (the tiny model's initialisation and tokenizer, the synthetic
data and every stage's sampling follow it) runs as a user runs it: `cascade demo --home H` from a
fresh home H, the tiny model built inside H. Then the run's claims are read from H's ledger exactly
as `cascade report` computes them (services.orchestrator.report.run_claims): each claim's verdict
and every figure it rests on, with its paired 95 % interval over the validation prompts. Also per
seed: every domain's validation reward after SFT (the curriculum's "learnable, not saturated"
band, 0.2 - 0.7) and the wall time of the run.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from demo_bench import own_model  # noqa: E402
from machine import cpu_name  # noqa: E402

from services.common.floatpath import FLOAT_PATHS, describe  # noqa: E402
from services.orchestrator.cascade_config import load_cascade  # noqa: E402
from services.orchestrator.ledger import ledger_at  # noqa: E402
from services.orchestrator.report import run_claims  # noqa: E402

BAND = (0.2, 0.7)
"""After SFT every RL domain should sit inside this band: learnable, not saturated."""


def run_seed(config: Path, seed: int, work: Path, reuse: bool = False, float_path: str = "avx2") -> dict:
    """One `cascade demo` from a fresh home on `float_path`; its claims and its SFT scores. With
    `reuse`, a home whose last run succeeded with this very recipe, seed and float path is read
    instead of run again."""
    home = work / f"seed{seed}"
    kept = reusable(home, config, seed, float_path) if reuse else None
    if kept is None:
        shutil.rmtree(home, ignore_errors=True)
        cfg = own_model(config, home, seed)  # the recipe with this seed, its model built inside the home
        env = {**os.environ, "CASCADE_HOME": str(home), "CASCADE_ORCH_HOME": str(home)}
        started = time.time()
        proc = subprocess.run([str(ROOT / ".venv/bin/cascade"), "demo", "--config", str(cfg), "--home", str(home),
                               "--float-path", float_path], cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.time() - started
        if proc.returncode:
            raise SystemExit(f"seed {seed}: demo failed (exit {proc.returncode}); its log: {home}/logs/demo.log\n"
                             f"{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        (home / WALL_FILE).write_text(f"{wall:.1f}\n")
        (home / FLOAT_PATH_FILE).write_text(f"{float_path}\n")
    ledger = ledger_at(f"sqlite:///{home / 'ledger.sqlite'}")
    run_id = max(r.id for r in ledger.runs())
    run = ledger.run(run_id)
    if kept is not None:  # the demo's wall time when this bench ran it, else the run's own time from the ledger
        wall_file = home / WALL_FILE
        wall = float(wall_file.read_text()) if wall_file.exists() else (run.updated_at - run.created_at).total_seconds()
    claims = run_claims(ledger, run_id)
    return {"seed": seed, "home": str(home), "wall": wall, "claims": claims, "reused": kept is not None,
            "after_sft": after_first_stage(ledger.evals(run_id), run.config["stages"])}


WALL_FILE = "demo_wall_s.txt"
"""Written in a seed's home after its demo: the seconds `cascade demo` took, read back by --reuse."""
FLOAT_PATH_FILE = "demo_float_path.txt"
"""Written beside it: the demo's float path; --reuse reads a home only on the path asked for."""


def reusable(home: Path, config: Path, seed: int, float_path: str = "avx2") -> int | None:
    """The id of the last run in `home` when it succeeded with `config`'s stages and `seed` on
    `float_path`, else None."""
    path_file = home / FLOAT_PATH_FILE
    if not (home / "ledger.sqlite").exists() or not path_file.exists() or path_file.read_text().strip() != float_path:
        return None
    ledger = ledger_at(f"sqlite:///{home / 'ledger.sqlite'}")
    runs = ledger.runs()
    if not runs:
        return None
    run = ledger.run(max(r.id for r in runs))
    want = load_cascade(config).model_dump(mode="json")["stages"]
    same = run.status == "succeeded" and run.config.get("seed") == seed and run.config.get("stages") == want
    return run.id if same else None


def after_first_stage(evals, stages) -> dict[str, float]:
    """Each domain's last evaluation in the first stage (SFT), when the first stage is SFT."""
    if not stages or stages[0]["type"] != "sft":
        return {}
    last: dict[str, tuple[int, float]] = {}
    for e in evals:
        if e.stage_index == 0 and (e.domain not in last or e.step_index >= last[e.domain][0]):
            last[e.domain] = (e.step_index, e.score)
    return {d: s for d, (_, s) in sorted(last.items())}


def figure_text(f) -> str:
    """`+0.07 [+0.02, +0.12] holds` (a fraction as a percentage)."""
    if f.kind == "fraction":
        core = f"{f.estimate:.0%}" + (f" [{f.low:.0%}, {f.high:.0%}]" if f.low is not None else "")
    else:
        core = f"{f.estimate:+.2f}" + (f" [{f.low:+.2f}, {f.high:+.2f}]" if f.low is not None else "")
    return f"{core} {f.verdict}"


def render(runs: list[dict], args, minutes: float) -> str:
    seeds = [r["seed"] for r in runs]
    head = "| claim | " + " | ".join(f"seed {s}" for s in seeds) + " | holds in |"
    rule = "|---|" + "---|" * len(seeds) + "---:|"
    names = [c.claim for c in runs[0]["claims"]]
    path = getattr(args, "float_path", "avx2")
    lines = ["# The demo's claims in several seeds", "",
             f"Machine: {cpu_name()}, {os.cpu_count()} cores, Linux {platform.release()}, "
             f"Python {platform.python_version()}. Load average at the end: {os.getloadavg()[0]:.1f}.", "",
             f"Command: `.venv/bin/python bench/demo_seeds.py --seeds {','.join(map(str, seeds))} --config "
             f"{args.config} --float-path {path}{' --reuse' if getattr(args, 'reuse', False) else ''}` "
             f"({minutes:.1f} min in all). Each seed is one `cascade demo` from a fresh home "
             "(model, tokenizer and data built from the seed); the verdicts are `cascade report`'s.", "",
             f"Float path: {describe(path)} (services/common/floatpath.py).", "",
             head, rule]
    for i, name in enumerate(names):
        verdicts = [r["claims"][i].verdict if i < len(r["claims"]) else "-" for r in runs]
        lines.append(f"| {name} | " + " | ".join(verdicts) + f" | {verdicts.count('holds')} of {len(runs)} |")
    lines += ["", "Every figure behind the claims (paired estimate, 95 % interval over the validation prompts, "
              "its verdict):", "", "| claim | figure | " + " | ".join(f"seed {s}" for s in seeds) + " |",
              "|---|---|" + "---|" * len(seeds)]
    for i, name in enumerate(names):
        subjects = list(dict.fromkeys(f.subject for r in runs if i < len(r["claims"]) for f in r["claims"][i].figures))
        for subject in subjects:
            cells = []
            for r in runs:
                got = [f for f in (r["claims"][i].figures if i < len(r["claims"]) else ()) if f.subject == subject]
                cells.append(figure_text(got[0]) if got else "-")
            lines.append(f"| {name.split(' (')[0][:40]} | {subject} | " + " | ".join(cells) + " |")
    domains = list(dict.fromkeys(d for r in runs for d in r["after_sft"]))
    if domains:
        lines += ["", f"Validation reward after SFT (the curriculum's band: {BAND[0]} - {BAND[1]}):", "",
                  "| domain | " + " | ".join(f"seed {s}" for s in seeds) + " |", "|---|" + "---:|" * len(seeds)]
        for d in domains:
            cells = [f"{r['after_sft'][d]:.2f}" if d in r["after_sft"] else "-" for r in runs]
            lines.append(f"| {d} | " + " | ".join(cells) + " |")
    lines += ["", "Wall time per seed: " + ", ".join(
        f"seed {r['seed']} {r['wall']:.0f} s" + (" (a run kept from an earlier call, --reuse)" if r.get("reused") else "")
        for r in runs) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--config", type=Path, default=Path("configs/demo.yaml"))
    ap.add_argument("--work", type=Path, default=ROOT / ".cascade" / "bench-demo-seeds")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/demo_seeds.md")
    ap.add_argument("--reuse", action="store_true",
                    help="Read a seed's home instead of running it again when its last run succeeded with this "
                         "recipe and seed (e.g. after an interrupted call).")
    ap.add_argument("--float-path", default="avx2", choices=list(FLOAT_PATHS),
                    help="CPU kernels of the demos (services/common/floatpath.py); avx2, as `cascade demo`.")
    args = ap.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        ap.error(f"--seeds: comma-separated integers, got {args.seeds!r}")
    if not args.config.is_file():
        ap.error(f"--config: {args.config} is not a file")
    t0, runs = time.time(), []
    for seed in seeds:
        print(f"seed {seed}: cascade demo ...", flush=True)
        runs.append(run_seed(args.config.resolve(), seed, args.work.resolve(), args.reuse, args.float_path))
        r = runs[-1]
        print(f"  {r['wall']:.0f} s; " + "; ".join(f"{c.verdict}: {c.claim.split(' (')[0]}" for c in r["claims"]),
              flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(runs, args, (time.time() - t0) / 60))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
