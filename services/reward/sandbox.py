"""The code sandbox: runs untrusted programs in real subprocesses, fenced in, and cleans up after.

Each run gets its own session and process group, the fence of `isolation.py` (fresh network and
mount namespaces, rlimits, its own uid in root mode), a scrubbed environment, stdin / stdout /
stderr as files the child cannot reach by path (so a huge output is cut by RLIMIT_FSIZE, not by
our memory), a fresh working directory that is removed afterwards, a wall-clock timeout, and a
sweep that kills and reaps every process it left behind. A pool of `workers` slots bounds how
many runs go at once; a slot owns a uid, so concurrent runs never see each other's processes.

When the fence cannot be built (no root, no namespaces) `Sandbox.isolation` is `"none"` and runs
are refused unless `allow_unisolated=True`; the service logs that loudly at start. This module
knows nothing about tasks, verifiers or gRPC.
"""

from __future__ import annotations

import logging
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from services.common.errors import FailedPrecondition
from services.reward.isolation import SCRATCH_DIRS, Limits, become_subreaper, build_preexec, sweep

log = logging.getLogger(__name__)

READ_CAP = 1 << 20


@dataclass(frozen=True)
class RunResult:
    """What one sandboxed run did."""

    returncode: int | None
    """Exit status; negative = killed by that signal (Popen convention)."""
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float
    survivors: int = 0
    """Processes the sweep had to kill after the main process ended (daemons, orphans)."""

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def scrubbed_env(home: str) -> dict[str, str]:
    """The whole environment a sandboxed program sees: nothing of the service's."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        "PYTHONUNBUFFERED": "1",
    }


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
        base_uid: int = 61000,
        allow_unisolated: bool = False,
        on_run: Callable[[RunResult], None] | None = None,
    ):
        self.limits, self.allow_unisolated, self.on_run = limits or Limits(), allow_unisolated, on_run
        self.root = Path(root) if root else default_root()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o711)
        os.chmod(self.root, 0o711)
        self.isolation, self.problem = self._probe(base_uid)
        if self.isolation == "namespace":
            become_subreaper()
        self.python = python or self._pick_python(base_uid)
        self._slots: queue.Queue[int | None] = queue.Queue()
        for i in range(workers):
            self._slots.put(base_uid + i if self.isolation == "namespace" else None)

    def _probe(self, base_uid: int) -> tuple[str, str]:
        """Try the full fence once on `true`; ("namespace", "") or ("none", why)."""
        if os.geteuid() != 0:
            return "none", "not running as root: no network namespace, no per-run uid"
        resolved = self.root.resolve()
        for d in SCRATCH_DIRS:
            if resolved.is_relative_to(Path(d).resolve()):
                raise FailedPrecondition(f"sandbox root {resolved} is under {d}, which runs hide behind a tmpfs")
        try:
            subprocess.run(["true"], preexec_fn=build_preexec(self.limits, base_uid), check=True,
                           start_new_session=True, timeout=10, env=scrubbed_env("/"), cwd="/")
        except (OSError, subprocess.SubprocessError) as exc:
            return "none", f"namespace fence unavailable: {exc}"
        return "namespace", ""

    def _pick_python(self, base_uid: int) -> str:
        """The first interpreter the sandbox uid can run: ours, else the system's (ours may sit in /root)."""
        candidates = [sys.executable, "/usr/local/bin/python3", "/usr/bin/python3"]
        if self.isolation != "namespace":
            return sys.executable
        for exe in candidates:
            try:
                subprocess.run([exe, "-c", "pass"], preexec_fn=build_preexec(self.limits, base_uid), check=True,
                               start_new_session=True, timeout=10, env=scrubbed_env("/"), cwd="/",
                               stderr=subprocess.DEVNULL)
            except (OSError, subprocess.SubprocessError):
                continue
            if exe != sys.executable:
                log.warning("sandbox uses another interpreter than the service's", extra={"python": exe})
            return exe
        raise FailedPrecondition(f"no Python the sandbox uid may run among {candidates}; set sandbox_python")

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
        """
        if not self.usable:
            raise FailedPrecondition(f"sandbox refuses to run untrusted code: {self.problem}")
        uid = self._slots.get()
        try:
            return self._run(argv, stdin, files or {}, limits or self.limits, uid, pythonpath or [])
        finally:
            self._slots.put(uid)

    def run_python(self, code: str, stdin: str | bytes = b"", files: Mapping[str, str | bytes] | None = None,
                   limits: Limits | None = None) -> RunResult:
        """Run `code` as `main.py` with the sandbox interpreter (no user site, no PYTHON* env)."""
        return self.run(["{python}", "-E", "-s", "main.py"], stdin, {**(files or {}), "main.py": code}, limits)

    def _run(self, argv, stdin, files, limits: Limits, uid: int | None, pythonpath: list[str]) -> RunResult:
        base = Path(tempfile.mkdtemp(prefix="run-", dir=self.root))
        os.chmod(base, 0o711)  # the run uid may pass through to work/, never list or enter io/
        work, io = base / "work", base / "io"
        try:
            work.mkdir(mode=0o700)
            io.mkdir(mode=0o700)
            _write_files(work, files, uid)
            (io / "stdin").write_bytes(stdin.encode() if isinstance(stdin, str) else stdin)
            argv = [self.python if a == "{python}" else a for a in argv]
            env = scrubbed_env(str(work))
            if pythonpath:
                env["PYTHONPATH"] = os.pathsep.join(pythonpath)
            start = time.perf_counter()
            with open(io / "stdin", "rb") as fin, open(io / "stdout", "wb+") as fout, open(io / "stderr", "wb+") as ferr:
                proc = subprocess.Popen(
                    argv, cwd=work, env=env, stdin=fin, stdout=fout, stderr=ferr,
                    start_new_session=True, close_fds=True,
                    preexec_fn=build_preexec(limits, uid),  # noqa: PLW1509 - async-signal-safe calls only, see isolation.py
                )
                timed_out = not _wait_exit(proc, limits.wall_s)
                if timed_out:
                    _killpg(proc.pid)
                proc.wait()
                seen, left = sweep(uid, proc.pid)
                if left:
                    log.error("sandbox processes survived the sweep", extra={"pids": left, "uid": uid})
                seconds = time.perf_counter() - start
                result = RunResult(proc.returncode, _read(fout), _read(ferr), timed_out, seconds, len(seen))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        if self.on_run is not None:
            self.on_run(result)
        return result

    def with_limits(self, **changes) -> Limits:
        return replace(self.limits, **changes)


def _write_files(work: Path, files: Mapping[str, str | bytes], uid: int | None) -> None:
    """Write `files` (relative paths only) under `work`, owned by the run's uid."""
    for rel, content in files.items():
        path = (work / rel).resolve()
        if not path.is_relative_to(work.resolve()) or Path(rel).is_absolute():
            raise ValueError(f"file path {rel!r} leaves the working directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    if uid is not None:
        for dirpath, _dirnames, filenames in os.walk(work):
            os.chown(dirpath, uid, uid)
            for name in filenames:
                os.chown(os.path.join(dirpath, name), uid, uid)


def _wait_exit(proc: subprocess.Popen, timeout: float) -> bool:
    """Whether `proc` exits within `timeout` s. A pidfd wakes us the moment it does; Popen.wait's
    polling sleeps up to 50 ms and would dominate the cost of a short run."""
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _read(f) -> str:
    f.seek(0)
    return f.read(READ_CAP).decode("utf-8", errors="replace")
