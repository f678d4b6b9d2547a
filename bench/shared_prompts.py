"""Prompt sharing in the trainer: seconds per RL train step with each prompt computed once for its
completions (`share_prompts`) vs once per completion, on the rollouts of a finished demo run.

    .venv/bin/python bench/shared_prompts.py --home .cascade/demo [--run 1] [--steps 6]
        [--threads 0] [--out bench/results/shared_prompts.md]

For each RL stage of the run (its config from the run's ledger), up to --steps of its stored rollout
batches (`<home>/runs/<run>/steps/*/rollouts.json`: the prompts as the policy saw them, every sampled
completion and its log-probs) are trained as the stage's loss (grpo or mopd) by two trainers on the
run's SFT model, one step each layout, the order flipping every step (so the machine's load falls
on both alike), at learning rate 0 so both see the same weights. Every sampled completion is kept
(the stage's dynamic filter, which drops some groups, is not applied); GRPO's advantages and MOPD's
teacher log-probs are drawn at random (they change no cost). Figures: median seconds per step of
each layout and the median of the per-step ratios, the decoder's token positions (rows x width)
of each, and the largest relative loss difference (sharing must not change the loss beyond rounding).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_name  # noqa: E402

from services.common import codec  # noqa: E402
from services.common.pb import trainer_pb2  # noqa: E402
from services.orchestrator.artifacts import ArtifactStore  # noqa: E402
from services.orchestrator.cascade_config import load_cascade  # noqa: E402
from services.trainer.config import TrainerConfig  # noqa: E402
from services.trainer.core import StepOptions, TrainerCore  # noqa: E402
from services.trainer.distributed import Coordinator  # noqa: E402


def rollout_batch(out: dict, loss: str, rng: np.random.Generator) -> trainer_pb2.TrainBatch:
    """prompt + completion rows of one stored rollout batch, the loss mask on the completions."""
    group = len(out["token_ids"]) // len(out["prompt_ids"])
    rows, masks, inference = [], [], []
    for i, completion in enumerate(out["token_ids"]):
        prompt = out["prompt_ids"][i // group]
        rows.append(np.asarray([*prompt, *completion], np.int32))
        masks.append(np.r_[np.zeros(len(prompt), np.int32), np.ones(len(completion), np.int32)])
        inference.append(np.r_[np.zeros(len(prompt), np.float32), np.minimum(np.asarray(out["logprobs"][i], np.float32), 0)])
    msg = trainer_pb2.TrainBatch(input_ids=codec.encode(rows, "int32"), loss_mask=codec.encode(masks, "int32"),
                                 inference_logprobs=codec.encode(inference, "float32"))
    if loss == "grpo":
        msg.advantages.CopyFrom(codec.encode([rng.normal(size=len(rows)).astype(np.float32)], "float32"))
    else:
        teacher = [np.minimum(x - rng.uniform(0, 1, size=len(x)).astype(np.float32) * m, 0) for x, m in zip(inference, masks)]
        msg.teacher_logprobs.CopyFrom(codec.encode(teacher, "float32"))
    return msg


def stored_batches(home: Path, run: int, stage: int, limit: int) -> list[dict]:
    store = ArtifactStore(home / "runs" / str(run) / "steps")
    out = []
    for step in range(limit):
        sid = f"run-{run}/stage-{stage}/step-{step}"
        if store.has(sid, "rollouts"):
            out.append(store.get(sid, "rollouts"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, required=True, help="home of a finished `cascade demo` (or `cascade run`)")
    ap.add_argument("--run", type=int, default=1)
    ap.add_argument("--config", type=Path, default=None, help="the run's cascade YAML (default: <home>/*.yaml)")
    ap.add_argument("--steps", type=int, default=6, help="stored batches per stage (after one warm-up step)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/shared_prompts.md"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = args.config or next(iter(sorted(args.home.glob("*.yaml"))))
    cascade = load_cascade(config)
    model = min((p for p in (args.home / "trainer" / "weights").glob("v*") if p.is_dir()), key=lambda p: int(p.name[1:]))
    work = Path(tempfile.mkdtemp(prefix="shared-prompts-"))
    trainers = {k: Coordinator(TrainerCore(TrainerConfig(model=str(model), store=work / k, device="cpu", precision="fp32")))
                for k in ("unshared", "shared")}
    rng = np.random.default_rng(0)
    rows_out, load, worst = [], [os.getloadavg()[0]], 0.0
    for index, stage in enumerate(cascade.stages):
        if stage.type not in ("grpo", "mopd") or stage.env:
            continue
        batches = stored_batches(args.home, args.run, index, args.steps + 1)
        if len(batches) < 2:
            continue
        seconds = {k: [] for k in trainers}
        decoded = {k: [] for k in trainers}
        ratios = []
        for step, out in enumerate(batches):
            msg = rollout_batch(out, stage.type, rng)
            order = ["unshared", "shared"] if step % 2 else ["shared", "unshared"]
            got = {}
            for kind in order:
                start = time.perf_counter()
                r = trainers[kind].train_step(f"{stage.name}-{step}-{kind}", stage.type, msg, trainer_pb2.LossParams(), "", 0.0,
                                              options=StepOptions(share_prompts=kind == "shared"))
                got[kind] = (time.perf_counter() - start, r.metrics)
            worst = max(worst, abs(got["shared"][1]["loss"] - got["unshared"][1]["loss"]) / max(abs(got["unshared"][1]["loss"]), 1e-12))
            if step:  # step 0 warms both up
                for kind in trainers:
                    seconds[kind].append(got[kind][0])
                    decoded[kind].append(got[kind][1]["decoder_tokens"])
                ratios.append(got["shared"][0] / got["unshared"][0])
            load.append(os.getloadavg()[0])
        group = len(batches[0]["token_ids"]) // len(batches[0]["prompt_ids"])
        prompt = statistics.mean(len(p) for b in batches for p in b["prompt_ids"])
        completion = statistics.mean(len(t) for b in batches for t in b["token_ids"])
        rows_out.append(
            f"| {stage.name} ({stage.type}) | {len(batches[0]['prompt_ids'])} x {group} | {prompt:.0f} / {completion:.0f} | "
            f"{statistics.median(seconds['unshared']):.2f} | {statistics.median(seconds['shared']):.2f} | "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) | "
            f"{statistics.mean(decoded['shared']) / statistics.mean(decoded['unshared']):.2f} |")
        print(rows_out[-1], flush=True)
    lines = [
        "# Prompt sharing in the trainer: shared vs unshared rows (RL train step)",
        "",
        f"`python bench/shared_prompts.py --home H --steps {args.steps} --threads {args.threads}` on {cpu_name()}, "
        f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; load average {min(load):.1f}-{max(load):.1f}. "
        f"H: a finished `cascade demo` of `{config.name}`; its stored rollout batches, every completion kept, trained "
        "by two trainers on its first published weights at learning rate 0, the order flipping every step. Median "
        f"over {args.steps} steps a stage after a warm-up step.",
        "",
        "| stage | prompts x G | prompt / completion tokens (mean) | s a step, unshared | s a step, shared | shared / unshared "
        "(min-max) | decoder positions, shared / unshared |",
        "|---|---|---|---|---|---|---|",
        *rows_out,
        "",
        f"Largest relative loss difference between the layouts, any step: {worst:.1e}.",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
