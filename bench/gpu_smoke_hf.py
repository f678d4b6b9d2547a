"""GPU smoke test of the `hf` policy and teacher backends and the DeepSpeed trainer on CUDA (no vLLM).

    python3 bench/gpu_smoke_hf.py --out gpu_smoke.json                        a machine with a CUDA GPU
    .venv/bin/python bench/gpu_smoke_hf.py --device cpu --out /tmp/smoke.json  the same checks, float32 only
                                                                (tiny model only unless --larger)

On this workplace's device machine (carry `.whl`: the wheels its image lacks), the command is this one line:

    set -o pipefail; python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1 && python3 bench/gpu_smoke_hf.py --out $OUT/gpu_smoke.json 2>&1 | tee $OUT/log

What it checks, in float32 and bfloat16 (on CPU float32 only):

1. policy: each sampled token's log-prob (pi_inf) against a plain forward of the same tokens, in
   the policy's dtype and in float32; a prompt's samples alone and inside a larger request (the
   common random numbers of services/policy/sampling.py);
2. teacher: scores and top-k log-probs against a plain forward;
3. trainer (the tiny preset in bf16 and fp32, the ~30M model of bench/trainer_bench.py in the
   device's default precision): GRPO steps on the policy's samples (loss finite and moving),
   publish with its checksum, fresh policies (the trainer's dtype; float32 too for bf16) load it
   through the checksum, then pi_train (the trainer's forward, as its losses see it) against
   pi_inf of each policy's new samples;
4. timings: train step (median of 5 after a warm-up; 2 on CPU), publish + load, generation tokens/s.

Hard checks fail on float32 mismatches; bfloat16 figures are reported only. Every check runs even
when an earlier one failed, prints one line, and the JSON (rewritten after every check, so a run
killed by a time limit still leaves what it had) holds the figures and each failure's traceback.
Exit 1 when any check failed. It calls the services' cores in-process and starts no server.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from transformers.utils import logging as hf_logging

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.common import codec
from services.common.checksum import sha256_dir
from services.common.modelio import load_causal_lm
from services.common.pb import trainer_pb2
from services.policy.backends.base import SamplingConfig
from services.policy.config import PolicyConfig
from services.policy.core import Chat, GenerateResult, PolicyCore
from services.teacher.config import TeacherConfig
from services.teacher.core import TeacherCore
from services.trainer.config import TrainerConfig
from services.trainer.core import TrainerCore
from services.trainer.distributed import Coordinator
from services.trainer.losses import LOSSES
from services.trainer.schedules import ScheduleConfig
from tests.trainer.builders import batch, request_batch

FP32_TOL = 2e-3
"""Largest |log-prob difference| accepted in float32 (bench/gpu_smoke.sh's default for vLLM vs hf)."""
CRN_MIN_SHARE = 0.75
"""float32: least share of samples drawn the same alone and inside a larger request."""
TOP_K = 4
NO_PARAMS = trainer_pb2.LossParams()
PROMPTS = [
    Chat([{"role": "user", "content": "What is 17 + 25?"}]),
    Chat([{"role": "user", "content": "Name three rivers and the seas they flow into."}]),
    [5, 6, 7, 8, 9, 10],
]


@dataclass(frozen=True)
class Sizes:
    max_tokens: int
    """New tokens per sample in the log-prob, CRN and trainer checks."""
    n: int
    """Samples per prompt."""
    gen_rows: int
    """Generation speed: prompts (one sample each, end-of-sequence disabled) ..."""
    gen_tokens: int
    """... of this many new tokens; best of gen_repeats."""
    gen_repeats: int
    train_rows: int
    """Train-step timing: a GRPO batch of train_rows random rows of train_length tokens, the median
    of timed_steps steps after one warm-up step."""
    train_length: int
    timed_steps: int


SIZES = {"cuda": Sizes(48, 4, 64, 128, 3, 16, 256, 5), "cpu": Sizes(16, 2, 8, 16, 1, 4, 32, 2)}


def memo(fn):
    """Memoise a builder by its arguments, a failure too: each check that needs a failed build
    fails at once, naming it, instead of building it again."""
    done: dict = {}

    @functools.wraps(fn)
    def wrapper(*args):
        if args not in done:
            try:
                done[args] = (True, fn(*args))
            except Exception as exc:  # noqa: BLE001  (kept, and raised again in every check that needs it)
                done[args] = (False, exc)
        ok, value = done[args]
        if not ok:
            raise RuntimeError(f"needs {fn.__name__}({', '.join(map(repr, args[1:]))}), which failed: {value!r}") from value
        return value

    return wrapper


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fn: Callable[[], object]) -> float:
    sync()
    start = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - start


