"""A host-local pool of CPU cores that the torch services of one machine share.

A heavy call (a trainer step, a Generate, a ScoreTokens) runs inside `pool.lease()`, which takes core
slots, sets that many torch threads for the call and frees the slots after, so the service that is
working gets the machine's cores and two working at once take turns (or split them) instead of
running more threads than there are cores. Two lease modes (`CoreSettings.lease`):

- `fixed` (the default): a call waits until it holds exactly its `want` slots (every core, or
  `max_threads`, or a trainer rank's share, see `rank_slots`) and runs on exactly that many threads.
  The same call always runs on the same thread count, so its floating-point sums, and a run's
  weights, are the same bit for bit from run to run on one machine; the price is a wait while
  another call holds any of those slots, even where a thread or two would be free.
- `adaptive`: a call takes every free slot up to `want`, no more than the machine has idle
  (`watch_load`), and with none free waits for one (`busy="wait"`) or runs on one thread without a
  slot (`busy="share"`). It never waits for more than one slot, and on a machine other jobs load it
  keeps to the idle cores (bench/results/cores.md: 2 threads took 1.4-6x the time of 1 at load
  8-18), but a call's thread count, and its sums with it, follow the load and whoever holds slots.

Slots are files `<dir>/slot-<i>.lock`, one per core of this process's CPU affinity, held with
flock(2) on a file description of the lease's own: processes need nothing in common but the folder,
two threads of one process contend like two processes, and a holder that dies frees its slots when
the kernel closes its files. Torch's thread count is per calling thread (OpenMP), so the lease sets
it in the thread that does the work and restores the previous count after.

No deadlock: a lease never waits while it holds a slot (`fixed` takes its slots in ascending order
without waiting and, at the first busy one, lets go of all it took, waits for that one holding
nothing, and tries again; `adaptive` waits only when it holds none). So every holder is running its
call, and a wait ends when that call does — unless the call itself waits for the waiter: the ranks of
one trainer, whose collectives wait for each other inside the lease. Those take disjoint slots
(`rank_slots`), so a rank only ever waits for a call outside its trainer. (Two multi-rank trainers
sharing one host's pool could still wait on each other: give each a pool folder of its own.) This
module knows nothing of services or gRPC.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings

BUSY = ("wait", "share")
LEASES = ("fixed", "adaptive")


class CoreSettings(BaseSettings):
    """How many torch threads a service's heavy calls use (mixed into its config, so the variables carry
    the service's prefix, e.g. CASCADE_TRAINER_MAX_THREADS, CASCADE_TRAINER_CORES_DIR)."""

    max_threads: int = Field(default=0, ge=0)
    """Most torch threads one heavy call (a train step, a Generate, a ScoreTokens) uses; 0 = every core
    of this process's CPU affinity (with no `cores_dir`: torch's own count, OMP_NUM_THREADS or the cores)."""
    cores_dir: Path | None = None
    """Folder of this host's core pool, the same for every service of the machine (the local stack uses
    <home>/cores): a call takes cores of the pool as `lease` says and frees them when it ends. Unset: no
    pool; each call uses `max_threads` threads."""
    lease: Literal["fixed", "adaptive"] = "fixed"
    """With `cores_dir`: `fixed` = a call waits until it holds exactly its cores (every core, or
    `max_threads`, or a trainer rank's share) and runs on that many threads: the same count every time,
    so runs repeat bit for bit, at the price of waiting while another call holds any of them.
    `adaptive` = a call takes the free cores it finds (and, with `watch_load`, no more than the machine
    has idle), waiting only when none is free: less waiting, but its thread count, and floating-point
    sums with it, follow the load. `adaptive` cannot serve a trainer of several ranks on one host."""
    watch_load: bool = True
    """With `cores_dir` and lease `adaptive`: take no more cores than the machine has idle (not running
    another job's thread) when the call starts; false: every free slot of the pool. `fixed` ignores it."""


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


