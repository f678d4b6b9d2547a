"""The `hf` policy backend's prefill: each prompt computed once for its n samples, not n times.

    .venv/bin/python bench/hf_generate.py [--model DIR] [--runs 5] [--out bench/results/hf_generate.md]

Two ways to sample one request, interleaved, after a warm-up, --runs times each:
- `per row` (the baseline, the backend before): every sample's row prefilled, so a prompt is
  computed n times;
- `shared` (what the backend serves): each prompt prefilled once and its KV cache, last logits,
  mask and positions repeated for its n samples.
Requests the size of the demo's: an evaluation (64 prompts x 4 domains x 4 samples), an MOPD fresh draw
(64 x 4 domains x 12) and an IF-RL step's rollouts (32 prompts x 8), 48 new tokens at temperature 1.
Every run checks that both draw the same tokens with the same float32 log-probs. The table gives
medians and the ratio shared / per row of the medians.

Without --model the `tiny` preset is built (untrained: every row runs all 48 tokens, the longest case).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from gqa_attention import model_or_tiny, prompts_of, same_samples, timed  # noqa: E402
from machine import cpu_name  # noqa: E402

from services.policy.backends.base import SamplingConfig  # noqa: E402
from services.policy.backends.hf import HfBackend  # noqa: E402

REQUESTS = {"demo evaluation (64 x 4 domains, 4 samples)": (256, 4),
            "MOPD fresh draw (64 x 4 domains, 12 samples)": (256, 12),
            "IF-RL rollouts (32 prompts, 8 samples)": (32, 8)}
WAYS = ("per row", "shared")


def sample(backend: HfBackend, way: str, prompts, n: int, params: SamplingConfig) -> tuple[float, list]:
    """Time one generate the given way (`per row` patches the backend's prefill for the call)."""
    served = backend._prefill
    if way == "per row":
        backend._prefill = lambda ps, k: served([p for p in ps for _ in range(k)], 1)
    try:
        return timed(backend, prompts, n, params)
    finally:
        backend._prefill = served


def bench(model_dir: Path, runs: int) -> list[tuple[str, int, dict[str, float]]]:
    backend = HfBackend(model_dir)
    params = SamplingConfig(max_tokens=48, temperature=1.0, seed=1234)
    rows = []
    for name, (count, n) in REQUESTS.items():
        prompts = prompts_of(count, backend.model.config.vocab_size)
        for way in WAYS:
            sample(backend, way, prompts[:8], n, params)  # warm-up
        times: dict[str, list[float]] = {w: [] for w in WAYS}
        for _ in range(runs):
            outs = {}
            for way in WAYS:
                times[way].append((result := sample(backend, way, prompts, n, params))[0])
                outs[way] = result[1]
            if not same_samples(outs["per row"], outs["shared"]):
                raise SystemExit(f"{name}: the shared prefill drew other samples than per row")
        print(f"{name}: " + ", ".join(f"{w} {[round(t, 2) for t in times[w]]}" for w in WAYS), flush=True)
        rows.append((name, count * n, {w: statistics.median(times[w]) for w in WAYS}))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="HF model directory (default: build the tiny preset)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/hf_generate.md")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = bench(model_or_tiny(args.model, Path(tmp)), args.runs)
    lines = [
        "# The `hf` policy backend's prefill: a prompt computed once for its samples (CPU)",
        "",
        f"Machine: {cpu_name()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} torch threads, torch "
        f"{torch.__version__}. Model: {args.model or 'tiny preset (Qwen3, 4 layers, hidden 192, 4 query and 2 key/value heads), untrained'}, "
        "float32.",
        f"Command: `.venv/bin/python bench/hf_generate.py --runs {args.runs}` (medians of {args.runs} interleaved "
        "runs after a warm-up; every run drew the same tokens and log-probs both ways).",
        "",
        "| request | rows x 48 tokens | per row (s) | shared (s) | shared / per row |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, count, t in rows:
        lines.append(f"| {name} | {count} | {t['per row']:.2f} | {t['shared']:.2f} | {t['shared'] / t['per row']:.2f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
