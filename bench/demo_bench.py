"""`cascade demo` timed as a new user runs it (issue #23: "the demo in 10 minutes on a 2-core machine").

    .venv/bin/python bench/demo_bench.py [--runs 1 | --runs pool=3,one-thread=1] [--modes pool,one-thread]
        [--config configs/demo.yaml] [--out bench/results/demo.md]

Each run is `cascade demo --home H` from a fresh home H (a new temporary folder: the tiny model and
the data are built inside the timed run), as a child process, with the local stack's core pool on
(`pool`: CASCADE_STACK_SHARE_CORES=true, the default: every heavy call waits for and runs on the
machine's cores) or off (`one-thread`: CASCADE_STACK_SHARE_CORES=false, one torch thread a service,
the stack before the pool). The modes alternate run by run; `--runs` is one count for every mode or a
count per mode (`pool=3,one-thread=1`: the target's median from three runs, the baseline from one).

Per run: wall time; the CPU the demo's whole process tree used (user + system seconds of every
process it started, from the kernel's accounting of reaped children) over wall time, 200 % being
both cores of a 2-core machine; per stage, its seconds (from the `stage ... started` / `succeeded`
lines of the demo's own log) and the machine's busy share over those seconds (/proc/stat sampled
every second: the whole machine, so anything else running shows up here, not in the tree's figure).
The medians per mode and the ratio of their wall times come from the same invocation.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from machine import cpu_name  # noqa: E402

MODES = {"pool": "true", "one-thread": "false"}
STAGE_LINE = re.compile(r"^(\d\d:\d\d:\d\d) stage (\d+)/\d+ (\S+) .*?\b(started|succeeded)\b")


def cpu_busy_sampler(samples: list[tuple[float, float]], stop: threading.Event, every_s: float = 1.0) -> None:
    """Appends (unix time, busy %) every `every_s`: busy = 100 x cores x (1 - idle share), from /proc/stat."""
    def read() -> tuple[int, int]:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return sum(fields), fields[3] + fields[4]

    cores = os.cpu_count() or 1
    total, idle = read()
    while not stop.wait(every_s):
        now_total, now_idle = read()
        dt = now_total - total
        if dt > 0:
            samples.append((time.time(), 100.0 * cores * (1 - (now_idle - idle) / dt)))
        total, idle = now_total, now_idle


def stage_spans(lines: list[str], day: str) -> list[tuple[str, float, float]]:
    """(stage name, start, end) in unix time from the demo log's stage lines (HH:MM:SS, local time)."""
    starts, spans = {}, []
    for line in lines:
        m = STAGE_LINE.match(line)
        if not m:
            continue
        t = datetime.strptime(f"{day} {m[1]}", "%Y-%m-%d %H:%M:%S").timestamp()
        if m[4] == "started":
            starts[m[3]] = t
        elif m[3] in starts:
            spans.append((m[3], starts.pop(m[3]), t))
    return spans


def mean_busy(samples: list[tuple[float, float]], start: float, end: float) -> float:
    inside = [b for t, b in samples if start < t <= end + 1]
    return statistics.fmean(inside) if inside else float("nan")


def own_model(config: Path, home: Path, seed: int | None = None) -> Path:
    """A copy of `config` in `home` whose model lies in `home` too, so every run builds it (a recipe's
    relative `model:` would be built by the first run only and found by the next); `seed` set when given."""
    raw = yaml.safe_load(config.read_text())
    raw["model"] = str(home / "models" / "tiny")
    if seed is not None:
        raw["seed"] = seed
    home.mkdir(parents=True, exist_ok=True)
    out = home / (config.name if seed is None else f"{config.stem}-seed{seed}{config.suffix}")
    out.write_text(yaml.safe_dump(raw, sort_keys=False))
    return out


