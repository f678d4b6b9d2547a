"""Benchmarks of the trainer service (issue #5).

    .venv/bin/python bench/trainer_bench.py [--model DIR] [--out bench/results/trainer.md]

1. train-step throughput (trained tokens/s): TrainStep through gRPC (loopback server, the
   service's own servicer) vs the same DeepSpeed step called in-process on the same core
   (decode + validate + forward/backward/step) - target >= 0.9x;
2. weight publish + policy load (PublishWeights RPC, then the policy's own load path:
   `PolicyCore.load_weights` on an `hf` backend serving the same model - read and verify the
   sha256, stage the tensors, swap them in) vs writing the same state dict with
   `safetensors.torch.save_file` and reading it back with `load_file` - target <= 1.5x. Run for
   the `tiny` preset and for a larger model of the same architecture (built here, random weights).

Without --model, the `tiny` preset is built in a temporary folder. Each comparison runs one
warm-up of each side, then --pairs interleaved pairs (the order flips every pair, so a shared
machine's load and any first-runner effect fall on both sides alike); a figure is the median over
the pairs, a ratio the median of the per-pair ratios. Both sides run with --threads torch threads
(checked in the trainer servicer's worker thread too). Results go to a markdown table with the
machine and its load noted.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.grpc_server import GrpcServer
from services.common.pb import trainer_pb2, trainer_pb2_grpc
from services.policy.config import PolicyConfig
from services.policy.core import PolicyCore
from services.trainer.config import TrainerConfig
from services.trainer.core import TrainerCore
from services.trainer.distributed import Coordinator
from services.trainer.schedules import ScheduleConfig
from services.trainer.server import TrainerServicer
from tests.trainer.builders import request_batch

_ids = itertools.count()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired(a, b, pairs: int, before_a=lambda: None) -> tuple[list[float], list[float]]:
    """Seconds of `a` and of `b` over `pairs` interleaved pairs after one warm-up of each; the order
    within a pair flips every pair (a b, b a, a b...). `before_a` runs untimed before every `a`."""
    before_a(), a(), b()
    ta, tb = [], []
    for i in range(pairs):
        before_a()
        if i % 2:
            tb.append(timed(b))
            ta.append(timed(a))
        else:
            ta.append(timed(a))
            tb.append(timed(b))
    return ta, tb


def median_ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(num, den))


class Served:
    """A TrainerServicer over `coordinator` on a loopback port, in a background event loop."""

    def __init__(self, cfg: TrainerConfig, coordinator: Coordinator):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        servicer = TrainerServicer()
        servicer.attach(coordinator)

        async def start():
            server = GrpcServer("trainer", cfg)
            server.add(trainer_pb2_grpc.add_TrainerServiceServicer_to_server, servicer, "cascade.v1.TrainerService")
            await server.start()
            await server.set_serving(True)
            return server

        self.servicer = servicer
        self.server = asyncio.run_coroutine_threadsafe(start(), self.loop).result(60)
        self.client = ReplicaClient(f"127.0.0.1:{self.server.port}", trainer_pb2_grpc.TrainerServiceStub, ClientOptions(timeout=600))

    def close(self):
        self.client.close()
        asyncio.run_coroutine_threadsafe(self.server.shutdown(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)


def bench_train_step(coord: Coordinator, served: Served, rows: int, length: int, steps: int, pairs: int) -> dict:
    msg = request_batch("grpo", seed=0, lengths=(length,) * rows, vocab=1000)
    tokens = rows * (length - 3)
    params = trainer_pb2.LossParams()

    def local():
        for _ in range(steps):
            coord.train_step(f"local-{next(_ids)}", "grpo", msg, params, "")

    def remote():
        for _ in range(steps):
            req = trainer_pb2.TrainStepRequest(step_id=f"rpc-{next(_ids)}", loss="grpo", batch=msg, params=params)
            served.client.call("TrainStep", req)

    threads = {"main": torch.get_num_threads(), "worker": served.servicer.pool.submit(torch.get_num_threads).result()}
    t_local, t_remote = paired(local, remote, pairs)
    total = tokens * steps
    return {"tokens": total, "local": total / statistics.median(t_local), "grpc": total / statistics.median(t_remote),
            "ratio": median_ratio(t_local, t_remote), "spread": (min(t_local), max(t_local), min(t_remote), max(t_remote)),
            "bytes": msg.ByteSize(), "threads": threads}


def bench_publish(coord: Coordinator, served: Served, policy: PolicyCore, scratch: Path, pairs: int) -> dict:
    from safetensors.torch import load_file, save_file

    def ours():
        ref = served.client.call("PublishWeights", trainer_pb2.PublishWeightsRequest())
        policy.load_weights(ref.version, ref.uri, ref.sha256)

    def direct():
        state = {k: v.detach().clone().contiguous() for k, v in coord.core.engine.module.state_dict().items()
                 if not k.startswith("lm_head") or not coord.core.engine.module.config.tie_word_embeddings}
        path = scratch / "direct.safetensors"
        save_file(state, str(path))
        load_file(str(path))

    def change():  # unchanged weights are not published again: one untimed SFT step before each publish
        coord.train_step(f"publish-{next(_ids)}", "sft", request_batch("sft"), trainer_pb2.LossParams(), "")

    size = sum(p.numel() for p in coord.core.engine.module.parameters())
    t_ours, t_direct = paired(ours, direct, pairs, before_a=change)
    return {"params": size, "ours": statistics.median(t_ours), "direct": statistics.median(t_direct),
            "ratio": median_ratio(t_ours, t_direct)}


def build_larger(tiny: Path, out: Path) -> Path:
    """A Qwen3 of hidden 512, 8 layers (~30M parameters) with the tiny model's tokenizer."""
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(tiny, local_files_only=True)
    cfg.update({"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 8, "head_dim": 64, "num_attention_heads": 8, "num_key_value_heads": 4,
                "layer_types": ["full_attention"] * 8})
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(out)
    for f in tiny.iterdir():
        if f.name.startswith("tokenizer") or f.suffix == ".jinja":
            shutil.copy(f, out / f.name)
    return out