def rank_slots(want: int, cores: int, rank: int = 0, ranks: int = 1) -> range:
    """Slots a `fixed` lease of local rank `rank` of `ranks` (the processes of one trainer on this host)
    takes: share = min(want, max(1, cores // ranks)), slots [rank * share, (rank + 1) * share). Ranks get
    disjoint slots, so one rank never waits for a slot another holds while it waits in a collective for
    the first; with more ranks than cores, ranks >= cores get none (empty: they run on one thread
    without a slot, as many threads as ranks being unavoidable then)."""
    if not 0 <= rank < ranks:
        raise ValueError(f"rank must be in [0, ranks), got rank {rank} of {ranks}")
    share = min(want, max(1, cores // ranks))
    start = rank * share
    return range(start, start + share) if start + share <= cores else range(0)


def host_ranks(rank: int, world: int, env: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """(local rank, ranks on this host) of trainer rank `rank` of `world`: LOCAL_RANK and LOCAL_WORLD_SIZE
    (torchrun) or LOCAL_SIZE (the deepspeed launcher); without a local size, every rank is taken to be on
    this host (the safe side: fewer threads a rank, never a deadlock); without LOCAL_RANK, rank % that.
    One rank alone: (0, 1)."""
    if world <= 1:
        return 0, 1
    local = int(env.get("LOCAL_WORLD_SIZE") or env.get("LOCAL_SIZE") or world)
    local_rank = int(env.get("LOCAL_RANK") or rank % local)
    if not 0 <= local_rank < local:
        raise ValueError(f"LOCAL_RANK must be in [0, {local}) (the ranks on this host), got {local_rank}")
    return local_rank, local


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


def take_all(paths: list[Path]) -> list[int]:
    """Descriptors holding every one of `paths` (in ascending slot order): try each without waiting; at
    the first busy one let go of those taken, wait until it frees (holding nothing), and start over.
    A waiter never holds a slot; and of leases trying at once, the one whose taken slots reach
    highest is stopped by no other's (each takes in ascending order), so tries cannot keep failing
    each other: only a call that runs delays one."""
    while True:
        fds: list[int] = []
        for path in paths:
            if (fd := try_slot(path)) is None:
                break
            fds.append(fd)
        else:
            return fds
        for taken in fds:
            os.close(taken)
        os.close(wait_slot(path))


class CorePool:
    """The core slots of one folder (or none: `directory=None`), leased per heavy call; `rank` of `ranks`
    = this process's place among the ranks of one trainer on this host (`host_ranks`)."""

    def __init__(self, directory: Path | None, max_threads: int = 0, cores: int | None = None, busy: str = "wait",
                 watch_load: bool = True, lease: str = "fixed", rank: int = 0, ranks: int = 1):
        if busy not in BUSY:
            raise ValueError(f"busy must be one of {', '.join(BUSY)}, got {busy!r}")
        if lease not in LEASES:
            raise ValueError(f"lease must be one of {', '.join(LEASES)}, got {lease!r}")
        if lease == "fixed" and busy != "wait":
            raise ValueError(f"busy={busy!r} needs lease='adaptive' (a fixed lease always waits for its cores)")
        if lease == "adaptive" and ranks > 1 and directory is not None:
            raise ValueError(f"lease='adaptive' cannot share a core pool among {ranks} ranks of one trainer on a host "
                             "(a rank holding cores waits in a collective for one waiting for them); use lease='fixed'")
        self.directory = None if directory is None else Path(directory)
        self.cores = host_cores() if cores is None else cores
        self.max_threads = max_threads
        self.want = wanted_threads(max_threads, self.cores)
        self.busy = busy
        self.watch_load = watch_load
        self.mode = lease
        self.slots = rank_slots(self.want, self.cores, rank, ranks)
        self._local = threading.local()
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)

    @classmethod
    def from_settings(cls, settings: CoreSettings, rank: int = 0, ranks: int = 1) -> CorePool:
        return cls(settings.cores_dir, settings.max_threads, watch_load=settings.watch_load, lease=settings.lease,
                   rank=rank, ranks=ranks)

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
        import torch

        before = torch.get_num_threads()
        if self.directory is None:
            threads = self.want if self.max_threads else before  # no pool, no cap: today's count
        else:
            threads = max(1, len(self.slots) if self.mode == "fixed" else len(fds))
        torch.set_num_threads(threads)
        self._local.threads = threads
        try:
            yield threads
        finally:
            self._local.threads = None
            torch.set_num_threads(before)
            for fd in reversed(fds):
                os.close(fd)  # closing the description drops its flock

    def _take(self) -> list[int]:
        """Descriptors of the slots taken: `fixed`, exactly `slots` (waiting for them); `adaptive`, every
        free one up to `want`, and none free -> wait for one (busy=wait) or take none (busy=share).
        No pool -> none."""
        if self.directory is None:
            return []
        if self.mode == "fixed":
            return take_all([slot_path(self.directory, i) for i in self.slots])
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
