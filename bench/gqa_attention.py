"""The `hf` policy backend's grouped-query attention without the cache copy, against transformers' `sdpa`.

    .venv/bin/python bench/gqa_attention.py [--model DIR] [--runs 5] [--out bench/results/gqa_attention.md]

One request the size of a demo evaluation (64 prompts x 4 domains x 4 samples = 1024 rows, 48 new
tokens at temperature 1; prompts of 27-62 tokens, as the demo's validation prompts) and one the size
of an IF-RL step's rollouts (32 prompts x 8), sampled by the same backend with its model on
`grouped` attention (services/policy/backends/attention.py, what the CPU policy serves) and on
`sdpa` (the baseline), interleaved, after a warm-up, --runs times; the table gives medians and the
ratio grouped / sdpa of the medians. Every run also checks that both draw the same tokens with the same
float32 log-probs: a speed-up that changed a sample would change a run's results.

Without --model the `tiny` preset is built (untrained: every row runs all 48 tokens, the longest case).
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

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from machine import cpu_name  # noqa: E402

from services.policy.backends.base import SamplingConfig  # noqa: E402
from services.policy.backends.hf import HfBackend  # noqa: E402

REQUESTS = {"demo evaluation (64 x 4 domains, 4 samples)": (256, 4), "IF-RL rollouts (32 prompts, 8 samples)": (32, 8)}


def prompts_of(count: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, vocab, size=int(rng.integers(27, 63))).tolist() for _ in range(count)]


def same_samples(a: list, b: list) -> bool:
    """Whether two generate results hold the same tokens with bit-identical float32 log-probs."""
    return all(x.token_ids.tolist() == y.token_ids.tolist() and np.array_equal(x.logprobs, y.logprobs)
               for x, y in zip(a, b, strict=True))


def model_or_tiny(model: Path | None, tmp: Path) -> Path:
    """`model`, or the untrained `tiny` preset built (seed 0) under `tmp`."""
    if model is not None:
        return model
    from services.common.tinymodel import init_model

    return init_model(tmp / "tiny", preset="tiny", seed=0)


def timed(backend: HfBackend, prompts, n: int, params: SamplingConfig) -> tuple[float, list]:
    start = time.perf_counter()
    out = backend.generate(prompts, n, params)
    return time.perf_counter() - start, out


def bench(model_dir: Path, runs: int) -> list[tuple[str, float, float, int]]:
    grouped = HfBackend(model_dir)
    stock = HfBackend(model_dir)
    stock.model.set_attn_implementation("sdpa")
    if not grouped.grouped_attention:
        raise SystemExit(f"{model_dir}: the model has no grouped key/value heads; nothing to compare")
    params = SamplingConfig(max_tokens=48, temperature=1.0, seed=1234)
    rows = []
    for name, (count, n) in REQUESTS.items():
        prompts = prompts_of(count, grouped.model.config.vocab_size)
        timed(grouped, prompts[:8], n, params), timed(stock, prompts[:8], n, params)  # warm-up
        times: dict[str, list[float]] = {"grouped": [], "sdpa": []}
        for _ in range(runs):
            t_g, a = timed(grouped, prompts, n, params)
            t_s, b = timed(stock, prompts, n, params)
            if not same_samples(a, b):
                raise SystemExit(f"{name}: grouped and sdpa attention drew different samples")
            times["grouped"].append(t_g)
            times["sdpa"].append(t_s)
        rows.append((name, statistics.median(times["grouped"]), statistics.median(times["sdpa"]), count * n))
        print(f"{name}: grouped {times['grouped']}, sdpa {times['sdpa']}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="HF model directory (default: build the tiny preset)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/gqa_attention.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = bench(model_or_tiny(args.model, Path(tmp)), args.runs)
    lines = [
        "# Grouped-query attention without the cache copy (`hf` policy backend, CPU)",
        "",
        f"Machine: {cpu_name()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads, torch "
        f"{torch.__version__}. Model: {args.model or 'tiny preset (Qwen3, 4 layers, hidden 192, 4 query and 2 key/value heads)'}, "
        "float32.",
        f"Command: `.venv/bin/python bench/gqa_attention.py --runs {args.runs}` (medians of {args.runs} interleaved "
        "runs after a warm-up; every run drew the same tokens and log-probs with both).",
        "",
        "| request | rows x 48 tokens | grouped (s) | sdpa (s) | grouped / sdpa |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, g, s, count in rows:
        lines.append(f"| {name} | {count} | {g:.2f} | {s:.2f} | {g / s:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
