"""Where an env stage's validation gain comes from: how often the episodes call a tool, and how often each
path is solved, at the stage's start and end evaluations (issue #22, configs/agentic.yaml).

    .venv/bin/python bench/agentic_paths.py --home .cascade --run 1 [--stage 1]

Reads the evaluation episodes a run recorded (`<home>/runs/<run>/steps`, the artefact
`evals/stage-<s>-step-<k>-episodes` that services/orchestrator/env_evals.py writes: per episode its task,
reward and turns) and prints, per evaluation, the mean reward, the share of episodes that called a tool
(more than one assistant turn: a python episode that answers at once ends after one) and the reward of
each path. The two evaluations play the same tasks with the same random numbers, so the rows compare
like with like. Nothing is run; the figures are the run's own.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.orchestrator.artifacts import ArtifactStore  # noqa: E402

KEY = re.compile(r"^evals_stage-(\d+)-step-(-?\d+)-episodes$")


def evaluations(steps: Path, stage: int) -> list[tuple[int, str]]:
    """(step, artefact key) of every episode evaluation of `stage`, start (step -1) first."""
    found = []
    for folder in steps.iterdir():
        m = KEY.match(folder.name)
        if m and int(m.group(1)) == stage:
            found.append((int(m.group(2)), f"evals/stage-{stage}-step-{m.group(2)}-episodes"))
    return sorted(found)


def paths(samples: dict) -> dict:
    """Reward, tool share and the reward of each path of one evaluation's episodes."""
    turns, rewards = np.asarray(samples["turns"]), np.asarray(samples["rewards"], dtype=float)
    tool = turns >= 2

    def mean(mask):
        return float(rewards[mask].mean()) if mask.any() else float("nan")

    return {"episodes": len(turns), "reward": float(rewards.mean()), "tool_share": float(tool.mean()),
            "solved_tool": mean(tool), "solved_direct": mean(~tool)}


def fmt(x: float) -> str:
    """Two decimals; `-` for a path no episode took."""
    return "-" if np.isnan(x) else f"{x:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=Path(".cascade"), help="the run's home")
    parser.add_argument("--run", type=int, required=True, help="run id")
    parser.add_argument("--stage", type=int, default=1, help="index of the env stage (0 = the first stage)")
    args = parser.parse_args(argv)
    steps = args.home / "runs" / str(args.run) / "steps"
    if not steps.is_dir():
        parser.error(f"--home/--run: no recorded steps in {steps}")
    found = evaluations(steps, args.stage)
    if not found:
        parser.error(f"--stage: stage {args.stage} of run {args.run} recorded no episode evaluation")
    store = ArtifactStore(steps)
    print("| evaluation | episodes | reward | called the tool | solved, with the tool | solved, without |")
    print("|---|---:|---:|---:|---:|---:|")
    for step, key in found:
        p = paths(store.get(key, "samples"))
        where = "start" if step < 0 else f"after step {step + 1}"
        print(f"| {where} | {p['episodes']} | {p['reward']:.2f} | {p['tool_share']:.2f} | "
              f"{fmt(p['solved_tool'])} | {fmt(p['solved_direct'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
