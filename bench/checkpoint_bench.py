"""The trainer's per-step checkpoint: seconds a save takes as the journal of applied steps grows.

    .venv/bin/python bench/checkpoint_bench.py [--lengths 1,1000,5000,20000] [--repeats 7] [--out bench/results/checkpoint.md]

A trainer with `autosave` (the local stack's default) saves a whole checkpoint after every applied
step, before it replies, so a restart resumes at that step. The checkpoint names the applied steps
it holds, for exactly-once refusal after a rollback. `mark`, the trainer now: a mark into the
store's journal (Store.journal_mark: its id and length). `copy`, the baseline, the checkpoint as
trainers wrote it before: the applied set itself in the client state (the last `journal_keep`,
100,000 by default). Both on the `tiny` model after one real SFT step (model, AdamW moments,
scheduler, RNG state), one CPU rank (DeepSpeed, fp32), the journal filled with records of that
step's shape up to each length, the two saves alternating so the machine's load falls on both.
Figures: median seconds a save, the checkpoint's size, and copy / mark.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import cpu_name  # noqa: E402
from services.common.pb import trainer_pb2  # noqa: E402
from services.common.tinymodel import init_model  # noqa: E402
from services.orchestrator.steps.base import batch_message  # noqa: E402
from services.trainer.config import TrainerConfig  # noqa: E402
from services.trainer.core import TrainerCore  # noqa: E402
from services.trainer.distributed import Coordinator  # noqa: E402


def sft_batch(vocab: int, rows: int = 16, length: int = 60, seed: int = 0) -> trainer_pb2.TrainBatch:
    """An SFT batch of the demo's shape: 16 rows of random tokens, the second half of each row trained."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (rows, length), generator=g).tolist()
    masks = [[0] * (length // 2) + [1] * (length - length // 2) for _ in range(rows)]
    return batch_message(ids, masks)


def save_copy(core: TrainerCore, tag: str) -> None:
    """The baseline: the checkpoint with the applied set inside, as trainers saved it before journal marks."""
    client = {"data_cursor": core.data_cursor, "applied": list(core.applied.items()), "rng": torch.get_rng_state()}
    core.engine.save(core.store.checkpoints, core.store.temp_tag(tag), client)
    core.store.commit_checkpoint(tag)


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def measure(lengths: list[int], repeats: int, work: Path) -> list[dict]:
    model = work / "tiny"
    init_model(model, preset="tiny", seed=0)
    c = Coordinator(TrainerCore(TrainerConfig(model=str(model), store=str(work / "store"))))
    core = c.core
    result = c.train_step("run-1/stage-0/step-0", "sft", sft_batch(core.engine.vocab_size), trainer_pb2.LossParams(), "")
    record = {"global_step": result.global_step, "metrics": dict(result.metrics)}
    rows = []
    for length in lengths:
        while len(core.applied) < length:
            step_id = f"run-1/stage-0/step-{len(core.applied)}"
            mine = {"global_step": len(core.applied) + 1, "metrics": dict(record["metrics"])}  # each step its own
            core.applied[step_id] = mine
            core.store.append_journal(step_id, mine)
        seconds = {"mark": [], "copy": []}
        for i in range(repeats):
            for name in (("mark", "copy") if i % 2 == 0 else ("copy", "mark")):
                start = time.perf_counter()
                core.save_checkpoint(name) if name == "mark" else save_copy(core, name)
                seconds[name].append(time.perf_counter() - start)
        rows.append({"length": length, **{f"{k}_s": statistics.median(v) for k, v in seconds.items()},
                     **{f"{k}_bytes": size(core.store.checkpoint_dir(k)) for k in seconds}})
        print(f"journal {length}: mark {rows[-1]['mark_s'] * 1e3:.1f} ms, copy {rows[-1]['copy_s'] * 1e3:.1f} ms", flush=True)
    return rows


def report(rows: list[dict], argv: list[str], repeats: int, wall: float) -> str:
    load = os.getloadavg()[0]
    lines = [
        "# The trainer's per-step checkpoint as the journal grows",
        "",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, torch {torch.__version__}. "
        f"Load average at the end: {load:.1f}.",
        "",
        f"Command: `.venv/bin/python bench/checkpoint_bench.py {' '.join(argv)}` ({wall:.0f} s). `mark`: the checkpoint "
        "holds a mark into the store's journal (the trainer now); `copy`: the applied set inside it (the trainer "
        f"before, the baseline). Median of {repeats} saves each, alternating, after one SFT step of the `tiny` model.",
        "",
        "| applied steps in the journal | mark: s a save | copy: s a save | copy / mark | mark: checkpoint | copy: checkpoint |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['length']:,} | {r['mark_s']:.4f} | {r['copy_s']:.4f} | {r['copy_s'] / r['mark_s']:.2f}x | "
                     f"{r['mark_bytes'] / 1e6:.2f} MB | {r['copy_bytes'] / 1e6:.2f} MB |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1,1000,5000,20000", help="Journal lengths to measure at (comma-separated).")
    ap.add_argument("--repeats", type=int, default=7, help="Saves of each kind at each length (the median is reported).")
    ap.add_argument("--out", type=Path, default=None, help="Write the markdown table here.")
    args = ap.parse_args()
    lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    if not lengths or min(lengths) < 1 or args.repeats < 1:
        raise SystemExit("--lengths: positive integers; --repeats: at least 1")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cascade-ckpt-bench-") as tmp:
        rows = measure(sorted(lengths), args.repeats, Path(tmp))
    text = report(rows, sys.argv[1:], args.repeats, time.monotonic() - start)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
