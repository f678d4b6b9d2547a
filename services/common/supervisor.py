"""Run a set of local processes (services, workers) and keep them alive.

Used by `cascade up`, `cascade demo` and the end-to-end tests. Each `ProcessSpec` is a command
line plus environment; the supervisor starts it in its own process group with its output in a
log file, waits until it is ready (a gRPC health check says SERVING, or a TCP port opens),
restarts it with backoff when it dies unexpectedly, and on stop sends SIGTERM to each group,
then SIGKILL after a grace period. It knows nothing about what the processes do.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


_handed_out: set[int] = set()
_port_lock = threading.Lock()


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the source ports of outgoing connections (Linux default 32768-60999)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free now, drawn below the ephemeral range and never handed out twice by this process.

    `bind(0)` would pick from the ephemeral range, where every outgoing connection of the running
    services also takes its source port: a port reserved for a service that starts a minute later
    can be taken by then ("Address already in use"). Ports below the range are taken only by listeners.
    """
    import random

    low, _high = _ephemeral_range()
    start = 20000 if low > 21000 else 1024
    with _port_lock:
        for _ in range(500):
            port = random.randrange(start, low)
            if port in _handed_out:
                continue
            with socket.socket() as s:
                try:
                    s.bind((host, port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
        with socket.socket() as s:  # a crowded range: the kernel's choice
            s.bind((host, 0))
            return s.getsockname()[1]


@dataclass
class ProcessSpec:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    grpc_address: str | None = None
    """When set, ready means the gRPC health check of this address answers SERVING."""
    http_port: int | None = None
    """When set (and no grpc_address), ready means this loopback port accepts connections."""
    restart: bool = True
    ready_timeout: float = 180.0


@dataclass
class _Running:
    spec: ProcessSpec
    proc: subprocess.Popen
    log_path: Path
    restarts: int = 0
    died_at: float | None = None


class Supervisor:
    """Start, watch and stop local processes. Thread-safe; use as a context manager."""

    def __init__(self, log_dir: Path, max_restarts: int = 5):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.max_restarts = max_restarts
        self._procs: dict[str, _Running] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    def start(self, spec: ProcessSpec, wait: bool = True) -> None:
        """Start one process (and, with `wait`, block until it is ready)."""
        with self._lock:
            if self._stopping.is_set():  # stop() has taken its list: a process started now would be missed
                raise RuntimeError(f"not starting {spec.name!r}: the supervisor is stopping")
            if spec.name in self._procs:
                raise ValueError(f"process {spec.name!r} already started")
            self._procs[spec.name] = self._spawn(spec)
        if wait:
            self.wait_ready(spec.name)
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="supervisor", daemon=True)
            self._watcher.start()

    def _spawn(self, spec: ProcessSpec, restarts: int = 0) -> _Running:
        log_path = self.log_dir / f"{spec.name}.log"
        out = log_path.open("ab")
        env = {**os.environ, **spec.env}
        proc = subprocess.Popen(spec.argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        log.info("started", extra={"proc_name": spec.name, "pid": proc.pid, "log": str(log_path)})
        return _Running(spec, proc, log_path, restarts)

    def start_all(self, specs: list[ProcessSpec]) -> None:
        """Start `specs` in parallel (models load side by side) and wait until every one is ready;
        if any fails, stop all of them and raise its error — nothing is left running."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max(1, len(specs))) as pool:
            futures = [pool.submit(self.start, spec) for spec in specs]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            self.stop(grace=5)
            raise errors[0]

    def wait_ready(self, name: str) -> None:
        """Block until `name` is ready; raise RuntimeError (with its log tail) if it dies or times out.
        A gRPC service tells when it is (await_serving: its health pushed, not polled)."""
        run = self._procs[name]
        spec = run.spec
        if spec.grpc_address:
            outcome = await_serving(spec.grpc_address, run.proc, spec.ready_timeout)
            if outcome == "exited":
                raise RuntimeError(f"{name} exited with code {run.proc.wait()}: {self.tail(name)}")
            if outcome == "timeout":
                raise RuntimeError(f"{name} not ready after {spec.ready_timeout:.0f}s: {self.tail(name)}")
            if outcome == "serving":
                return
        deadline = time.monotonic() + spec.ready_timeout
        while time.monotonic() < deadline:  # a TCP port (or a server without health Watch): nothing to wait on
            if run.proc.poll() is not None:
                raise RuntimeError(f"{name} exited with code {run.proc.returncode}: {self.tail(name)}")
            if self._is_ready(spec):
                return
            time.sleep(0.2)
            run = self._procs[name]
        raise RuntimeError(f"{name} not ready after {spec.ready_timeout:.0f}s: {self.tail(name)}")

    @staticmethod
    def _is_ready(spec: ProcessSpec) -> bool:
        if spec.grpc_address:
            import grpc
            from grpc_health.v1 import health_pb2, health_pb2_grpc

            try:
                with grpc.insecure_channel(spec.grpc_address) as ch:
                    reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                return reply.status == health_pb2.HealthCheckResponse.SERVING
            except grpc.RpcError:
                return False
        if spec.http_port:
            try:
                with socket.create_connection(("127.0.0.1", spec.http_port), timeout=0.5):
                    return True
            except OSError:
                return False
        return True

    def tail(self, name: str, lines: int = 15) -> str:
        """The last lines of a process's log, joined with ' | ' for one-line errors."""
        path = self._procs[name].log_path
        text = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
        return " | ".join(text[-lines:]) or "(no output)"

    def _watch(self) -> None:
        while not self._stopping.wait(0.5):
            with self._lock:
                for name, run in list(self._procs.items()):
                    code = run.proc.poll()
                    if code is None or not run.spec.restart or self._stopping.is_set():
                        continue
                    if run.restarts >= self.max_restarts:
                        log.error(f"{name} (pid {run.proc.pid}) exited with {exit_text(code)}; gave up after "
                                  f"{run.restarts} restarts", extra={"proc_name": name, "pid": run.proc.pid, "code": code})
                        run.spec.restart = False
                        continue
                    now = time.monotonic()
                    run.died_at = run.died_at or now
                    if now - run.died_at < min(0.5 * 2.0**run.restarts, 10.0):  # backoff
                        continue
                    fresh = self._spawn(run.spec, run.restarts + 1)
                    self._procs[name] = fresh
                    log.warning(f"{name} (pid {run.proc.pid}) exited with {exit_text(code)}; restarted as pid "
                                f"{fresh.proc.pid} (restart {fresh.restarts} of {self.max_restarts})",
                                extra={"proc_name": name, "pid": run.proc.pid, "code": code,
                                       "new_pid": fresh.proc.pid, "restarts": fresh.restarts})

    def pid(self, name: str) -> int:
        return self._procs[name].proc.pid

    def pids(self) -> dict[str, int]:
        """name -> pid of every process, in start order."""
        with self._lock:
            return {name: run.proc.pid for name, run in self._procs.items()}

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to a process group (fault injection: the watcher restarts it)."""
        os.killpg(self._procs[name].proc.pid, sig)

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM every process group, wait up to `grace`, then SIGKILL what is left."""
        self._stopping.set()
        with self._lock:
            runs = list(self._procs.values())
        for run in reversed(runs):
            _signal_group(run.proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for run in runs:
            try:
                run.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(run.proc, signal.SIGKILL)
                run.proc.wait(5)
        for run in runs:  # children left in a group outlive their leader; take them too
            _signal_group(run.proc, signal.SIGKILL)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


RECONNECT_MS = (("grpc.initial_reconnect_backoff_ms", 50), ("grpc.min_reconnect_backoff_ms", 50),
                ("grpc.max_reconnect_backoff_ms", 250))
"""Until a starting server listens, its channel reconnects every 50-250 ms (gRPC's default backoff
grows to minutes: a service that binds late would be seen ready long after it is)."""


def await_serving(address: str, proc: subprocess.Popen, timeout: float) -> str:
    """Block until the gRPC server at `address` says SERVING, `proc` (the server) exits, or `timeout`
    seconds pass: "serving" | "exited" | "timeout" | "poll" (no health Watch, or the stream broke off:
    the caller checks by polling instead).

    The server's health service pushes every status change on a Watch stream, so readiness is known
    the moment it is set; a thread blocked on the process's pidfd cancels the stream if it exits."""
    import select

    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    try:
        pidfd = os.pidfd_open(proc.pid)
    except ProcessLookupError:
        return "exited"
    wake_r, wake_w = os.pipe()
    exited = threading.Event()
    with grpc.insecure_channel(address, options=list(RECONNECT_MS)) as channel:
        call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=timeout,
                                                         wait_for_ready=True)

        def on_exit() -> None:
            ready, _, _ = select.select([pidfd, wake_r], [], [])
            if pidfd in ready:
                exited.set()
                call.cancel()

        watcher = threading.Thread(target=on_exit, name="await-serving", daemon=True)
        watcher.start()
        try:
            for reply in call:
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return "serving"
            return "exited" if exited.is_set() else "poll"  # the stream ended: the server is stopping
        except grpc.RpcError as err:
            if exited.is_set():
                return "exited"
            return "timeout" if err.code() == grpc.StatusCode.DEADLINE_EXCEEDED else "poll"
        finally:
            os.write(wake_w, b"x")
            watcher.join()
            for fd in (pidfd, wake_r, wake_w):
                os.close(fd)


def exit_text(code: int) -> str:
    """`code 1`, or `signal 9 (SIGKILL)` for a process a signal ended (Popen's negative return codes)."""
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def python_module(module: str, *args: str) -> list[str]:
    """argv running `python -m module args` with this interpreter."""
    return [sys.executable, "-m", module, *args]
