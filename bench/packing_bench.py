"""SFT packing: trained tokens/s with the step's conversations packed into rows vs one row each (padded).

    .venv/bin/python bench/packing_bench.py [--steps 8] [--out bench/results/packing.md]

The demo's SFT shape: the synthetic SFT conversations of every domain (`cascade data synth`),
tokenised with the chat template's assistant mask as the SFT step does, cut to max_seq_len 256,
16 conversations a step, the `tiny` model, one CPU rank (DeepSpeed, fp32). Each step's batch is
trained once padded and once packed (`packing`, rows filled up to the step's longest conversation),
interleaved (the order flips every step, so the shared machine's load falls on both alike) at
learning rate 0 so both see the same weights. Figures: median tokens/s over the steps, the padding
fraction of each layout, and the largest loss difference (packing must not change the loss).
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
from services.trainer.packing import plan_rows  # noqa: E402

DOMAINS = ("math", "code", "if", "mcqa", "structured", "tool", "rlhf")
BATCH, MAX_LEN = 16, 256


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path("bench/results/packing.md"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="packing-bench-"))
    model = init_model(work / "model", "tiny")
    write_dataset(work / "data", seed=0)
    tok = load_tokenizer(model)
    examples = [json.loads(line) for d in DOMAINS for line in (work / "data" / d / "sft.jsonl").read_text().splitlines()]
    draw = random.Random(0)  # each step a seeded draw across all domains, as the SFT stage's batches are
    trainer = Coordinator(TrainerCore(TrainerConfig(model=str(model), store=work / "store", device="cpu", precision="fp32")))
    rates = {"padded": [], "packed": []}
    pads = {"padded": [], "packed": []}
    worst = 0.0
    for step in range(args.steps + 1):
        chunk = draw.sample(examples, BATCH)
        rows, masks = tokenize_conversations(tok, chunk, MAX_LEN)
        msg = batch_message(rows, masks)
        lengths = [len(r) for r in rows]
        longest = max(lengths)
        plan = plan_rows(lengths, longest)
        pads["padded"].append(1 - sum(lengths) / (len(rows) * longest))
        pads["packed"].append(1 - sum(lengths) / (len(plan) * max(sum(lengths[i] for i in p) for p in plan)))
        order = ("padded", "packed") if step % 2 else ("packed", "padded")
        got = {}
        for kind in order:
            start = time.perf_counter()
            r = trainer.train_step(f"{kind}-{step}", "sft", msg, trainer_pb2.LossParams(), "", 0.0,
                                   options=StepOptions(packing=kind == "packed"))
            seconds = time.perf_counter() - start
            got[kind] = r.metrics["loss"]
            if step:  # step 0 warms both up
                rates[kind].append(r.metrics["tokens"] / seconds)
        worst = max(worst, abs(got["packed"] - got["padded"]) / abs(got["padded"]))
    med = {k: statistics.median(v) for k, v in rates.items()}
    lines = [
        "# SFT packing: packed vs padded rows (trainer)",
        "",
        f"`python bench/packing_bench.py --steps {args.steps}` on {platform.machine()}, {os.cpu_count()} CPUs "
        f"(load average {os.getloadavg()[0]:.1f}, shared), torch threads {__import__('torch').get_num_threads()}.",
        f"The demo's SFT shape: `tiny` model, {BATCH} synthetic SFT conversations a step (all domains), cut to "
        f"{MAX_LEN} tokens; packed rows are filled up to the step's longest conversation. Median over {args.steps} steps.",
        "",
        "| layout | trained tokens/s | padding fraction |",
        "|---|---|---|",
        f"| padded (one conversation a row) | {med['padded']:.0f} | {statistics.mean(pads['padded']):.2f} |",
        f"| packed | {med['packed']:.0f} | {statistics.mean(pads['packed']):.2f} |",
        "",
        f"Packed / padded throughput: **{med['packed'] / med['padded']:.2f}x**; largest relative loss difference "
        f"between the two layouts: {worst:.1e}.",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
