"""Independent work side by side: service calls that do not depend on each other, and the next
step's batch prepared while the current one trains.

`together(calls)` runs callables at once, the first on the calling thread and the others on
threads of their own (gRPC calls wait with the GIL released, so a reward service and a teacher
service score one batch at the same time), and returns their results in order; when one raises,
the others are still waited for (no call is left running behind the phase that made it) and the
first error in call order is raised. `Prefetch` holds batches prepared ahead: `start(key, work)`
runs `work` on a thread, `take(key, work)` returns what that thread made (waiting for it if it is
still running) or runs `work` here when nothing was started or it failed, so a step's batch is the
same whether it was prepared ahead or not. With `concurrent=False` / no `start`, everything runs
in order on the calling thread (OrchestratorSettings.overlap off). This module knows nothing about
steps, services or Celery.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from typing import Any

log = logging.getLogger(__name__)


def _run_into(future: Future, work: Callable[[], Any]) -> None:
    try:
        future.set_result(work())
    except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
        future.set_exception(exc)


def in_thread(work: Callable[[], Any], name: str) -> Future:
    """`work()` started on a daemon thread of its own; its result (or error) through the Future."""
    future: Future = Future()
    threading.Thread(target=_run_into, args=(future, work), name=name, daemon=True).start()
    return future


def together(calls: Sequence[Callable[[], Any]], concurrent: bool = True) -> list[Any]:
    """[call() for call in calls], the calls running at once when `concurrent` (the first here, the
    rest on threads). Every call finishes before this returns; the first error in call order is raised."""
    if not concurrent or len(calls) < 2:
        return [call() for call in calls]
    futures = [in_thread(call, f"overlap-{i}") for i, call in enumerate(calls[1:], start=1)]
    here: Future = Future()
    _run_into(here, calls[0])
    outcomes = [here, *futures]
    for f in outcomes:
        f.exception()  # wait for every call, whatever the others did
    return [f.result() for f in outcomes]


class Prefetch:
    """Work prepared ahead, by key; at most `keep` entries are held (the oldest are dropped)."""

    def __init__(self, keep: int = 4):
        self.keep = keep
        self._lock = threading.Lock()
        self._pending: dict[Hashable, Future] = {}
        self.hits = 0
        """Takes served by a prepared entry (read by tests and benchmarks)."""

    def start(self, key: Hashable, work: Callable[[], Any]) -> None:
        """Prepare `work()` for `key` on a thread, unless it is already prepared or under way."""
        with self._lock:
            if key in self._pending:
                return
            self._pending[key] = in_thread(work, "prefetch")
            while len(self._pending) > self.keep:
                self._pending.pop(next(iter(self._pending)))

    def take(self, key: Hashable, work: Callable[[], Any]) -> Any:
        """What was prepared for `key` (waiting for it when it is still running), else `work()` here.
        A preparation that failed is done again here, so its error (if it persists) is the caller's."""
        with self._lock:
            future = self._pending.pop(key, None)
        if future is not None:
            try:
                value = future.result()
            except Exception as exc:  # noqa: BLE001 - prepared ahead and failed: do it again in line
                log.warning(f"prefetch of {key} failed ({type(exc).__name__}: {exc}); preparing it in line")
            else:
                with self._lock:
                    self.hits += 1
                return value
        return work()

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()


TOKENIZER_LOCK = threading.Lock()
"""Held while a batch is tokenised: a prefetch thread and a task of this process never use the
run's tokenizer at the same time."""
PREFETCH = Prefetch()
"""This process's batches prepared ahead (a worker's next task is usually the next step's)."""
