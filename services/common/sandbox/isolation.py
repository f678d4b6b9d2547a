"""How a sandboxed child is fenced in, and how every process it left behind is found and killed.

Root mode (the service runs as root, the deployment default): the child gets a fresh network
namespace (no interface but a downed loopback: nothing to connect to), a private mount namespace
with fresh small tmpfs over /tmp, /var/tmp and /dev/shm (writes there vanish with the run), the
rlimits of `Limits`, no supplementary groups, `no_new_privs` (setuid binaries cannot raise it), and
then drops to a uid of its own (one per pool slot, `base_uid + slot`). That uid is what makes the
limits hold: RLIMIT_NPROC counts processes per uid (root is exempt, which is why we leave root),
files outside the working directory are not writable, the service's /proc/PID/environ is not
readable, and `sweep()` finds every survivor by uid — even one that called setsid() or
double-forked away from the process group. Worst-case memory of one run is nproc x memory_mb.

Unisolated mode (not root and `allow_unisolated`): rlimits, own session and process group, and a
sweep by session id; no network fence and a child that leaves its session escapes the sweep.

The preexec function is Python code that runs between fork and exec, which is only safe in a
process with a single thread: call `build_preexec` only in the sandbox launcher (`launcher.py`),
never in the threaded service. It calls pre-bound C functions and `os`/`resource` wrappers only (no
imports, locks or logging), sets RLIMIT_AS last (the child still maps the launcher's memory: any
allocation after it could fail), and then marks on `ready_fd` that the fence is complete, so a
child that dies before that is told apart from a candidate's program that crashed.
This module knows nothing about verifiers, pools or gRPC.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import time
from dataclasses import dataclass

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36
SCRATCH_DIRS = ("/tmp", "/var/tmp", "/dev/shm")

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed run."""

    cpu_s: int = 5
    """RLIMIT_CPU: CPU seconds per process (SIGXCPU at cpu_s, SIGKILL one second later)."""
    memory_mb: int = 512
    """RLIMIT_AS: address space per process, MiB."""
    nproc: int = 32
    """RLIMIT_NPROC: processes of the run's uid at once (root mode only; root is exempt)."""
    fsize_mb: int = 16
    """RLIMIT_FSIZE: largest file a process may write, MiB (stdout and stderr included)."""
    nofile: int = 64
    """RLIMIT_NOFILE: open file descriptors per process."""
    wall_s: float = 10.0
    """Wall-clock seconds before the whole run is killed."""


def _rlimits(limits: Limits) -> list[tuple[int, int]]:
    """(resource, soft limit) pairs, RLIMIT_AS last: the preexec sets them in this order."""
    mib = 1024 * 1024
    return [
        (resource.RLIMIT_CPU, limits.cpu_s),
        (resource.RLIMIT_NPROC, limits.nproc),
        (resource.RLIMIT_FSIZE, limits.fsize_mb * mib),
        (resource.RLIMIT_NOFILE, limits.nofile),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_AS, limits.memory_mb * mib),
    ]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise OSError(ctypes.get_errno(), f"{what} failed: {os.strerror(ctypes.get_errno())}")


def build_preexec(limits: Limits, uid: int | None, ready_fd: int | None = None):
    """The function the child runs before exec; `uid=None` means unisolated (rlimits only).

    Its last act writes one byte to `ready_fd` (when given): the fence is complete, what dies
    after that is the program. Call it in a single-threaded process only (see the module doc).
    """
    rlimits = [(k, v, v + 1 if k == resource.RLIMIT_CPU else v) for k, v in _rlimits(limits)]
    *early, address_space = rlimits
    unshare, mount, prctl = _libc.unshare, _libc.mount, _libc.prctl
    scratch = [d.encode() for d in SCRATCH_DIRS if os.path.isdir(d)]
    tmpfs_opts = f"size={min(limits.fsize_mb, 64)}m,mode=1777".encode()
    no_groups: list[int] = []
    as_kind, as_limits = address_space[0], address_space[1:]
    ready = b"\1"

    def preexec() -> None:
        if uid is not None:
            _check(unshare(CLONE_NEWNET | CLONE_NEWNS), "unshare(net, mount)")
            _check(mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
            for d in scratch:
                _check(mount(b"tmpfs", d, b"tmpfs", MS_NOSUID | MS_NODEV, tmpfs_opts), "mount tmpfs")
        for kind, soft, hard in early:
            resource.setrlimit(kind, (soft, hard))
        if uid is not None:
            os.setgroups(no_groups)
            os.setgid(uid)
            os.setuid(uid)
        _check(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")
        resource.setrlimit(as_kind, as_limits)  # last: from here on nothing may allocate
        if ready_fd is not None:
            os.write(ready_fd, ready)

    return preexec


def _status_fields(pid: str) -> tuple[int, int, str, int] | None:
    """(real uid, session id, state, parent pid) of a /proc entry, or None when it vanished."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open(f"/proc/{pid}/status", "rb") as f:
            status = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(b")") + 2 :].split()
    uid_line = status[status.index(b"\nUid:") + 5 :].split(None, 1)[0]
    return int(uid_line), int(fields[3]), fields[0].decode(), int(fields[1])


def find_processes(uid: int | None, sid: int | None) -> list[tuple[int, str, int]]:
    """(pid, state, parent pid) of the processes owned by `uid` (root mode) or else in session `sid`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        info = _status_fields(name)
        if info is None:
            continue
        puid, psid, state, ppid = info
        if (uid is not None and puid == uid) or (uid is None and sid is not None and psid == sid):
            found.append((int(name), state, ppid))
    return found


def become_subreaper() -> bool:
    """Make orphans of our runs re-parent to this process (not PID 1), so `sweep` reaps them at once."""
    return _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def sweep(uid: int | None, sid: int | None, deadline_s: float = 5.0) -> tuple[set[int], list[int]]:
    """SIGKILL every process of the run until none is left; reap the zombies that became ours.

    Call it after the run's main process has been reaped. A zombie whose parent is this process is
    reaped; one whose parent is PID 1 is dead and left to init; one whose parent is still exiting
    is waited for (it is re-parented to us, the subreaper, a moment later). The /proc listing is a
    snapshot: a process alive when it was taken may fork and die before we read it, so a scan that
    meets any new zombie is followed by another; we stop at a scan with nothing alive and nothing
    new. With `sid=None` only `uid` is swept (what a crashed launcher's run left behind).
    Returns (live pids it had to kill, pids still there at the deadline — should be none).
    """
    seen: set[int] = set()
    zombies: set[int] = set()
    end, me = time.monotonic() + deadline_s, os.getpid()
    while True:
        alive, again = [], False
        for pid, state, ppid in find_processes(uid, sid):
            if state != "Z":
                alive.append(pid)
                continue
            again |= pid not in zombies or ppid not in (me, 1)
            zombies.add(pid)
            if ppid == me:
                _reap(pid)
        seen.update(alive)
        if not alive and not again:
            return seen, []
        if time.monotonic() > end:
            return seen, alive
        if sid is not None:
            try:
                os.killpg(sid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.001)


def _reap(pid: int) -> None:
    """Collect a zombie child of ours (an orphan of a run, re-parented to us as subreaper)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
