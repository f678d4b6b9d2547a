"""The code sandbox: runs untrusted programs in real subprocesses, fenced in, and cleans up after.

Each run gets its own session and process group, the fence of `isolation.py` (fresh network and
mount namespaces, rlimits, its own uid in root mode), a scrubbed environment, stdin / stdout /
stderr as files the child cannot reach by path (so a huge output is cut by RLIMIT_FSIZE, not by
our memory), a fresh working directory that is removed afterwards, a wall-clock timeout, and a
sweep that kills and reaps every process it left behind. A pool of `workers` slots bounds how
many runs go at once; a slot owns a uid, so concurrent runs never see each other's processes.

The runs themselves are started by the slot's launcher (`launcher.py`), a single-threaded
process: no Python ever runs between fork and exec in this (threaded) process. A launcher that
dies or hangs is replaced and the run raises `SandboxFailure` — an infrastructure failure the
verifiers report as an `error` verdict, never as the candidate's crash.

When the fence cannot be built (no root, no namespaces) `Sandbox.isolation` is `"none"` and runs
are refused unless `allow_unisolated=True`; the service logs that loudly at start. This module
knows nothing about tasks, verifiers or gRPC.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path

from services.common.errors import FailedPrecondition
from services.common.sandbox.isolation import SCRATCH_DIRS, Limits
from services.common.sandbox.launcher import RunRequest, RunResult

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0
"""How long a new launcher may take to import and say it is ready."""
REPLY_SLACK_S = 30.0
"""Time a launcher gets beyond the run's wall limit (directory, sweep, cleanup) before it counts as hung."""
_PROJECT = str(Path(__file__).resolve().parents[3])
_BOOT = f"import sys; sys.path.insert(0, {_PROJECT!r}); from services.common.sandbox.launcher import main; main()"


UID_BLOCK = 64
"""uids per sandbox (at most 64 slots)."""


def uid_block(pid: int) -> int:
    """The first uid of this process's sandbox slots: 100000 + 64 * (pid mod 30000).

    Two reward services on one host must never share a slot uid: the sweep kills every process of
    the uid and RLIMIT_NPROC counts them all, so one service would kill or starve the other's runs.
    Live processes have distinct pids, hence distinct blocks (pids wrap at 2^22; mod 30000 keeps
    collisions to pids 30000 apart, which a host running two services at once does not meet in practice).
    """
    return 100_000 + UID_BLOCK * (pid % 30_000)


class SandboxFailure(RuntimeError):
    """The sandbox, not the candidate, failed: the launcher died or hung, or the fence did not come up."""


class _Launcher:
    """The service's end of one launcher process; used by one thread at a time (its slot's holder)."""

    def __init__(self):
        ours, theirs = socket.socketpair()
        with theirs:
            # no preexec_fn: a plain fork+exec, nothing of ours runs in the child before exec
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _BOOT, str(theirs.fileno())], pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.conn = Connection(ours.detach())
        self.ready = False

    def call(self, request: RunRequest, timeout_s: float) -> tuple:
        """Send `request`, wait up to `timeout_s` for the reply; EOFError/OSError/TimeoutError if it died or hung."""
        if not self.ready:
            if not self.conn.poll(START_TIMEOUT_S):
                raise TimeoutError(f"launcher did not start within {START_TIMEOUT_S:g}s")
            self.conn.recv()
            self.ready = True
        self.conn.send(request)
        if not self.conn.poll(timeout_s):
            raise TimeoutError(f"launcher gave no answer within {timeout_s:g}s")
        return self.conn.recv()

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.conn.close()

    def close(self, timeout_s: float = 5.0) -> None:
        """Close the socket (the launcher exits when its current run is done); kill it past `timeout_s`."""
        self.conn.close()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class _Slot:
    """A pool slot: the uid its runs get (None when unisolated) and the launcher that starts them."""

    uid: int | None
    launcher: _Launcher


def default_root() -> Path:
    """Where run directories go: outside the scratch dirs that root mode hides behind tmpfs."""
    return Path("/var/lib/cascade/sandbox") if os.geteuid() == 0 else Path(tempfile.gettempdir()) / "cascade-sandbox"


