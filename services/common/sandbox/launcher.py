"""The sandbox launcher: a single-threaded process that starts one fenced run at a time.

Why it exists: the fence of `isolation.py` is set up by Python code running between fork() and
exec(), which is only safe in a process with one thread. The reward service has many (gRPC's,
the scoring threads'); a child forked there inherits their locks and gRPC's fork handlers, and
in a busy service about 1-3 % of runs died by SIGABRT before the candidate's program started
(gRPC's poller, restarted in the child, hit the epoll fd that close_fds had closed) — scored as
the candidate's crash. So each sandbox slot owns a launcher. The service starts it with a plain
fork+exec (no Python in between), it imports only the standard library and `isolation`, and it
serves requests one at a time on a socket: make the run directory, start the program behind the
fence, wait up to the wall timeout, sweep every survivor (it is their subreaper), remove the
directory, answer with a `RunResult`.

A run whose own process died before the fence was complete, or whose program could not be
started, is answered as a failure of the launch, never as a RunResult: that is our fault, not
the candidate's. This module knows nothing about pools, verifiers or gRPC.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

from services.common.sandbox.isolation import Limits, become_subreaper, build_preexec, sweep

READ_CAP = 1 << 20


@dataclass(frozen=True)
class RunRequest:
    """One program to run: what the service sends to a launcher."""

    argv: list[str]
    root: str
    """Directory the run's own directory is made in (and removed from afterwards)."""
    limits: Limits
    uid: int | None = None
    """The slot's uid (namespace mode) or None (unisolated: rlimits and own session only)."""
    stdin: bytes = b""
    files: dict[str, bytes] = field(default_factory=dict)
    """Relative path -> content, written into the working directory, owned by `uid`."""
    pythonpath: list[str] = field(default_factory=list)


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


class LaunchFailed(Exception):
    """The run never became the candidate's program: fence setup failed or died, or exec failed."""


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


def execute(req: RunRequest) -> tuple[RunResult, list[int]]:
    """Run `req` in a fresh directory; (result, pids the sweep could not kill — should be none).

    ValueError for a file path that leaves the working directory; LaunchFailed as above.
    """
    base = Path(tempfile.mkdtemp(prefix="run-", dir=req.root))
    os.chmod(base, 0o711)  # the run uid may pass through to work/, never list or enter io/
    work, io = base / "work", base / "io"
    try:
        work.mkdir(mode=0o700)
        io.mkdir(mode=0o700)
        _write_files(work, req.files, req.uid)
        (io / "stdin").write_bytes(req.stdin)
        env = scrubbed_env(str(work))
        if req.pythonpath:
            env["PYTHONPATH"] = os.pathsep.join(req.pythonpath)
        with open(io / "stdin", "rb") as fin, open(io / "stdout", "wb+") as fout, open(io / "stderr", "wb+") as ferr:
            return _start_and_wait(req, work, env, (fin, fout, ferr))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _start_and_wait(req: RunRequest, work: Path, env: dict[str, str], stdio) -> tuple[RunResult, list[int]]:
    fin, fout, ferr = stdio
    ready_r, ready_w = os.pipe()  # close-on-exec: the child's copy closes when its program starts
    try:
        start = time.perf_counter()
        try:
            proc = subprocess.Popen(
                req.argv, cwd=work, env=env, stdin=fin, stdout=fout, stderr=ferr,
                start_new_session=True, close_fds=True,
                preexec_fn=build_preexec(req.limits, req.uid, ready_w),  # noqa: PLW1509 - this process has one thread
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise LaunchFailed(f"could not start {req.argv[0]!r}: {type(exc).__name__}: {exc}") from None
        os.close(ready_w)
        ready_w = -1
        timed_out = not _wait_exit(proc, req.limits.wall_s)
        if timed_out:
            _killpg(proc.pid)
        proc.wait()
        seen, left = sweep(req.uid, proc.pid)
        _reap_children()
        result = RunResult(proc.returncode, _read(fout), _read(ferr), timed_out, time.perf_counter() - start, len(seen))
        if not _fenced(ready_r):
            how = "it timed out" if timed_out else f"status {result.signal_name or result.returncode}"
            raise LaunchFailed(f"the run's process ended before its program started ({how}): fence setup failed")
        return result, left
    finally:
        os.close(ready_r)
        if ready_w >= 0:
            os.close(ready_w)


def _fenced(ready_r: int) -> bool:
    """Whether the preexec wrote its last byte (every writer is closed by now: no blocking)."""
    os.set_blocking(ready_r, False)
    try:
        return os.read(ready_r, 1) == b"\1"
    except BlockingIOError:
        return False


def _write_files(work: Path, files: dict[str, bytes], uid: int | None) -> None:
    """Write `files` (relative paths only) under `work`, owned by the run's uid."""
    for rel, content in files.items():
        path = (work / rel).resolve()
        if not path.is_relative_to(work.resolve()) or Path(rel).is_absolute():
            raise ValueError(f"file path {rel!r} leaves the working directory")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
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


def _reap_children() -> None:
    """Collect every exited child: orphans that left the run's session re-parent to us (subreaper)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _read(f) -> str:
    f.seek(0)
    return f.read(READ_CAP).decode("utf-8", errors="replace")


def answer(req: RunRequest) -> tuple:
    """The reply to one request: ("ok", RunResult, unkilled pids) | ("invalid" | "failed", why)."""
    try:
        return ("ok", *execute(req))
    except ValueError as exc:
        return ("invalid", str(exc))
    except LaunchFailed as exc:
        return ("failed", str(exc))
    except Exception as exc:  # noqa: BLE001 - e.g. no space for the run directory: the service reports it
        return ("failed", f"launcher: {type(exc).__name__}: {exc}")


def serve(conn: Connection) -> None:
    """Answer requests on `conn` until it closes. A slot's uid is swept once before its first run:
    whatever a crashed predecessor of this launcher left running is killed."""
    become_subreaper()
    cleared: set[int] = set()
    conn.send(("ready", os.getpid()))
    while True:
        try:
            req = conn.recv()
        except (EOFError, OSError):
            return
        if req.uid is not None and req.uid not in cleared:
            sweep(req.uid, None)
            cleared.add(req.uid)
        conn.send(answer(req))


def main() -> None:
    """Entry point: `python -c '...main()' FD`, FD the launcher's end of a socket pair. The launcher
    runs in a session of its own, so it outlives a signal to the service's process group by the
    rest of its current run (cleaned up), then sees the socket close and exits."""
    serve(Connection(int(sys.argv[1])))
