"""Benchmark of the core pool (issue #23, "threads where the work is").

    .venv/bin/python bench/cores_bench.py [--preset tiny] [--rounds 5] [--out bench/results/cores.md]
        [--alone-modes 1,N,fixed,pool,blind] [--contended-modes 1,N,fixed,pool,share]

Two real processes, as in the local stack (OMP_NUM_THREADS=1, one core pool folder): a trainer
(`TrainerCore` behind its `Coordinator`) and a policy (`PolicyCore`, `hf` backend). Each call goes
through the core, so it runs inside the core's own `cores.lease()`; a mode swaps the core's pool:
`1` (no pool, 1 thread: the local stack before the pool), `N` (no pool, every core), `fixed` (the
pool's fixed lease, as the local stack runs it now: wait for every core, run on all of them), `pool`
(the adaptive lease: the free cores the machine has idle, wait when none is free), `share` (adaptive,
one thread when none is free) and `blind` (adaptive without watch_load: every free slot).

1. Alone: seconds per GRPO TrainStep (the demo's RL batch: 16 prompts x 8 rollouts), per SFT step
   (16 conversations of 64-256 tokens) and per Generate call (16 prompts x n = 8, 48 new tokens,
   end-of-sequence off so every sample has them all), each mode once a round, the order rotating
   from round to round; median over the rounds, ratio = the median of the per-round ratios to `1`.
2. Contended: a Generate and a GRPO TrainStep sent at the same moment, per mode (`1` = each on one
   thread, a static split; `N` = both on every core, oversubscribed); wall time until both are done,
   and each call's own seconds.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from machine import cpu_name  # noqa: E402
from trainer_bench import median_ratio, timed  # noqa: E402

from services.common.cores import CorePool, host_cores  # noqa: E402

MODES = ("1", "N", "fixed", "pool", "share")
SOLO_MODES = ("1", "N", "fixed", "pool", "blind")
JOBS = {"grpo": "trainer", "sft": "trainer", "generate": "policy"}


class Recording:
    """A CorePool that remembers how many threads its last lease gave."""

    def __init__(self, pool: CorePool):
        self.pool, self.threads = pool, 0

    @contextmanager
    def lease(self):
        with self.pool.lease() as threads:
            self.threads = threads
            yield threads


def pool_for(mode: str, directory: Path) -> CorePool:
    """The core pool of a mode (see the module docstring)."""
    return {"1": lambda: CorePool(None, 1), "N": lambda: CorePool(None, host_cores()),
            "fixed": lambda: CorePool(directory, 0, lease="fixed"),
            "pool": lambda: CorePool(directory, 0, busy="wait", lease="adaptive"),
            "share": lambda: CorePool(directory, 0, busy="share", lease="adaptive"),
            "blind": lambda: CorePool(directory, 0, watch_load=False, lease="adaptive")}[mode]()


def trainer_jobs(model: Path, scratch: Path, args):
    """job name -> a callable running one step, and the object whose `cores` the mode sets."""
    import numpy as np

    from services.common.pb import trainer_pb2
    from services.trainer.config import TrainerConfig
    from services.trainer.core import TrainerCore
    from services.trainer.distributed import Coordinator
    from services.trainer.schedules import ScheduleConfig
    from tests.trainer.builders import request_batch

    core = TrainerCore(TrainerConfig(model=str(model), store=scratch / "trainer", schedule=ScheduleConfig(lr=1e-5)))
    coord, ids = Coordinator(core), itertools.count()
    vocab = core.engine.vocab_size
    grpo = request_batch("grpo", lengths=(args.prompt_len + args.new_tokens,) * (args.prompts * args.n), vocab=vocab)
    lengths = np.random.default_rng(0).integers(64, 257, size=16).tolist()
    sft = request_batch("sft", lengths=tuple(lengths), vocab=vocab)
    params = trainer_pb2.LossParams()
    return core, {"grpo": lambda: coord.train_step(f"g{next(ids)}", "grpo", grpo, params, ""),
                  "sft": lambda: coord.train_step(f"s{next(ids)}", "sft", sft, params, "")}


def policy_jobs(model: Path, args):
    import numpy as np

    from services.policy.backends.base import SamplingConfig
    from services.policy.config import PolicyConfig
    from services.policy.core import PolicyCore

    core = PolicyCore.build(PolicyConfig(model=str(model)))
    core.backend.eos_ids = []  # every sample has all its new tokens
    rng = np.random.default_rng(1)
    vocab = core.backend.spec.vocab_size
    prompts = [rng.integers(1, vocab, size=int(rng.integers(args.prompt_len // 2, args.prompt_len + 1))).tolist()
               for _ in range(args.prompts)]
    params = SamplingConfig(max_tokens=args.new_tokens, temperature=1.0, seed=0)
    return core, {"generate": lambda: core.generate(prompts, args.n, params)}


def worker(args) -> None:
    """Serve `<job> <mode>` lines on stdin: run the job once under the mode, print `<seconds> <threads>`.
    Replies go to the original stdout; anything a library prints goes to stderr."""
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    with tempfile.TemporaryDirectory() as tmp:
        core, jobs = (trainer_jobs(args.model, Path(tmp), args) if args.worker == "trainer" else policy_jobs(args.model, args))
        for job in jobs.values():  # warm-up
            core.cores = CorePool(None, 1)
            job()
        print("ready", file=reply, flush=True)
        for line in sys.stdin:
            job, mode = line.split()
            core.cores = Recording(pool_for(mode, args.pool))
            seconds = timed(jobs[job])
            print(f"{seconds:.6f} {core.cores.threads}", file=reply, flush=True)


class Worker:
    def __init__(self, kind: str, model: Path, pool: Path, args):
        cmd = [sys.executable, __file__, "--worker", kind, "--model", str(model), "--pool", str(pool),
               "--prompts", str(args.prompts), "--n", str(args.n), "--prompt-len", str(args.prompt_len),
               "--new-tokens", str(args.new_tokens)]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        if (line := self.proc.stdout.readline().strip()) != "ready":
            raise RuntimeError(f"{kind} worker did not start (said {line!r}; its log is on stderr)")

    def send(self, job: str, mode: str) -> None:
        self.proc.stdin.write(f"{job} {mode}\n")
        self.proc.stdin.flush()

    def reply(self) -> tuple[float, int]:
        seconds, threads = self.proc.stdout.readline().split()
        return float(seconds), int(threads)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


LOADS: list[float] = []


def progress(line: str) -> None:
    """One line on stderr, with the 1-minute load average (kept for the report)."""
    LOADS.append(os.getloadavg()[0])
    print(f"{line} (load {LOADS[-1]:.1f})", file=sys.stderr, flush=True)


def rotations(items, rounds: int):
    """Round r runs `items` rotated by r (a b c, b c a, c a b, ...)."""
    for r in range(rounds):
        k = r % len(items)
        yield r, items[k:] + items[:k]


def solo(workers: dict[str, Worker], rounds: int, modes: list[str]) -> dict:
    """{job: {mode: [seconds per round]}}, and the threads each mode got."""
    seconds = {job: {m: [] for m in modes} for job in JOBS}
    threads = {(job, m): [] for job in JOBS for m in modes}
    for r, order in rotations([(j, m) for j in JOBS for m in modes], rounds):
        for job, mode in order:
            w = workers[JOBS[job]]
            w.send(job, mode)
            s, t = w.reply()
            seconds[job][mode].append(s)
            threads[job, mode].append(t)
            progress(f"alone round {r}: {job} {mode} {s:.3f} s")
    return {"seconds": seconds, "threads": threads}


def contended(workers: dict[str, Worker], rounds: int, modes: list[str]) -> dict:
    """{mode: [(wall, generate seconds, generate threads, train seconds, train threads) per round]}."""
    out = {m: [] for m in modes}
    for r, order in rotations(list(modes), rounds):
        for mode in order:
            start = time.perf_counter()
            workers["trainer"].send("grpo", mode)
            workers["policy"].send("generate", mode)
            gen, train = workers["policy"].reply(), workers["trainer"].reply()
            out[mode].append((time.perf_counter() - start, gen[0], gen[1], train[0], train[1]))
            progress(f"contended round {r}: {mode} {out[mode][-1]}")
    return out


def report(res: dict, args, load: tuple) -> str:
    med = statistics.median
    s, th, base = res["solo"]["seconds"], res["solo"]["threads"], "1"
    modes = args.alone_modes
    shape = {"grpo": f"GRPO TrainStep, {args.prompts * args.n} rows x {args.prompt_len + args.new_tokens} tokens",
             "sft": "SFT step, 16 rows of 64-256 tokens",
             "generate": f"Generate, {args.prompts} prompts x n={args.n}, {args.new_tokens} new tokens"}
    cores = host_cores()
    lines = [
        f"# Core pool, `{args.preset}` preset: threads where the work is", "",
        f"Machine: {cpu_name()}, {cores} cores in the affinity mask, torch {__import__('torch').__version__}, CPU, fp32; "
        f"model: the `{args.preset}` preset. Load average (1, 5, 15 min): "
        f"{' / '.join(f'{x:.2f}' for x in load[0])} at the start, {' / '.join(f'{x:.2f}' for x in load[1])} at the end "
        f"(1-minute load {min(LOADS, default=0):.1f} - {max(LOADS, default=0):.1f} over the calls; a shared machine: "
        "other jobs ran beside it).",
        f"Command: `.venv/bin/python bench/cores_bench.py --preset {args.preset} --rounds {args.rounds} "
        f"--contended-rounds {args.contended_rounds} --alone-modes {','.join(args.alone_modes)} "
        f"--contended-modes {','.join(args.contended_modes)}`; "
        "trainer and policy in two processes with OMP_NUM_THREADS=1, as in the local stack. "
        f"Modes: `1` = one torch thread (the local stack before the pool), `N` = {cores} threads, no pool, "
        "`fixed` = the pool's fixed lease, as the local stack runs it (wait for every core, run on all of them), "
        "`pool` = the adaptive lease (no more threads than idle cores, wait when no slot is free), "
        "`share` = adaptive, one thread when no slot is free, `blind` = adaptive without watch_load (every free slot).", "",
        f"## Alone (seconds per call, median of {args.rounds} rotated rounds; ratio: median of per-round ratios to `1`)", "",
        f"| call | {' | '.join(f'`{m}`' for m in modes)} | {' | '.join(f'`{m}` / `1`' for m in modes[1:])} | threads each mode gave |",
        "|---|" + "---:|" * (2 * len(modes)),
    ]
    for job in JOBS:
        x = s[job]
        given = ", ".join(f"`{m}` {'/'.join(sorted({str(t) for t in th[job, m]}))}" for m in modes[1:])
        lines.append(f"| {shape[job]} | {' | '.join(f'{med(x[m]):.3f}' for m in modes)} | "
                     f"{' | '.join(f'{median_ratio(x[m], x[base]):.2f}' for m in modes[1:])} | {given} |")
    c = res["contended"]
    walls1 = [r[0] for r in c["1"]]
    lines += ["", f"## Contended: a Generate and a GRPO TrainStep sent at once (median of {args.contended_rounds} rotated rounds)", "",
              "| mode | wall until both done (s) | wall / `1` | Generate (s) | its threads | TrainStep (s) | its threads |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for mode in args.contended_modes:
        rows = c[mode]
        walls = [r[0] for r in rows]
        lines.append(f"| `{mode}` | {med(walls):.3f} | {median_ratio(walls, walls1):.2f} | {med(r[1] for r in rows):.3f} | "
                     f"{'/'.join(sorted({str(r[2]) for r in rows}))} | {med(r[3] for r in rows):.3f} | "
                     f"{'/'.join(sorted({str(r[4]) for r in rows}))} |")
    return "\n".join(lines) + "\n"


def merged(old: str, text: str, preset: str) -> str:
    """The results file with this preset's section replaced (other presets' sections and the
    hand-written `## Notes` kept)."""
    notes = old[old.index("\n## Notes"):] if "\n## Notes" in old else ""
    body = "\n" + old[: len(old) - len(notes)]
    sections = ["# " + part for part in body.split("\n# ") if part.strip()]
    kept = [x for x in sections if not x.startswith(f"# Core pool, `{preset}` preset")]
    return "\n".join(x.rstrip("\n") + "\n" for x in [text, *kept]) + notes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/cores.md")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--contended-rounds", type=int, default=5)
    ap.add_argument("--alone-modes", default=",".join(SOLO_MODES),
                    help=f"modes timed alone, `1` first, then any of {', '.join(SOLO_MODES[1:])} (default: all); "
                    "1 = one thread, N = every core without a pool, fixed = the fixed lease (the local stack's), "
                    "pool = the adaptive lease, blind = adaptive without watch_load")
    ap.add_argument("--contended-modes", default=",".join(MODES),
                    help=f"modes timed contended, `1` first, then any of {', '.join(MODES[1:])} (default: all); "
                    "share = adaptive, one thread when no slot is free")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--worker", choices=("trainer", "policy"), help=argparse.SUPPRESS)
    ap.add_argument("--model", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--pool", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    args.alone_modes = args.alone_modes.split(",")
    if args.alone_modes[0] != "1" or not set(args.alone_modes) <= set(SOLO_MODES):
        ap.error(f"--alone-modes: `1` first, then any of {', '.join(SOLO_MODES[1:])}")
    args.contended_modes = args.contended_modes.split(",")
    if args.contended_modes[0] != "1" or not set(args.contended_modes) <= set(MODES):
        ap.error(f"--contended-modes: `1` first, then any of {', '.join(MODES[1:])}")
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        from services.common.tinymodel import init_model

        model = init_model(Path(tmp) / args.preset, preset=args.preset, seed=0)
        pool = Path(tmp) / "cores"
        workers = {kind: Worker(kind, model, pool, args) for kind in ("trainer", "policy")}
        try:
            res = {"solo": solo(workers, args.rounds, args.alone_modes), "contended": contended(workers, args.contended_rounds, args.contended_modes)}
        finally:
            for w in workers.values():
                w.close()
    text = report(res, args, (load_start, os.getloadavg()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(merged(args.out.read_text() if args.out.exists() else "", text, args.preset))
    print(text)


if __name__ == "__main__":
    main()
