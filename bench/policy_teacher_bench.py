"""Benchmarks of the policy and teacher services against their anchors (issue #3).

    .venv/bin/python bench/policy_teacher_bench.py [--model DIR] [--out bench/results/policy_teacher.md]

1. teacher tokens/s through gRPC (loopback server, TeacherClient) vs an in-process TeacherCore
   scoring the same batches - target >= 0.9x;
2. teacher with shared-prompt groups (G = 8, prompt longer than the completion) vs scoring every
   sequence whole - target >= 1.5x;
3. policy sampled tokens/s (hf backend) vs transformers `generate` on the same model and batch -
   target >= 1.0x. Both sample exactly max_tokens tokens per row (end-of-sequence disabled).

Without --model, the `tiny` preset is built in a temporary folder. Each figure is the best of
--repeats interleaved runs after one warm-up. Results go to a markdown table with the machine noted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
from machine import cpu_name


def best_of(fns, repeats: int) -> list[float]:
    """Best wall time of each function; runs are interleaved (a, b, a, b, ...) after one warm-up
    each, so load from other processes on a shared machine hits every side alike."""
    for fn in fns:
        fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def teacher_batch(vocab: int, prompts: int, group: int, prompt_len: int, completion_len: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    p = [rng.integers(1, vocab, size=prompt_len).astype(np.int32) for _ in range(prompts)]
    c = [rng.integers(1, vocab, size=completion_len).astype(np.int32) for _ in range(prompts * group)]
    return p, c, [i // group for i in range(prompts * group)]


def bench_teacher(model_dir: Path, repeats: int, args) -> list[tuple[str, float, float, float]]:
    from services.common.grpc_server import GrpcServer
    from services.common.pb import teacher_pb2_grpc
    from services.teacher.client import TeacherClient
    from services.teacher.config import TeacherConfig
    from services.teacher.core import TeacherCore
    from services.teacher.server import TeacherServicer

    shared, whole = TeacherCore(TeacherConfig(max_batch_tokens=args.batch_tokens)), TeacherCore(TeacherConfig(max_batch_tokens=args.batch_tokens, share_prompt=False))
    for core in (shared, whole):
        core.load_teacher("math", str(model_dir))
    vocab = shared.vocab_size
    p, c, idx = teacher_batch(vocab, args.prompts, 8, args.prompt_len, args.completion_len)
    tokens = sum(len(x) for x in c)

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def start():
        server = GrpcServer("teacher", TeacherConfig())
        server.add(teacher_pb2_grpc.add_TeacherServiceServicer_to_server, TeacherServicer(shared), "cascade.v1.TeacherService")
        await server.start()
        await server.set_serving(True)
        return server

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(60)
    client = TeacherClient({"math": f"127.0.0.1:{server.port}"})
    t_inproc, t_grpc, t_whole = best_of(
        [lambda: shared.score("math", p, c, idx), lambda: client.score("math", p, c, idx, timeout=600), lambda: whole.score("math", p, c, idx)],
        repeats,
    )
    client.close()
    asyncio.run_coroutine_threadsafe(server.shutdown(), loop).result(60)
    loop.call_soon_threadsafe(loop.stop)
    shape = f"{args.prompts} prompts x G=8, prompt {args.prompt_len}, completion {args.completion_len} tokens"
    return [
        (f"teacher via gRPC vs in-process ({shape})", tokens / t_grpc, tokens / t_inproc, 0.9),
        (f"teacher shared prompt vs whole sequences ({shape})", tokens / t_inproc, tokens / t_whole, 1.5),
    ]


def bench_policy(model_dir: Path, repeats: int, args) -> tuple[str, float, float, float]:
    from transformers import GenerationConfig

    from services.policy.backends.base import SamplingConfig
    from services.policy.backends.hf import HfBackend, left_pad

    backend = HfBackend(model_dir)
    backend.eos_ids = []  # every row samples exactly max_tokens tokens, as generate below
    rng = np.random.default_rng(1)
    vocab = backend.spec.vocab_size
    prompts = [rng.integers(1, vocab, size=int(rng.integers(args.policy_prompt_len // 2, args.policy_prompt_len + 1))).tolist() for _ in range(args.policy_prompts)]
    n, steps = args.policy_n, args.policy_tokens
    tokens = len(prompts) * n * steps
    params = SamplingConfig(max_tokens=steps, temperature=1.0, seed=0)

    rows = [p for p in prompts for _ in range(n)]
    ids, mask = left_pad(rows, backend.pad_id, backend.device)
    config = GenerationConfig(
        do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=steps, min_new_tokens=0,
        eos_token_id=None, pad_token_id=backend.pad_id, bos_token_id=None,
    )

    def hf_generate():
        with torch.inference_mode():
            out = backend.model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        assert out.shape[1] - ids.shape[1] == steps, "generate stopped early"

    t_ours, t_hf = best_of([lambda: backend.generate(prompts, n, params), hf_generate], repeats)
    shape = f"{len(prompts)} prompts x n={n}, {steps} new tokens"
    return (f"policy sampled tokens/s vs transformers generate ({shape})", tokens / t_ours, tokens / t_hf, 1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="HF model directory (default: build the tiny preset)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/policy_teacher.md"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=8, help="teacher: prompts (each with G=8 completions)")
    parser.add_argument("--prompt-len", type=int, default=192)
    parser.add_argument("--completion-len", type=int, default=96)
    parser.add_argument("--batch-tokens", type=int, default=8192)
    parser.add_argument("--policy-prompts", type=int, default=8)
    parser.add_argument("--policy-n", type=int, default=4)
    parser.add_argument("--policy-prompt-len", type=int, default=48)
    parser.add_argument("--policy-tokens", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model
        if model_dir is None:
            from services.common.tinymodel import init_model

            model_dir = init_model(Path(tmp) / "tiny", preset="tiny", seed=0)
        rows = [*bench_teacher(model_dir, args.repeats, args), bench_policy(model_dir, args.repeats, args)]
    machine = f"{cpu_name()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
    lines = [
        "# Policy and teacher benchmarks",
        "",
        f"Machine: {machine}. Model: {args.model or 'tiny preset (Qwen3, 4 layers, hidden 192)'}, float32.",
        f"Command: `.venv/bin/python bench/policy_teacher_bench.py` (best of {args.repeats} interleaved runs after a warm-up).",
        "",
        "| comparison | ours (tokens/s) | anchor (tokens/s) | ratio | target | met |",
        "|---|---:|---:|---:|---:|:-:|",
    ]
    for name, ours, anchor, target in rows:
        ratio = ours / anchor
        lines.append(f"| {name} | {ours:,.0f} | {anchor:,.0f} | {ratio:.2f}x | >= {target}x | {'yes' if ratio >= target else 'no'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
