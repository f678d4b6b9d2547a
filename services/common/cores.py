"""A host-local pool of CPU cores that the torch services of one machine share.

A heavy call (a trainer step, a Generate, a ScoreTokens) runs inside `pool.lease()`: the lease takes
every free core slot it can, up to the service's `max_threads`, sets that many torch threads for the
call, and frees the slots after. Whichever service is working gets the machine's cores; two working
at once split them instead of running more threads than there are cores. A lease that finds every
slot taken waits for one (`busy="wait"`, the default: it never oversubscribes, and waits at most the
holder's one call) or runs on one thread without a slot (`busy="share"`: at most one thread too
many per such caller). bench/results/cores.md measures both.

The pool only knows its own services, so a lease also looks at the machine (`watch_load`, on by
default): it takes no more slots than there are cores not already running someone else's thread
(/proc/loadavg's runnable count, the least of a few samples a millisecond apart; it counts the whole
host, so in a container given some of its cores a busy host lowers it: the safe side). On a machine other
jobs load, torch's threads wait for each other at every operation while a core runs someone else, and
one thread is faster (bench/results/cores.md: 2 threads took 1.4-6x the time of 1 at load 8-18).

Slots are files `<dir>/slot-<i>.lock`, one per core of this process's CPU affinity, held with
flock(2) on a file description of the lease's own: processes need nothing in common but the folder,
two threads of one process contend like two processes, and a holder that dies frees its slots when
the kernel closes its files. Torch's thread count is per calling thread (OpenMP), so the lease sets
it in the thread that does the work and restores the previous count after. This module knows
nothing of services or gRPC.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings

BUSY = ("wait", "share")


class CoreSettings(BaseSettings):
    """How many torch threads a service's heavy calls use (mixed into its config, so the variables carry
    the service's prefix, e.g. CASCADE_TRAINER_MAX_THREADS, CASCADE_TRAINER_CORES_DIR)."""

    max_threads: int = Field(default=0, ge=0)
    """Most torch threads one heavy call (a train step, a Generate, a ScoreTokens) uses; 0 = every core
    of this process's CPU affinity (with no `cores_dir`: torch's own count, OMP_NUM_THREADS or the cores)."""
    cores_dir: Path | None = None
    """Folder of this host's core pool, the same for every service of the machine (the local stack uses
    <home>/cores): a call takes every free core up to `max_threads`, waits for one when none is free,
    and frees them when it ends. Unset: no pool; each call uses `max_threads` threads."""
    watch_load: bool = True
    """With `cores_dir`: take no more cores than the machine has idle (not running another job's thread)
    when the call starts; false: every free slot of the pool, whatever else runs on the machine."""


def host_cores() -> int:
    """Cores this process may run on: the size of its CPU affinity mask (os.cpu_count() where the
    platform has no affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def wanted_threads(max_threads: int, cores: int) -> int:
    """Slots a lease tries to take: `cores` when max_threads is 0, else min(max_threads, cores), and at
    least 1."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    if max_threads < 0:
        raise ValueError(f"max_threads must be >= 0 (0 = every core), got {max_threads}")
    return max(1, cores if max_threads == 0 else min(max_threads, cores))


def idle_cores(cores: int, runnable: int) -> int:
    """Cores free for a new lease: `cores` - (runnable - 1), between 1 and `cores`. `runnable` counts
    every thread on the run queue, the caller's own included (the - 1)."""
    return max(1, min(cores, cores - (runnable - 1)))


def runnable_threads(samples: int = 3, gap_s: float = 0.001) -> int | None:
    """Threads running or ready to run on this machine (the least of `samples` reads of /proc/loadavg's
    `running/total` field, `gap_s` apart, so a thread that only passes through is not counted); None
    where the file does not exist."""
    least = None
    for i in range(samples):
        try:
            running = int(Path("/proc/loadavg").read_text().split()[3].split("/")[0])
        except (OSError, IndexError, ValueError):
            return None
        least = running if least is None else min(least, running)
        if i + 1 < samples:
            time.sleep(gap_s)
    return least


def slot_path(directory: Path, index: int) -> Path:
    """The lock file of slot `index` in the pool folder."""
    return Path(directory) / f"slot-{index}.lock"


def try_slot(path: Path) -> int | None:
    """An open descriptor holding an exclusive flock on `path`, or None when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def wait_slot(path: Path) -> int:
    """An open descriptor holding an exclusive flock on `path`, blocking until its holder lets go."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


class CorePool:
    """The core slots of one folder (or none: `directory=None`), leased per heavy call."""

    def __init__(self, directory: Path | None, max_threads: int = 0, cores: int | None = None, busy: str = "wait",
                 watch_load: bool = True):
        if busy not in BUSY:
            raise ValueError(f"busy must be one of {', '.join(BUSY)}, got {busy!r}")
        self.directory = None if directory is None else Path(directory)
        self.cores = host_cores() if cores is None else cores
        self.max_threads = max_threads
        self.want = wanted_threads(max_threads, self.cores)
        self.busy = busy
        self.watch_load = watch_load
        self._local = threading.local()
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_settings(cls, settings: CoreSettings) -> CorePool:
        return cls(settings.cores_dir, settings.max_threads, watch_load=settings.watch_load)

    @classmethod
    def off(cls) -> CorePool:
        """A pool that leaves torch's threads alone (a backend whose engine runs its own threads)."""
        return cls(None, 0)

    @contextmanager
    def lease(self) -> Iterator[int]:
        """Run the block with the leased number of torch threads (yielded); a lease inside a lease of
        the same thread is the outer one."""
        if getattr(self._local, "threads", None) is not None:
            yield self._local.threads
            return
        fds = self._take()
        threads = len(fds) or (self.want if self.directory is None else 1)
        import torch

        before = torch.get_num_threads()
        if self.directory is not None or self.max_threads:
            torch.set_num_threads(threads)
        else:
            threads = before  # no pool, no cap: today's count
        self._local.threads = threads
        try:
            yield threads
        finally:
            self._local.threads = None
            torch.set_num_threads(before)
            for fd in fds:
                os.close(fd)  # closing the description drops its flock

    def _take(self) -> list[int]:
        """Descriptors of the slots taken: every free one up to `want`; none free -> wait for one
        (busy=wait) or take none (busy=share). No pool -> none."""
        if self.directory is None:
            return []
        paths = [slot_path(self.directory, i) for i in range(self.cores)]
        want = self._wanted()  # the machine's load sampled once a call
        fds = _free(paths, want)
        if not fds and self.busy == "wait":
            first = (os.getpid() + threading.get_native_id()) % self.cores  # waiters spread over the slots
            fds = [wait_slot(paths[first])]
            fds += _free(paths[:first] + paths[first + 1:], want - 1)
        return fds

    def _wanted(self) -> int:
        """`want`, or fewer where other jobs already run on the machine's cores (watch_load)."""
        if self.watch_load and (runnable := runnable_threads()) is not None:
            return min(self.want, idle_cores(self.cores, runnable))
        return self.want


def _free(paths: list[Path], want: int) -> list[int]:
    fds: list[int] = []
    for path in paths:
        if len(fds) >= want:
            break
        if (fd := try_slot(path)) is not None:
            fds.append(fd)
    return fds
