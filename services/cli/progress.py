"""Progress of a run as the CLI tells it: bars on a terminal, plain lines anywhere else, and a log file.

`ProgressLog` turns snapshots of the ledger (the run, its steps, its evaluations) into plain lines: one
when a stage starts, one when it ends, one per new evaluation, and a heartbeat at least every
`every` seconds (stage, step n/N, phase, elapsed, time left). Time left comes from measured step
times: the wall-clock seconds this watcher saw the stage's steps take since its first step began,
or, for a stage that was already under way, the ledger's recorded seconds per phase — never a guess.
`Narrator` writes each line to the log file and, when standard output is not a terminal, to standard
output; `watch` drives both from the ledger. Nothing here starts a service or changes the ledger.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.live import Live

DEFAULT_EVERY_S = 60.0
"""The longest silence on a non-terminal output (and in the log), in seconds."""
TERMINAL = ("succeeded", "failed", "cancelled")


def format_duration(seconds: float) -> str:
    """`42s`, `4m05s`, `1h02m`: compact wall-clock durations."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def compute_seconds_per_step(elapsed_s: float, steps: int) -> float | None:
    """Measured seconds per step: elapsed / steps over the steps seen to finish; None before the first."""
    return elapsed_s / steps if steps > 0 else None


def compute_time_left(done: int, total: int, seconds_per_step: float | None) -> float | None:
    """Time left in a stage: (total - done) x seconds per step; None while no step time is measured."""
    if seconds_per_step is None:
        return None
    return max(0, total - done) * seconds_per_step


class _StageClock:
    """What this watcher saw of one stage: when its first step began, and the steps done then and last."""

    def __init__(self, now: float, done: int):
        self.started, self.done_at_start = now, done
        self.last_done, self.last_done_at = done, now

    def saw(self, done: int, now: float) -> None:
        if done > self.last_done:
            self.last_done, self.last_done_at = done, now

    def seconds_per_step(self) -> float | None:
        return compute_seconds_per_step(self.last_done_at - self.started, self.last_done - self.done_at_start)


class ProgressLog:
    """Ledger snapshots in, plain progress lines out (see the module docstring); `now` is monotonic seconds."""

    def __init__(self, run_id: int, stages: Sequence[dict], every: float = DEFAULT_EVERY_S, now: float = 0.0):
        if every <= 0:
            raise ValueError(f"progress interval must be > 0 seconds (got {every})")
        self.run_id, self.stages, self.every = run_id, list(stages), every
        self.t0 = self.last_line = now
        self.begun: set[int] = set()
        self.ended: set[int] = set()
        self.clocks: dict[int, _StageClock] = {}
        self.evals_seen = 0

    def update(self, run, steps, evals, now: float) -> list[str]:
        lines: list[str] = []
        done = {i: 0 for i in range(len(self.stages))}
        in_flight: dict[int, str] = {}
        for s in steps:
            if s.phase == "done":
                done[s.stage_index] = done.get(s.stage_index, 0) + 1
            else:
                in_flight[s.stage_index] = s.phase
        lines += self._new_evals(evals)
        for st in run.stages:  # in cascade order, so a stage's end is told before the next one's start
            i = st.index
            if i not in self.clocks and any(s.stage_index == i for s in steps):
                self.clocks[i] = _StageClock(now, done[i])
            if i in self.clocks:
                self.clocks[i].saw(done[i], now)
            if i not in self.begun:
                self.begun.add(i)
                lines.append(self._stage_started(i))
            if st.status in TERMINAL and i not in self.ended:
                self.ended.add(i)
                lines.append(self._stage_ended(i, st.status, done[i], steps, now))
        if not lines and now - self.last_line >= self.every:
            lines.append(self._heartbeat(run, done, in_flight, steps, now))
        if lines:
            self.last_line = now
        return lines

    def _name(self, i: int) -> str:
        return f"stage {i + 1}/{len(self.stages)} {self.stages[i]['name']}"

    def _stage_started(self, i: int) -> str:
        st = self.stages[i]
        return f"{self._name(i)} ({st['type']}, {st['steps']} steps; {', '.join(st['domains'])}) started"

    def _stage_ended(self, i: int, status: str, done: int, steps, now: float) -> str:
        clock = self.clocks.get(i)
        took = f" in {format_duration(now - clock.started)}" if clock else ""
        per = self._seconds_per_step(i, steps)
        rate = f" ({per:.2f} s/step)" if per is not None else ""
        return f"{self._name(i)} {status}: {done}/{self.stages[i]['steps']} steps{took}{rate}"

    def _new_evals(self, evals) -> list[str]:
        fresh, self.evals_seen = list(evals)[self.evals_seen:], len(evals)
        groups: dict[tuple[int, int], list] = {}
        for e in fresh:
            groups.setdefault((e.stage_index, e.step_index), []).append(e)
        out = []
        for (i, k), rows in groups.items():
            when = "start" if k < 0 else f"step {k + 1}"
            scores = " ".join(f"{e.domain}={e.score:.2f}" for e in rows)
            out.append(f"validation after {self.stages[i]['name']} {when}: {scores}")
        return out

    def _seconds_per_step(self, i: int, steps) -> float | None:
        clock = self.clocks.get(i)
        measured = clock.seconds_per_step() if clock else None
        if measured is not None:
            return measured
        recorded = [sum(v for v in s.timings.values() if isinstance(v, (int, float)))
                    for s in steps if s.stage_index == i and s.phase == "done"]
        return compute_seconds_per_step(sum(recorded), len(recorded))

    def _heartbeat(self, run, done, in_flight, steps, now: float) -> str:
        elapsed = f"run {format_duration(now - self.t0)}"
        running = [st.index for st in run.stages if st.status == "running"]
        if not running:
            return f"run {self.run_id} {run.status}: waiting for a worker to take the next stage ({elapsed})"
        i = running[-1]
        total = self.stages[i]["steps"]
        clock = self.clocks.get(i)
        in_stage = f"stage {format_duration(now - clock.started)}, " if clock else ""
        phase = f" ({in_flight[i]})" if i in in_flight else " (evaluating)" if done[i] in (0, total) else ""
        per = self._seconds_per_step(i, steps)
        left = compute_time_left(done[i], total, per)
        eta = ("every step done; evaluating the stage's end" if done[i] >= total else
               f"about {format_duration(left)} left in this stage ({per:.2f} s/step measured)"
               if left is not None else "time left: measuring the first step")
        return f"{self._name(i)}: step {done[i]}/{total}{phase} · elapsed {in_stage}{elapsed} · {eta}"