def run(model: Path, scratch: Path, args) -> tuple[dict, list[dict]]:
    def service(model_dir: Path, name: str):
        cfg = TrainerConfig(model=str(model_dir), store=scratch / name, schedule=ScheduleConfig(lr=1e-5))
        coord = Coordinator(TrainerCore(cfg))
        return coord, Served(cfg, coord)

    def policy(model_dir: Path) -> PolicyCore:
        return PolicyCore.build(PolicyConfig(model=str(model_dir)))

    coord, served = service(model, "tiny")
    train = bench_train_step(coord, served, args.rows, args.length, args.steps, args.pairs)
    publish = [{"model": "tiny", **bench_publish(coord, served, policy(model), scratch, args.pairs)}]
    served.close()
    if not args.skip_larger:
        larger = build_larger(model, scratch / "larger")
        coord, served = service(larger, "larger")
        publish.append({"model": "qwen3 512x8", **bench_publish(coord, served, policy(larger), scratch, args.pairs)})
        served.close()
    return train, publish


def report(train: dict, publish: list[dict], args) -> str:
    load = args.load_start, os.getloadavg()
    t = train["threads"]
    lo_local, hi_local, lo_grpc, hi_grpc = train["spread"]
    lines = [
        "# Trainer benchmarks", "",
        (f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, CPU, fp32, "
         f"ZeRO stage 0, one rank; torch threads {t['main']} in the caller, {t['worker']} in the trainer servicer's worker thread. "
         f"Median of {args.pairs} interleaved pairs after a warm-up of each side (ratio: median of the per-pair ratios). "
         f"Load average (1, 5, 15 min): {' / '.join(f'{x:.1f}' for x in load[0])} at the start, "
         f"{' / '.join(f'{x:.1f}' for x in load[1])} at the end (a shared machine: figures are noisy)."), "",
        "## Train-step throughput (GRPO, trained tokens/s)", "",
        f"Batch: {args.rows} rows x {args.length} tokens ({train['bytes'] / 1024:.0f} KiB on the wire), {args.steps} steps per run.", "",
        "| path | tokens/s (median) | seconds per run (min - max) | ratio |", "|---|---:|---:|---:|",
        f"| in-process (same core, decode + DeepSpeed step) | {train['local']:.0f} | {lo_local:.2f} - {hi_local:.2f} | 1.00 |",
        f"| gRPC TrainStep (loopback) | {train['grpc']:.0f} | {lo_grpc:.2f} - {hi_grpc:.2f} | {train['ratio']:.3f} (target >= 0.9) |", "",
        "## Publish + policy load vs safetensors save_file + load_file", "",
        "| model | parameters | PublishWeights + PolicyCore.load_weights (s) | save_file + load_file (s) | ratio (target <= 1.5) |",
        "|---|---:|---:|---:|---:|",
    ]
    for p in publish:
        lines.append(f"| {p['model']} | {p['params'] / 1e6:.1f}M | {p['ours']:.3f} | {p['direct']:.3f} | {p['ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path)
    ap.add_argument("--out", type=Path, default=Path("bench/results/trainer.md"))
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=11, help="interleaved pairs per comparison (at least 5)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads on both sides (the services run with OMP_NUM_THREADS=1)")
    ap.add_argument("--skip-larger", action="store_true")
    args = ap.parse_args()
    if args.pairs < 5:
        ap.error("--pairs must be at least 5")
    torch.set_num_threads(args.threads)  # before any worker thread starts, so every thread gets it
    args.load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        model = args.model
        if model is None:
            from services.common.tinymodel import init_model

            model = init_model(scratch / "tiny", preset="tiny", seed=0)
        train, publish = run(model, scratch, args)
    text = report(train, publish, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    old = args.out.read_text() if args.out.exists() else ""
    notes = old[old.index("\n## Notes") :] if "\n## Notes" in old else ""  # hand-written: kept across reruns
    args.out.write_text(text + notes)
    print(text)


if __name__ == "__main__":
    main()