def forward_logprobs(model, prompt, tokens, k: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """One unpadded forward of prompt + tokens: (log-prob of each token, the k largest log-probs at
    each of those positions [len, k]), float32."""
    ids = torch.tensor([[*prompt, *tokens]], dtype=torch.long, device=model.device)
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float(), -1)
    picked = logp.gather(-1, ids[0, len(prompt) :, None])[:, 0]
    top = logp.topk(k, dim=-1).values if k else logp[:, :0]
    return picked.cpu().numpy(), top.cpu().numpy()


def max_abs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)), initial=0.0))


def rows_of(result: GenerateResult, n: int) -> list[tuple[list[int], np.ndarray]]:
    """(prompt ids, sampled ids) of every sample."""
    return [(result.prompt_token_ids[i // n], s.token_ids) for i, s in enumerate(result.samples)]


def sample_batch(result: GenerateResult, n: int, advantages: np.ndarray) -> trainer_pb2.TrainBatch:
    """A GRPO TrainBatch of prompt + completion rows, the loss on the completion tokens."""
    rows = [np.asarray([*p, *c], np.int32) for p, c in rows_of(result, n)]
    masks = [np.r_[np.zeros(len(p), np.int32), np.ones(len(c), np.int32)] for p, c in rows_of(result, n)]
    return batch(rows, masks, advantages=codec.encode([advantages.astype(np.float32)], "float32"))


def gap_stats(train: list[np.ndarray], inf: list[np.ndarray]) -> dict:
    """d = log pi_train - log pi_inf over every sampled token: max and mean |d|, mean d, mean |r - 1|."""
    d = np.concatenate([np.asarray(a, np.float64) - np.asarray(b, np.float64) for a, b in zip(train, inf)])
    return {"max_abs": float(np.abs(d).max()), "mean_abs": float(np.abs(d).mean()), "mean": float(d.mean()),
            "mean_abs_ratio_minus_1": float(np.abs(np.expm1(d)).mean()), "tokens": int(d.size)}


class Lab:
    """The models, policies and samples the checks share, each built once on `device`."""

    def __init__(self, device: str, scratch: Path, sizes: Sizes):
        self.device, self.scratch, self.sizes = device, scratch, sizes

    @memo
    def model(self, name: str) -> Path:
        from services.common.tinymodel import init_model

        if name == "tiny":
            return init_model(self.scratch / "tiny", preset="tiny", seed=0)
        if name == "larger":  # Qwen3 hidden 512 x 8 layers (~32M parameters), the tiny model's tokenizer
            from bench.trainer_bench import build_larger

            return build_larger(self.model("tiny"), self.scratch / name)
        raise ValueError(f"unknown model {name!r}: tiny or larger")

    @memo
    def policy(self, name: str, dtype: str) -> PolicyCore:
        return PolicyCore.build(PolicyConfig(model=str(self.model(name)), backend="hf", device=self.device, dtype=dtype))

    @memo
    def reference(self, name: str):
        """The float32 model, for plain forwards."""
        return load_causal_lm(self.model(name), self.device, "float32")

    @memo
    def samples(self, dtype: str) -> GenerateResult:
        params = SamplingConfig(max_tokens=self.sizes.max_tokens, temperature=1.0, seed=0)
        return self.policy("tiny", dtype).generate(PROMPTS, self.sizes.n, params)


def check_policy_logprobs(lab: Lab, dtype: str) -> dict:
    policy, result = lab.policy("tiny", dtype), lab.samples(dtype)
    same, fp32 = [], []
    for (prompt, tokens), s in zip(rows_of(result, lab.sizes.n), result.samples):
        assert len(tokens) == len(s.logprobs) > 0, "a sample without tokens or with misaligned log-probs"
        same.append(max_abs(s.logprobs, forward_logprobs(policy.backend.model, prompt, tokens)[0]))
        fp32.append(max_abs(s.logprobs, forward_logprobs(lab.reference("tiny"), prompt, tokens)[0]))
    values = {"max_abs_vs_forward": max(same), "max_abs_vs_fp32_forward": max(fp32), "samples": len(same),
              "tokens": sum(len(s.token_ids) for s in result.samples),
              "finish": dict(Counter(s.finish_reason for s in result.samples))}
    if dtype == "float32":
        assert max(same) < FP32_TOL, f"policy log-probs differ from a forward by {max(same):.3g} > {FP32_TOL}"
    return values


def check_crn(lab: Lab, dtype: str) -> dict:
    """Each prompt alone vs all prompts in reverse order in one request, same seed."""
    policy, n = lab.policy("tiny", dtype), lab.sizes.n
    params = SamplingConfig(max_tokens=lab.sizes.max_tokens, temperature=1.0, seed=7)
    together = policy.generate(PROMPTS[::-1], n, params).samples
    same, prefix, lp = [], [], []
    for k, prompt in enumerate(PROMPTS):
        alone = policy.generate([prompt], n, params).samples
        for j, a in enumerate(alone):
            b = together[(len(PROMPTS) - 1 - k) * n + j]
            x, y = a.token_ids.tolist(), b.token_ids.tolist()
            common = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
            same.append(x == y)
            prefix.append(common / max(len(x), len(y)))
            lp.append(max_abs(a.logprobs[:common], b.logprobs[:common]))
    share = sum(same) / len(same)
    values = {"identical_share": share, "mean_common_prefix": statistics.mean(prefix), "samples": len(same),
              "max_abs_logprob_on_common_prefix": max(lp)}
    if dtype == "float32":
        assert share >= CRN_MIN_SHARE, f"only {share:.2f} of the samples are the same alone and in a larger request"
    return values


def check_teacher(lab: Lab, dtype: str) -> dict:
    tiny, result, n = lab.model("tiny"), lab.samples(dtype), lab.sizes.n
    core = TeacherCore(TeacherConfig(backend="hf", device=lab.device, dtype=dtype))
    _, load_s = core.load_teacher("math", str(tiny), sha256_dir(tiny))
    prompts = [np.asarray(p, np.int32) for p in result.prompt_token_ids]
    completions = [s.token_ids for s in result.samples]
    index = [i // n for i in range(len(completions))]
    scores = core.score("math", prompts, completions, index, top_k=TOP_K).scores
    model = core.teacher("math").model.model
    err = {"same": [], "fp32": [], "topk": []}
    for (prompt, tokens), got in zip(rows_of(result, n), scores):
        lp, top = forward_logprobs(model, prompt, tokens, TOP_K)
        err["same"].append(max_abs(got.logprobs, lp))
        err["topk"].append(max_abs(got.topk_logprobs.reshape(-1, TOP_K), top))
        err["fp32"].append(max_abs(got.logprobs, forward_logprobs(lab.reference("tiny"), prompt, tokens)[0]))
    values = {"max_abs_vs_forward": max(err["same"]), "max_abs_topk_vs_forward": max(err["topk"]),
              "max_abs_vs_fp32_forward": max(err["fp32"]), "completions": len(scores), "load_s": load_s}
    if dtype == "float32":
        worst = max(values["max_abs_vs_forward"], values["max_abs_topk_vs_forward"])
        assert worst < FP32_TOL, f"teacher scores differ from a forward by {worst:.3g} > {FP32_TOL}"
    return values


def trainer_logprobs(coord: Coordinator, result: GenerateResult, n: int) -> list[np.ndarray]:
    """log pi_train of every sampled token: the engine's own forward of the decoded batch, the very
    log-probs its losses see (Engine._inputs), in the trainer's precision."""
    msg = sample_batch(result, n, np.zeros(len(result.samples)))
    _, decoded, params = coord.core.prepare("pi-train", "grpo", msg, NO_PARAMS)
    with torch.no_grad():
        inputs, *_ = coord.core.engine._inputs(LOSSES["grpo"], decoded, 1.0, params)
    lp = inputs.logprobs.float().cpu().numpy()
    return [lp[i, len(p) : len(p) + len(c)] for i, (p, c) in enumerate(rows_of(result, n))]


def check_trainer(lab: Lab, name: str, precision: str, policy_dtypes: tuple[str, ...]) -> dict:
    """GRPO steps, timed steps, publish, a fresh policy of each dtype loads it, pi_train vs pi_inf."""
    directory, sizes, n = lab.model(name), lab.sizes, lab.sizes.n
    cfg = TrainerConfig(model=str(directory), store=lab.scratch / f"trainer-{name}-{precision}", device=lab.device,
                        precision=precision, schedule=ScheduleConfig(lr=1e-3))
    coord = Coordinator(TrainerCore(cfg))
    policies = {d: PolicyCore.build(PolicyConfig(model=str(directory), device=lab.device, dtype=d)) for d in policy_dtypes}
    params = SamplingConfig(max_tokens=sizes.max_tokens, temperature=1.0, seed=0)
    before = policies[policy_dtypes[0]].generate(PROMPTS, n, params)
    advantages = np.random.default_rng(0).standard_normal(len(before.samples))
    msg = sample_batch(before, n, (advantages - advantages.mean()) / advantages.std())
    steps = [coord.train_step(f"grpo-{i}", "grpo", msg, NO_PARAMS, "").metrics for i in range(3)]
    losses = [m["loss"] for m in steps]
    assert all(math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) for m in steps), f"not finite: {steps}"
    assert len(set(losses)) > 1, f"the loss did not move over {len(losses)} steps: {losses}"

    timing = request_batch("grpo", seed=0, lengths=(sizes.train_length,) * sizes.train_rows, vocab=coord.core.engine.vocab_size)
    step_s = [timed(lambda i=i: coord.train_step(f"time-{i}", "grpo", timing, NO_PARAMS, "")) for i in range(1 + sizes.timed_steps)][1:]

    ref = coord.publish_weights()
    assert ref.sha256 == sha256_dir(ref.uri), "the published checksum is not the directory's"
    median = statistics.median(step_s)
    gaps, values = {}, {
        "precision": coord.core.engine.precision, "losses": losses, "grad_norms": [m["grad_norm"] for m in steps],
        "train_step_s_median": median, "train_step_s": step_s,
        "train_tokens_per_s": sizes.train_rows * (sizes.train_length - 3) / median,  # request_batch: 3 prompt tokens a row
        "publish_s": ref.seconds, "parameters": sum(p.numel() for p in coord.core.engine.module.parameters()),
    }
    for dtype, policy in policies.items():
        values[f"load_s_{dtype}"] = policy.load_weights(ref.version, ref.uri, ref.sha256)
        assert policy.weight_version == ref.version
        after = policy.generate(PROMPTS, n, SamplingConfig(max_tokens=sizes.max_tokens, temperature=1.0, seed=1))
        gap = gap_stats(trainer_logprobs(coord, after, n), [s.logprobs for s in after.samples])
        gaps[f"pi_train_vs_pi_inf_{dtype}"] = gap
        if precision == "fp32" and dtype == "float32":
            assert gap["max_abs"] < FP32_TOL, f"fp32 trainer and float32 policy differ by {gap['max_abs']:.3g} > {FP32_TOL}"
    return {**gaps, **values}


def check_generation_speed(lab: Lab, name: str, dtype: str) -> dict:
    """Sampled tokens/s of the hf backend, every row running to max_tokens (end-of-sequence off)."""
    policy, sizes = lab.policy(name, dtype), lab.sizes
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, policy.backend.spec.vocab_size, size=32).tolist() for _ in range(sizes.gen_rows)]
    saved, policy.backend.eos_ids = policy.backend.eos_ids, []
    try:
        policy.generate(prompts[:2], 1, SamplingConfig(max_tokens=4, seed=0))
        best = min(timed(lambda r=r: policy.generate(prompts, 1, SamplingConfig(max_tokens=sizes.gen_tokens, seed=r)))
                   for r in range(sizes.gen_repeats))
    finally:
        policy.backend.eos_ids = saved
    tokens = sizes.gen_rows * sizes.gen_tokens
    return {"rows": sizes.gen_rows, "new_tokens": sizes.gen_tokens, "seconds": best, "tokens_per_s": tokens / best}


class Smoke:
    """Runs named checks: one line each, figures and tracebacks kept, the JSON rewritten after each."""

    def __init__(self, out: Path, env: dict):
        self.out, self.env, self.checks = out, env, []

    def run(self, name: str, fn: Callable[[], dict]) -> None:
        start = time.perf_counter()
        try:
            values, error = fn(), None
        except Exception:  # noqa: BLE001  (a failed check is recorded; the others still run)
            values, error = {}, traceback.format_exc()
        seconds = time.perf_counter() - start
        self.checks.append({"name": name, "ok": error is None, "seconds": round(seconds, 2), "values": values, "error": error})
        tail = error.strip().splitlines()[-1] if error else summary(values)
        print(f"{'ok  ' if error is None else 'FAIL'} {name:<30} {seconds:6.1f}s  {tail[:400]}", flush=True)
        self.write()

    @property
    def failed(self) -> list[str]:
        return [c["name"] for c in self.checks if not c["ok"]]

    def write(self) -> None:
        if torch.cuda.is_available():
            self.env["cuda_max_memory_allocated_mib"] = torch.cuda.max_memory_allocated() / 2**20
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps({"ok": not self.failed, "failed": self.failed, "env": self.env, "checks": self.checks},
                                       indent=1, default=plain) + "\n")