class Sandbox:
    """A pool of `workers` sandbox slots. `run()` is thread-safe and blocks for a free slot."""

    def __init__(
        self,
        workers: int = 2,
        limits: Limits | None = None,
        python: str | None = None,
        root: Path | None = None,
        base_uid: int | None = None,
        allow_unisolated: bool = False,
        on_run: Callable[[RunResult], None] | None = None,
    ):
        self.limits, self.allow_unisolated, self.on_run = limits or Limits(), allow_unisolated, on_run
        self.root = Path(root) if root else default_root()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o711)
        os.chmod(self.root, 0o711)
        self._closed = False
        base_uid = uid_block(os.getpid()) if base_uid is None else base_uid
        self._all = [_Slot(base_uid + i, _Launcher()) for i in range(workers)]
        self.isolation, self.problem = self._probe()
        if self.isolation != "namespace":
            for slot in self._all:
                slot.uid = None
        self.python = python or self._pick_python()
        self._slots: queue.Queue[_Slot] = queue.Queue()
        for slot in self._all:
            self._slots.put(slot)

    def _probe(self) -> tuple[str, str]:
        """Try the full fence once on `true`; ("namespace", "") or ("none", why)."""
        if os.geteuid() != 0:
            return "none", "not running as root: no network namespace, no per-run uid"
        resolved = self.root.resolve()
        for d in SCRATCH_DIRS:
            if resolved.is_relative_to(Path(d).resolve()):
                raise FailedPrecondition(f"sandbox root {resolved} is under {d}, which runs hide behind a tmpfs")
        try:
            result = self._call(self._all[0], self._request(["true"], limits=replace(self.limits, wall_s=10)))
        except SandboxFailure as exc:
            return "none", f"namespace fence unavailable: {exc}"
        if not result.ok:
            return "none", f"namespace fence unavailable: `true` ended with {result.signal_name or result.returncode}"
        return "namespace", ""

    def _pick_python(self) -> str:
        """The first interpreter the sandbox uid can run: ours, else the system's (ours may sit in /root)."""
        candidates = [sys.executable, "/usr/local/bin/python3", "/usr/bin/python3"]
        if self.isolation != "namespace":
            return sys.executable
        for exe in candidates:
            try:
                result = self._call(self._all[0], self._request([exe, "-c", "pass"], limits=replace(self.limits, wall_s=10)))
            except SandboxFailure:
                continue
            if not result.ok:
                continue
            if exe != sys.executable:
                log.warning("sandbox uses another interpreter than the service's", extra={"python": exe})
            return exe
        raise FailedPrecondition(f"no Python the sandbox uid may run among {candidates}; set sandbox_python")

    @property
    def launcher_pids(self) -> list[int]:
        """Process ids of the slots' launchers (for monitoring and tests)."""
        return [slot.launcher.process.pid for slot in self._all]

    @property
    def usable(self) -> bool:
        return self.isolation == "namespace" or self.allow_unisolated

    def run(
        self,
        argv: list[str],
        stdin: str | bytes = b"",
        files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None,
        pythonpath: list[str] | None = None,
    ) -> RunResult:
        """Run `argv` (`{python}` is replaced by the sandbox interpreter) in a fresh directory holding `files`.

        `pythonpath` entries (read-only directories of ours, e.g. where pytest lives) go on PYTHONPATH.
        ValueError for a file path leaving the directory; SandboxFailure when the sandbox itself failed.
        """
        if not self.usable:
            raise FailedPrecondition(f"sandbox refuses to run untrusted code: {self.problem}")
        argv = [self.python if a == "{python}" else a for a in argv]
        request = self._request(argv, stdin, files or {}, limits or self.limits, pythonpath or [])
        slot = self._slots.get()
        try:
            result = self._call(slot, request)
        finally:
            self._slots.put(slot)
        if self.on_run is not None:
            self.on_run(result)
        return result

    def run_python(self, code: str, stdin: str | bytes = b"", files: Mapping[str, str | bytes] | None = None,
                   limits: Limits | None = None) -> RunResult:
        """Run `code` as `main.py` with the sandbox interpreter (no user site, no PYTHON* env)."""
        return self.run(["{python}", "-E", "-s", "main.py"], stdin, {**(files or {}), "main.py": code}, limits)

    def _request(self, argv, stdin: str | bytes = b"", files: Mapping[str, str | bytes] | None = None,
                 limits: Limits | None = None, pythonpath: list[str] | None = None) -> RunRequest:
        def as_bytes(x: str | bytes) -> bytes:
            return x.encode() if isinstance(x, str) else x

        return RunRequest(argv=list(argv), root=str(self.root), limits=limits or self.limits,
                          stdin=as_bytes(stdin), files={k: as_bytes(v) for k, v in (files or {}).items()},
                          pythonpath=list(pythonpath or []))

    def _call(self, slot: _Slot, request: RunRequest) -> RunResult:
        """`request` run as the slot's uid: the launcher's answer as a RunResult; replaces a launcher
        that died or hung (the caller holds the slot)."""
        try:
            reply = slot.launcher.call(replace(request, uid=slot.uid), request.limits.wall_s + REPLY_SLACK_S)
        except (EOFError, OSError, TimeoutError) as exc:
            slot.launcher.kill()
            if not self._closed:
                log.error("sandbox launcher failed, replacing it", extra={"uid": slot.uid, "error": str(exc)})
                slot.launcher = _Launcher()
            raise SandboxFailure(f"sandbox launcher died or hung ({type(exc).__name__}: {exc}); run not judged") from None
        kind, *rest = reply
        if kind == "invalid":
            raise ValueError(rest[0])
        if kind == "failed":
            raise SandboxFailure(rest[0])
        result, left = rest
        if left:
            log.error("sandbox processes survived the sweep", extra={"pids": left, "uid": slot.uid})
        return result

    def with_limits(self, **changes) -> Limits:
        return replace(self.limits, **changes)

    def close(self) -> None:
        """Stop the launchers (each finishes its current run first); later runs get SandboxFailure."""
        self._closed = True
        for slot in self._all:
            slot.launcher.close()
