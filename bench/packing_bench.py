"""SFT packing: trained tokens/s with the step's conversations packed into rows vs one row each (padded).

    .venv/bin/python bench/packing_bench.py [--steps 8] [--budgets 0,512,1024] [--out bench/results/packing.md]

The demo's SFT shape: the synthetic SFT conversations of every domain (`cascade data synth`),
tokenised with the chat template's assistant mask as the SFT step does, cut to max_seq_len 256,
16 conversations a step, the `tiny` model, one CPU rank (DeepSpeed, fp32). Each step's batch is
trained padded and packed at each row-width budget (the trainer's `pack_tokens`; 0 = the step's
longest conversation), one trainer per layout, the layouts' order rotating every step (so the shared
machine's load falls on all alike), at learning rate 0 so all see the same weights. Figures: median
tokens/s over the steps, the padding fraction of each layout (also of the previous planner,
first-fit decreasing into rows as wide as the longest conversation), and the largest loss
difference (packing must not change the loss).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.common.modelio import load_tokenizer  # noqa: E402
from services.common.pb import trainer_pb2  # noqa: E402
from services.common.synth import write_dataset  # noqa: E402
from services.common.tinymodel import init_model  # noqa: E402
from services.orchestrator.steps.base import batch_message  # noqa: E402
from services.orchestrator.steps.sft import tokenize_conversations  # noqa: E402
from services.trainer.config import TrainerConfig  # noqa: E402
from services.trainer.core import StepOptions, TrainerCore  # noqa: E402
from services.trainer.distributed import Coordinator  # noqa: E402
from services.trainer.packing import first_fit_decreasing, padded_area, plan_rows  # noqa: E402

DOMAINS = ("math", "code", "if", "mcqa", "structured", "tool", "rlhf")
BATCH, MAX_LEN = 16, 256


def padding(lengths: list[int], rows: list[list[int]]) -> float:
    """Share of a layout's rows x width that is padding."""
    return 1 - sum(lengths) / padded_area(lengths, rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--budgets", default="0,512,1024", help="pack_tokens values to measure (0 = the longest conversation)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/packing.md"))
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    budgets = [int(b) for b in args.budgets.split(",")]
    work = Path(tempfile.mkdtemp(prefix="packing-bench-"))
    model = init_model(work / "model", "tiny")
    write_dataset(work / "data", seed=0)
    tok = load_tokenizer(model)
    examples = [json.loads(line) for d in DOMAINS for line in (work / "data" / d / "sft.jsonl").read_text().splitlines()]
    draw = random.Random(0)  # each step a seeded draw across all domains, as the SFT stage's batches are
    kinds = ["padded", *(f"packed-{b}" for b in budgets)]
    trainers = {k: Coordinator(TrainerCore(TrainerConfig(
        model=str(model), store=work / f"store-{k}", device="cpu", precision="fp32",
        pack_tokens=int(k.split("-")[1]) if k != "padded" else 0))) for k in kinds}
    rates: dict[str, list[float]] = {k: [] for k in kinds}
    cpu_rates: dict[str, list[float]] = {k: [] for k in kinds}
    pads: dict[str, list[float]] = {k: [] for k in [*kinds, "first-fit"]}
    rows_of: dict[str, list[int]] = {k: [] for k in kinds}
    worst = 0.0
    load = [os.getloadavg()[0]]
    for step in range(args.steps + 1):
        chunk = draw.sample(examples, BATCH)
        rows, masks = tokenize_conversations(tok, chunk, MAX_LEN)
        msg = batch_message(rows, masks)
        lengths = [len(r) for r in rows]
        pads["padded"].append(padding(lengths, [[i] for i in range(len(lengths))]))
        rows_of["padded"].append(len(lengths))
        pads["first-fit"].append(padding(lengths, first_fit_decreasing(lengths, max(lengths))))
        for b in budgets:
            plan = plan_rows(lengths, b)
            pads[f"packed-{b}"].append(padding(lengths, plan))
            rows_of[f"packed-{b}"].append(len(plan))
        order = kinds[step % len(kinds):] + kinds[:step % len(kinds)]
        got = {}
        for kind in order:
            start, cpu = time.perf_counter(), time.process_time()
            r = trainers[kind].train_step(f"{kind}-{step}", "sft", msg, trainer_pb2.LossParams(), "", 0.0,
                                          options=StepOptions(packing=kind != "padded"))
            seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
            got[kind] = r.metrics["loss"]
            if step:  # step 0 warms every layout up
                rates[kind].append(r.metrics["tokens"] / seconds)
                cpu_rates[kind].append(r.metrics["tokens"] / cpu_seconds)
        worst = max(worst, *(abs(got[k] - got["padded"]) / abs(got["padded"]) for k in kinds))
        load.append(os.getloadavg()[0])
    med = {k: statistics.median(v) for k, v in rates.items()}
    cpu_med = {k: statistics.median(v) for k, v in cpu_rates.items()}
    label = {"padded": "padded (one conversation a row)"} | {
        f"packed-{b}": f"packed, `pack_tokens={b}`" + (" (rows as wide as the longest conversation)" if b == 0 else "")
        + (" (the default)" if b == TrainerConfig.model_fields["pack_tokens"].default else "")
        for b in budgets}
    lines = [
        "# SFT packing: packed vs padded rows (trainer)",
        "",
        f"`python bench/packing_bench.py --steps {args.steps} --budgets {args.budgets} --threads {args.threads}` on "
        f"{machine()}, torch threads {torch.get_num_threads()}; load average {min(load):.1f}-{max(load):.1f} "
        "during the run (shared machine).",
        f"The demo's SFT shape: `tiny` model, {BATCH} synthetic SFT conversations a step (all domains), cut to "
        f"{MAX_LEN} tokens, learning rate 0; one trainer per layout, the order rotating every step. "
        f"Median over {args.steps} steps after a warm-up. Tokens per second of wall time, and per second of this "
        "process's CPU time (all its threads; on a loaded machine the steadier measure of the work a layout costs).",
        "",
        "| layout | trained tokens/s (wall) | vs padded | trained tokens / CPU s | vs padded | rows a step (mean) "
        "| padding fraction |",
        "|---|---|---|---|---|---|---|",
        *(f"| {label[k]} | {med[k]:.0f} | {med[k] / med['padded']:.2f}x | {cpu_med[k]:.0f} | "
          f"{cpu_med[k] / cpu_med['padded']:.2f}x | {statistics.mean(rows_of[k]):.1f} | {statistics.mean(pads[k]):.2f} |"
          for k in kinds),
        "",
        f"The previous planner (first-fit decreasing into rows as wide as the longest conversation) left "
        f"{statistics.mean(pads['first-fit']):.2f} of its rows padding on the same batches. Largest relative "
        f"loss difference between any packed layout and padded: {worst:.1e}.",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


def machine() -> str:
    """CPU model and core count, from /proc/cpuinfo where there is one."""
    try:
        name = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.machine()
    return f"{name}, {os.cpu_count()} CPUs"


if __name__ == "__main__":
    main()