def plain(value):
    """JSON for what json does not know: numpy scalars as numbers, anything else as text."""
    return value.item() if isinstance(value, np.generic) else str(value)


def summary(values: dict) -> str:
    def short(v):
        if isinstance(v, float):
            return f"{v:.3g}"
        if isinstance(v, dict):
            return "{" + " ".join(f"{k}={short(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ",".join(short(x) for x in v) + "]" if len(v) <= 4 else f"[{len(v)} values]"
        return str(v)

    return " ".join(f"{k}={short(v)}" for k, v in values.items())


def environment(device: str) -> dict:
    """Versions, and where each module was imported from (the carried wheels must win)."""
    env = {"device": device, "python": platform.python_version(), "torch": torch.__version__,
           "cuda_available": torch.cuda.is_available()}
    for name in ("transformers", "tokenizers", "deepspeed", "pydantic", "pydantic_settings", "grpc", "google.protobuf", "numpy"):
        try:
            module = importlib.import_module(name)
            env[name] = f"{getattr(module, '__version__', '?')} from {Path(module.__file__).parent}"
        except Exception as exc:  # noqa: BLE001  (recorded: the checks that need it fail and say why)
            env[name] = repr(exc)
    if device.startswith("cuda"):
        env.update(gpu=torch.cuda.get_device_name(), torch_cuda=torch.version.cuda,
                   tf32_matmul=torch.backends.cuda.matmul.allow_tf32, bf16_supported=torch.cuda.is_bf16_supported())
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--out", type=Path, default=Path("bench/.work/gpu_smoke.json"))
    ap.add_argument("--larger", action=argparse.BooleanOptionalAction, default=None,
                    help="also the ~30M model (default: on CUDA yes, on CPU no: minutes on 2 cores)")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error("no CUDA device is visible; use --device cpu")
    sizes = SIZES[args.device]
    hf_logging.disable_progress_bar()
    gpu = args.device == "cuda"
    dtypes = ("float32", "bfloat16") if gpu else ("float32",)
    smoke = Smoke(args.out, environment(args.device))
    print("env:", json.dumps(smoke.env), flush=True)
    with tempfile.TemporaryDirectory(prefix="cascade-gpu-smoke-") as tmp:
        lab = Lab(args.device, Path(tmp), sizes)
        models = ("tiny", "larger") if (gpu if args.larger is None else args.larger) else ("tiny",)
        for name in models:
            smoke.run(f"model/{name}", lambda name=name: {"path": str(lab.model(name))})
        for dtype in dtypes:
            smoke.run(f"policy/logprobs/{dtype}", lambda d=dtype: check_policy_logprobs(lab, d))
            smoke.run(f"policy/crn/{dtype}", lambda d=dtype: check_crn(lab, d))
            smoke.run(f"teacher/{dtype}", lambda d=dtype: check_teacher(lab, d))
        for name in models:
            for dtype in dtypes if name == "tiny" else dtypes[-1:]:
                smoke.run(f"generate/{name}/{dtype}", lambda m=name, d=dtype: check_generation_speed(lab, m, d))
        # the trainer last: its process group (NCCL on a GPU) is the likeliest to hang
        precisions = {"tiny": ("bf16", "fp32"), "larger": ("bf16",)} if gpu else {"tiny": ("fp32",), "larger": ("fp32",)}
        for name in models:
            for precision in precisions[name]:
                policies = ("bfloat16", "float32") if precision == "bf16" else ("float32",)
                smoke.run(f"trainer/{name}/{precision}", lambda m=name, p=precision, d=policies: check_trainer(lab, m, p, d))
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    print(f"{len(smoke.checks) - len(smoke.failed)}/{len(smoke.checks)} checks passed; failed: {smoke.failed or 'none'}; "
          f"figures in {args.out}")
    sys.exit(1 if smoke.failed else 0)


if __name__ == "__main__":
    main()