def run_demo(mode: str, config: Path) -> dict:
    home = Path(tempfile.mkdtemp(prefix=f"demo-{mode}-"))
    env = {**os.environ, "CASCADE_STACK_SHARE_CORES": MODES[mode], "CASCADE_DEMO_PROGRESS_EVERY": "30"}
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    sampler = threading.Thread(target=cpu_busy_sampler, args=(samples, stop), daemon=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    day = datetime.now().strftime("%Y-%m-%d")
    sampler.start()
    t0 = time.time()
    proc = subprocess.run([str(ROOT / ".venv/bin/cascade"), "demo", "--config", str(own_model(config, home)),
                           "--home", str(home)],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"demo ({mode}) failed with exit code {proc.returncode}; its log: {home}/logs/demo.log\n"
                         f"{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    log = (home / "logs" / "demo.log").read_text().splitlines()
    spans = stage_spans(log, day)
    stages = {name: (end - start, mean_busy(samples, start, end)) for name, start, end in spans}
    claims = [line.split(" — ")[0].split(" ", 1)[1] for line in log if re.match(r"^\d\d:\d\d:\d\d (holds|not shown|fails):", line)]
    return {"mode": mode, "home": str(home), "wall": wall, "tree_cpu": 100 * cpu_s / wall,
            "machine_cpu": mean_busy(samples, t0, t0 + wall), "stages": stages, "claims": claims}


def render(runs: list[dict], args, minutes: float) -> str:
    modes = [m for m in args.modes if any(r["mode"] == m for r in runs)]
    load = os.getloadavg()[0]
    lines = [
        "# `cascade demo` from a fresh home, timed", "",
        f"Machine: {cpu_name()}, {os.cpu_count()} cores, Linux {platform.release()}, Python {platform.python_version()}. "
        f"Load average at the end: {load:.1f}.", "",
        f"Command: `.venv/bin/python bench/demo_bench.py --runs {args.runs_text} --modes {','.join(args.modes)}` "
        f"({minutes:.1f} min in all). Config: `{args.config}`. Each run builds the tiny model and the data in a new "
        "home; `pool` is the local stack's default (CASCADE_STACK_SHARE_CORES=true), `one-thread` the stack "
        "before the core pool (one torch thread a service).", "",
        "| mode | runs | wall (median) | process tree CPU (median) | machine CPU (median) |",
        "|---|---:|---:|---:|---:|"]
    med = {}
    for m in modes:
        rs = [r for r in runs if r["mode"] == m]
        med[m] = statistics.median(r["wall"] for r in rs)
        lines.append(f"| {m} | {len(rs)} | {med[m]:.0f} s ({med[m] / 60:.1f} min) | "
                     f"{statistics.median(r['tree_cpu'] for r in rs):.0f} % | "
                     f"{statistics.median(r['machine_cpu'] for r in rs):.0f} % |")
    if "pool" in med and "one-thread" in med:
        lines += ["", f"Wall time, pool / one-thread: **{med['pool'] / med['one-thread']:.2f}x** (medians of this invocation)."]
    names = list(dict.fromkeys(n for r in runs for n in r["stages"]))
    lines += ["", "Per stage, median seconds (machine CPU over those seconds):", "",
              "| stage | " + " | ".join(modes) + " |", "|---|" + "---:|" * len(modes)]
    for n in names:
        cells = []
        for m in modes:
            got = [r["stages"][n] for r in runs if r["mode"] == m and n in r["stages"]]
            cells.append(f"{statistics.median(s for s, _ in got):.0f} s ({statistics.median(c for _, c in got):.0f} %)"
                         if got else "-")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    lines += ["", "Time outside the stages (start-up, the model and data built, the report) is the wall time less "
              "the stages' sum.", "", "Claims printed by each run (`cascade report`'s verdicts):", ""]
    for i, r in enumerate(runs, 1):
        lines.append(f"- run {i} ({r['mode']}, {r['wall']:.0f} s): " + "; ".join(r["claims"]))
    return "\n".join(lines) + "\n"


def runs_per_mode(text: str, modes: list[str]) -> dict[str, int]:
    """`--runs`: "3" (every mode three runs) or "pool=3,one-thread=1" (a count per mode, each of `modes`)."""
    if "=" not in text:
        counts = dict.fromkeys(modes, int(text))
    else:
        counts = {}
        for part in text.split(","):
            mode, _, n = part.partition("=")
            if mode not in modes:
                raise ValueError(f"{mode!r} is not one of --modes {modes}")
            counts[mode] = int(n)
        missing = [m for m in modes if m not in counts]
        if missing:
            raise ValueError(f"no count for {missing}; give mode=N for each of {modes}")
    if any(n < 1 for n in counts.values()):
        raise ValueError(f"every count must be at least 1, got {counts}")
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="1", help="runs per mode: N for every mode, or mode=N,... (pool=3,one-thread=1)")
    ap.add_argument("--modes", type=lambda s: s.split(","), default=list(MODES))
    ap.add_argument("--config", type=Path, default=Path("configs/demo.yaml"))
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/demo.md")
    args = ap.parse_args()
    bad = [m for m in args.modes if m not in MODES]
    if bad:
        ap.error(f"--modes: {bad} unknown; choose from {list(MODES)}")
    try:
        wanted = runs_per_mode(args.runs, args.modes)
    except ValueError as e:
        ap.error(f"--runs: {e}")
    args.runs_text = args.runs
    t0, runs = time.time(), []
    for i in range(max(wanted.values())):
        for mode in (args.modes if i % 2 == 0 else args.modes[::-1]):
            if i >= wanted[mode]:
                continue
            print(f"run {i + 1}/{wanted[mode]}, {mode} ...", flush=True)
            runs.append(run_demo(mode, args.config))
            r = runs[-1]
            print(f"  {r['wall']:.0f} s, process tree CPU {r['tree_cpu']:.0f} %, machine {r['machine_cpu']:.0f} %", flush=True)
    args.out.write_text(render(runs, args, (time.time() - t0) / 60))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
