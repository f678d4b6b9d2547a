"""A pool of worker processes that run pure verifiers under a hard deadline.

math-verify (sympy), JSON Schema regexes and the rest can take unbounded time on adversarial
input, and a Python thread cannot be stopped. So pure verifiers run in worker processes: a call
sends (verifier, task, response, options) to an idle worker and waits up to its deadline; on time-out
the worker is killed and replaced, and the caller gets `TimeoutError`. Workers come from a
`forkserver` that has the verifier modules preloaded, so a replacement starts in milliseconds and
no worker is forked from the threaded service process. This module knows nothing about gRPC.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import threading
from typing import Any

from services.common.errors import InvalidArgument
from services.reward.verifiers.base import Outcome, VerifyFn, VerifyOptions

log = logging.getLogger(__name__)

PRELOAD = ["services.reward.verifiers", "math_verify", "jsonschema", "langdetect"]


def _worker_main(conn) -> None:
    """Serve verification requests on `conn` until it closes."""
    import gc

    from services.reward.verifiers.base import Context

    gc.freeze()  # the preloaded modules are permanent: keep them out of every collection
    conn.send(("ready",))
    while True:
        try:
            fn, task, response, options = conn.recv()
        except (EOFError, OSError):
            return
        try:
            outcome = fn(task, response, Context(options=options))
            conn.send(("ok", outcome))
        except InvalidArgument as exc:
            conn.send(("invalid_argument", exc.field, exc.message))
        except Exception as exc:  # noqa: BLE001 - reported as an `error` verdict by the caller, never lost
            conn.send(("exception", f"{type(exc).__name__}: {exc}"))


class _Worker:
    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.ready = False

    def wait_ready(self, timeout: float) -> None:
        if not self.ready:
            if not self.conn.poll(timeout):
                raise TimeoutError("verifier worker did not start")
            self.conn.recv()
            self.ready = True

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


class DeadlinePool:
    """`workers` processes; `call()` is thread-safe and blocks for an idle worker."""

    def __init__(self, workers: int = 2, start_timeout_s: float = 120.0):
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)
        self.start_timeout_s = start_timeout_s
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: list[_Worker] = []
        self._lock = threading.Lock()
        for _ in range(workers):
            self._add()

    def _add(self) -> None:
        worker = _Worker(self._ctx)
        with self._lock:
            self._all.append(worker)
        self._idle.put(worker)

    def warm_up(self) -> None:
        """Block until every worker has imported the verifiers (call once at service start)."""
        for worker in list(self._all):
            worker.wait_ready(self.start_timeout_s)

    def call(self, fn: VerifyFn, task: Any, response: str, options: VerifyOptions, timeout_s: float) -> Outcome:
        """`fn(task, response, Context(options))` in a worker (`fn` a module-level function, sent by name).

        TimeoutError after `timeout_s` (the worker is replaced); InvalidArgument passes through.
        """
        worker = self._idle.get()
        reply = None
        try:
            worker.wait_ready(self.start_timeout_s)
            worker.conn.send((fn, task, response, options))
            if worker.conn.poll(timeout_s):
                reply = worker.conn.recv()
        except (EOFError, OSError) as exc:  # the worker died (or never started)
            self._replace(worker)
            raise RuntimeError(f"verifier worker died: {exc}") from None
        if reply is None:
            self._replace(worker)
            raise TimeoutError(f"verifier {fn.__name__} ran past {timeout_s:g}s")
        self._idle.put(worker)
        if reply[0] == "invalid_argument":
            raise InvalidArgument(reply[1], reply[2])
        if reply[0] == "exception":
            raise RuntimeError(reply[1])
        return reply[1]

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        with self._lock:
            self._all.remove(worker)
        log.warning("verifier worker replaced", extra={"pid": worker.process.pid})
        self._add()

    def close(self) -> None:
        with self._lock:
            workers, self._all = self._all, []
        for worker in workers:
            worker.kill()
