"""Multi-turn rollout throughput: environment latency overlapped vs a loop that waits for every tool call.

    .venv/bin/python bench/episodes_bench.py [--out bench/results/episodes.md]

The rollout loop (services/orchestrator/episodes.run_episodes) against the real env service (its own
process over gRPC, `python` environment: every tool call a sandboxed interpreter run) in its two modes:
`overlap=True` (a turn is generated as soon as its episode's observation is back, so no episode waits
for a slow sibling's tool call) and `overlap=False` (the baseline: each Generate waits until every tool
call of the previous batch has finished). Same tasks, same turns, same seed; rounds alternate the order.

The policy is scripted, on purpose, so both modes step exactly the same turns: episode e takes t(e)
tool turns (uniform in 1 .. --tool-turns: agentic tasks differ in length), turn k a python cell
sleeping d(e, k) seconds (drawn once from an exponential distribution, mean --mean-s, cut at 4x the
mean: the spread of tool latencies real environments have), then the boxed answer. Its Generate costs --gen-s seconds a call plus --gen-per-prompt-s a prompt (a stand-in
for a policy's batch cost; 0 isolates the environment's latency). The env replays earlier cells on each
call (its state model), so a later turn also pays for the sleeps before it, in both modes alike.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from services.common import codec  # noqa: E402
from services.common.chat_template import IM_END  # noqa: E402
from services.common.grpc_client import ReplicaClient  # noqa: E402
from services.common.modelio import load_tokenizer  # noqa: E402
from services.common.pb import env_pb2_grpc, policy_pb2  # noqa: E402
from services.common.supervisor import ProcessSpec, Supervisor, free_port  # noqa: E402
from services.common.synth.multiturn import python as python_tasks  # noqa: E402
from services.common.tinymodel import init_model  # noqa: E402
from services.common.toolcalls import format_tool_calls  # noqa: E402
from services.orchestrator.cascade_schema import SamplingConfig  # noqa: E402
from services.orchestrator.episodes import EpisodeLimits, run_episodes  # noqa: E402


class ScriptedPolicy:
    """The Generate contract answering with scripted turns (see the module docstring)."""

    def __init__(self, tokenizer, tasks: list[dict], args):
        self.tokenizer, self.args = tokenizer, args
        self.truth = {t["messages"][0]["content"]: t["ground_truth"] for t in tasks}
        self.calls = 0
        self.lock = threading.Lock()

    def delay(self, question: str, k: int) -> float:
        """Seconds turn k of the episode on `question` sleeps: the same in both modes, whatever the order."""
        rng = random.Random(f"{self.args.seed}:{question}:{k}")
        return min(rng.expovariate(1 / self.args.mean_s), 4 * self.args.mean_s)

    def tool_turns(self, question: str) -> int:
        """How many tool turns the episode on `question` takes before its answer: 1 .. --tool-turns."""
        return random.Random(f"{self.args.seed}:{question}:turns").randint(1, self.args.tool_turns)

    def _turn(self, text: str) -> str:
        k = text.count("<|im_start|>assistant") - 1
        question = next(q for q in self.truth if q in text)
        if k < self.tool_turns(question):
            code = f"import time\ntime.sleep({self.delay(question, k):.3f})\nprint({k})"
            return format_tool_calls([{"name": "python", "arguments": {"code": code}}])
        return f"\\boxed{{{self.truth[question]}}}"

    def call(self, method, request, timeout=None):
        assert method == "Generate" and request.n == 1
        time.sleep(self.args.gen_s + self.args.gen_per_prompt_s * len(request.prompts))
        with self.lock:
            self.calls += 1
        rows = []
        for p in request.prompts:
            text = self.tokenizer.decode(np.frombuffer(p.token_ids, dtype="<i4").tolist(), skip_special_tokens=False)
            rows.append(self.tokenizer.encode(self._turn(text) + IM_END, add_special_tokens=False))
        return policy_pb2.GenerateResponse(
            token_ids=codec.encode(rows, "int32"), logprobs=codec.encode([[-0.5] * len(r) for r in rows], "float32"),
            texts=[self.tokenizer.decode(r) for r in rows], weight_version=0,
            finish_reasons=[policy_pb2.FINISH_REASON_STOP] * len(rows))


def one(tokenizer, env, tasks, args, overlap: bool) -> dict:
    policy = ScriptedPolicy(tokenizer, tasks, args)
    limits = EpisodeLimits(max_turns=args.tool_turns + 2, max_episode_tokens=4096, env_seconds=120.0)
    sampling = SamplingConfig(temperature=1.0, max_tokens=256, thinking=False)
    start = time.perf_counter()
    out = run_episodes(policy, env, tokenizer, "python", tasks, 1, sampling, limits, seed=args.seed,
                       workers=args.workers, overlap=overlap)
    seconds = time.perf_counter() - start
    turns = sum(out["turns"])
    policy_tokens = sum(int(sum(m)) for m in out["loss_mask"])
    return {"seconds": seconds, "turns": turns, "turns_per_s": turns / seconds, "tokens_per_s": policy_tokens / seconds,
            "generate_calls": policy.calls, "verdicts": sorted(set(out["verdicts"])),
            "rewards": float(np.mean(out["rewards"]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results/episodes.md"))
    ap.add_argument("--prompts", type=int, default=16, help="episodes (one per prompt: each has its own latencies)")
    ap.add_argument("--tool-turns", type=int, default=4)
    ap.add_argument("--mean-s", type=float, default=0.5, help="mean seconds a tool call sleeps")
    ap.add_argument("--gen-s", type=float, default=0.05)
    ap.add_argument("--gen-per-prompt-s", type=float, default=0.005)
    ap.add_argument("--workers", type=int, default=16, help="the loop's env-call threads")
    ap.add_argument("--sandbox-workers", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="cascade-episodes-bench-"))
    tokenizer = load_tokenizer(str(init_model(work / "tiny", preset="tiny", seed=0)))
    port = free_port()
    sup = Supervisor(work / "logs")
    env_spec = ProcessSpec("env", [sys.executable, "-m", "services.env"],
                           {"CASCADE_ENV_PORT": str(port), "CASCADE_ENV_SANDBOX_WORKERS": str(args.sandbox_workers),
                            "CASCADE_LOG_FORMAT": "json", "CASCADE_HOME": str(work)},
                           grpc_address=f"127.0.0.1:{port}", restart=False, ready_timeout=180)
    tasks = python_tasks.make_tasks(random.Random(args.seed), args.prompts, "train")  # each question once
    results = {"overlap": [], "wait": []}
    with sup:
        sup.start(env_spec)
        with ReplicaClient(f"127.0.0.1:{port}", env_pb2_grpc.EnvServiceStub) as env:
            for r in range(args.rounds):
                order = [("overlap", True), ("wait", False)]
                for name, overlap in (order if r % 2 == 0 else order[::-1]):
                    results[name].append(one(tokenizer, env, tasks, args, overlap))
                    print(f"round {r + 1}/{args.rounds} {name}: {results[name][-1]}", flush=True)
    text = report(args, results, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    (work / "results.json").write_text(json.dumps(results))
    print(text)


def report(args, results: dict, seconds: float) -> str:
    med = {name: {k: statistics.median(r[k] for r in runs) for k in ("seconds", "turns_per_s", "tokens_per_s",
                                                                      "generate_calls")}
           for name, runs in results.items()}
    o, w = med["overlap"], med["wait"]
    rows = [f"| {name} | {m['seconds']:.2f} | {m['turns_per_s']:.1f} | {m['tokens_per_s']:.0f} | {m['generate_calls']:.0f} |"
            for name, m in (("overlapped (a turn goes as soon as its observation is back)", o),
                            ("waiting for every tool call of the batch", w))]
    same = all(r["turns"] == results["overlap"][0]["turns"] for runs in results.values() for r in runs)
    return "\n".join([
        "# Multi-turn rollouts: environment latency overlapped vs waited for", "",
        f"Machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end; "
        f"`python bench/episodes_bench.py` ({seconds / 60:.1f} min). {args.prompts} "
        f"episodes (one per prompt) of the `python` environment on the env service (gRPC, sandboxed cells, {args.sandbox_workers} "
        f"sandbox workers), 1 to {args.tool_turns} tool turns (uniform per episode) then the answer; tool calls sleep an exponential time, mean "
        f"{args.mean_s:g} s; scripted policy, {args.gen_s:g} s + {args.gen_per_prompt_s:g} s a prompt per Generate. "
        f"Medians of {args.rounds} rounds, the order alternating.", "",
        "| loop | seconds per rollout | turns/s | policy tokens/s | Generate calls |",
        "|---|---:|---:|---:|---:|", *rows, "",
        f"Overlapped / waiting: **{w['seconds'] / o['seconds']:.2f}x** the turns per second "
        f"({o['turns_per_s']:.1f} vs {w['turns_per_s']:.1f}); both modes stepped the same "
        f"{'turns' if same else 'NUMBER OF TURNS: NO — see results.json'} and ended every episode with verdicts "
        f"{sorted({v for runs in results.values() for r in runs for v in r['verdicts']})}.", ""])


if __name__ == "__main__":
    main()