class Narrator:
    """Where the CLI's plain lines go: always the log file (timestamped), and standard output when it is
    not a terminal (a terminal gets bars instead). Thread-safe."""

    def __init__(self, log_path: Path | None, console: Console, every: float = DEFAULT_EVERY_S):
        self.console, self.every = console, every
        self.plain = not console.is_terminal
        self.log_path = log_path
        if log_path is not None:  # owner-only: it holds the run page's link, token included
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600))
        self._lock = threading.Lock()

    def say(self, line: str, to_terminal: bool = False) -> None:
        """One line: stamped `HH:MM:SS`, to the log, and to stdout unless stdout is a terminal
        (`to_terminal` prints it there too, for lines a terminal user needs: addresses, paths)."""
        stamped = f"{time.strftime('%H:%M:%S')} {line}"
        with self._lock:
            if self.log_path is not None:
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(stamped + "\n")
            if self.plain:
                sys.stdout.write(stamped + "\n")
                sys.stdout.flush()
            elif to_terminal:
                self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def show(self, renderable) -> None:
        """A table or block: printed as rich draws it, and written to the log as plain text."""
        self.console.print(renderable)
        if self.log_path is not None:
            with self._lock, open(self.log_path, "a", encoding="utf-8") as f:
                Console(file=f, width=160, color_system=None, soft_wrap=True).print(renderable)

    @contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Around blocking work: `what ...`, a line every `every` s and one when done (the log always,
        stdout when it is not a terminal); a terminal gets a spinner instead."""
        self.say(f"{what} ...")
        stop, started = threading.Event(), time.monotonic()

        def beat() -> None:
            while not stop.wait(self.every):
                self.say(f"{what}: still at it after {format_duration(time.monotonic() - started)}")

        thread = threading.Thread(target=beat, name="narrator", daemon=True)
        thread.start()
        try:
            if self.plain:
                yield
            else:
                with self.console.status(f"{what} ..."):
                    yield
        finally:
            stop.set()
            thread.join()
        self.say(f"{what}: done in {format_duration(time.monotonic() - started)}")


def watch(run_id: int, ledger, narrator: Narrator, table: Callable[[int], object] | None = None,
          clock: Callable[[], float] = time.monotonic) -> str:
    """Follow a run until it ends; return its final status. Lines go to `narrator`; on a terminal the
    `table(run_id)` renderable is drawn live as well."""
    poll = min(1.0, narrator.every / 4)
    progress = ProgressLog(run_id, ledger.run(run_id).config["stages"], narrator.every, clock())
    live = Live(table(run_id), console=narrator.console, refresh_per_second=2) if table and not narrator.plain else None
    if live is not None:
        live.start()
    try:
        while True:
            run = ledger.run(run_id)
            for line in progress.update(run, ledger.steps(run_id), ledger.evals(run_id), clock()):
                narrator.say(line)
            if live is not None:
                live.update(table(run_id))
            if run.status in TERMINAL:
                narrator.say(f"run {run_id} {run.status} after {format_duration(clock() - progress.t0)}"
                             + (f": {run.error}" if run.error else ""))
                return run.status
            time.sleep(poll)
    finally:
        if live is not None:
            live.stop()
