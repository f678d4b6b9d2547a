"""The core pool (services/common/cores.py): a fixed lease runs on its own thread count whatever the
load and waits for every one of its slots, leasers taking every slot never deadlock or overlap, ranks of
one trainer get disjoint slots; adaptive slots split between real processes, a waiter wakes when the
holder lets go, a killed holder frees its slots, torch's thread count follows the lease."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from services.common.cores import (
    CorePool,
    host_ranks,
    idle_cores,
    rank_slots,
    runnable_threads,
    slot_path,
    try_slot,
    wanted_threads,
)

ROOT = Path(__file__).resolve().parents[2]

HOLDER = """
import sys, time, torch
from services.common.cores import CorePool
directory, cores, max_threads, busy, lease = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
rank, ranks = int(sys.argv[6]), int(sys.argv[7])
print("started", flush=True)
with CorePool(directory, max_threads, cores=cores, busy=busy, watch_load=False, lease=lease, rank=rank,
              ranks=ranks).lease() as threads:
    print("held", threads, torch.get_num_threads(), time.time(), flush=True)
    sys.stdin.readline()
    print("released", time.time(), flush=True)
"""


class Holder:
    """A separate Python process holding a lease until told to let go (a line on its stdin)."""

    def __init__(self, directory: Path, cores: int, max_threads: int = 0, busy: str = "wait", lease: str = "adaptive",
                 rank: int = 0, ranks: int = 1):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        argv = [str(directory), str(cores), str(max_threads), busy, lease, str(rank), str(ranks)]
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, *argv],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env)
        # unbuffered: a raw pipe's readline reads byte by byte, so no line waits in a buffer select cannot see
        assert self.line(60.0) == ["started"]

    def line(self, timeout: float) -> list[str] | None:
        """The next line it prints, split, or None when it prints nothing within `timeout` seconds."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline().decode().split() if ready else None

    def held(self, timeout: float = 60.0) -> tuple[int, int, float]:
        words = self.line(timeout)
        assert words and words[0] == "held", words
        return int(words[1]), int(words[2]), float(words[3])

    def release(self) -> float:
        self.proc.stdin.write(b"\n")
        words = self.line(30.0)
        assert words and words[0] == "released", words
        self.proc.wait(30)
        return float(words[1])

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)


@pytest.fixture
def holders():
    made: list[Holder] = []
    yield lambda *a, **k: made.append(Holder(*a, **k)) or made[-1]
    for h in made:
        if h.proc.poll() is None:
            h.kill()


@pytest.mark.parametrize("max_threads, cores, want", [(0, 2, 2), (0, 8, 8), (1, 2, 1), (3, 2, 2), (4, 8, 4)])
def test_wanted_threads(max_threads, cores, want):
    assert wanted_threads(max_threads, cores) == want


@pytest.mark.parametrize("max_threads, cores, field", [(-1, 2, "max_threads"), (0, 0, "cores")])
def test_wanted_threads_refuses_bad_counts(max_threads, cores, field):
    with pytest.raises(ValueError, match=field):
        wanted_threads(max_threads, cores)


@pytest.mark.parametrize("cores, runnable, idle", [(2, 1, 2), (2, 2, 1), (2, 9, 1), (8, 3, 6), (4, 0, 4)])
def test_idle_cores_leave_out_the_threads_of_other_jobs(cores, runnable, idle):
    assert idle_cores(cores, runnable) == idle


def test_a_busy_machine_gives_an_adaptive_lease_fewer_threads_and_a_fixed_one_its_own(tmp_path):
    """Threads of another process that spin on the CPU count as load: with watch_load an adaptive lease
    takes only the cores they leave idle, without it every free slot; a fixed lease its count."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        deadline = time.monotonic() + 30
        while (runnable_threads() or 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        with CorePool(tmp_path, cores=3, lease="adaptive").lease() as threads:
            assert threads == 1
        with CorePool(tmp_path, cores=3, watch_load=False, lease="adaptive").lease() as threads:
            assert threads == 3
        with CorePool(tmp_path, cores=3).lease() as threads:  # fixed: the same count whatever the load
            assert threads == torch.get_num_threads() == 3
        with CorePool(tmp_path, max_threads=2, cores=3).lease() as threads:
            assert threads == torch.get_num_threads() == 2
    finally:
        for p in spinners:
            p.kill()
            p.wait(30)


def test_busy_and_lease_must_be_known_and_fit(tmp_path):
    with pytest.raises(ValueError, match="busy must be one of wait, share"):
        CorePool(tmp_path, busy="spin")
    with pytest.raises(ValueError, match="lease must be one of fixed, adaptive"):
        CorePool(tmp_path, lease="greedy")
    with pytest.raises(ValueError, match="busy='share' needs lease='adaptive'"):
        CorePool(tmp_path, busy="share")
    with pytest.raises(ValueError, match="lease='adaptive' cannot share a core pool among 2 ranks"):
        CorePool(tmp_path, lease="adaptive", rank=1, ranks=2)
    assert CorePool(None, lease="adaptive", rank=1, ranks=2).directory is None  # no pool, nothing to deadlock on


def test_no_pool_keeps_todays_threads_or_the_cap():
    before = torch.get_num_threads()
    with CorePool(None, 0).lease() as threads:
        assert threads == torch.get_num_threads() == before
    with CorePool(None, 1, cores=2).lease() as threads:
        assert threads == torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


def test_a_lease_takes_every_free_slot_sets_torch_threads_and_frees_them(tmp_path):
    before = torch.get_num_threads()
    with CorePool(tmp_path, cores=3, watch_load=False).lease() as threads:
        assert threads == torch.get_num_threads() == 3
        assert all(try_slot(slot_path(tmp_path, i)) is None for i in range(3))
    assert torch.get_num_threads() == before
    fds = [try_slot(slot_path(tmp_path, i)) for i in range(3)]
    assert None not in fds
    for fd in fds:
        os.close(fd)


def test_two_processes_split_the_slots(tmp_path, holders):
    other = holders(tmp_path, cores=4, max_threads=3)
    assert other.held()[:2] == (3, 3)
    with CorePool(tmp_path, cores=4, watch_load=False, lease="adaptive").lease() as threads:
        assert threads == torch.get_num_threads() == 1  # the one slot the other process left
    other.release()
    with CorePool(tmp_path, cores=4, watch_load=False, lease="adaptive").lease() as threads:
        assert threads == 4


def test_a_waiter_wakes_when_the_holder_lets_go(tmp_path, holders):
    first = holders(tmp_path, cores=2)
    assert first.held()[0] == 2
    waiter = holders(tmp_path, cores=2, busy="wait")
    assert waiter.line(1.0) is None  # every slot is taken: it waits
    released = first.release()
    threads, torch_threads, acquired = waiter.held()
    assert (threads, torch_threads) == (2, 2) and acquired >= released
    waiter.release()


def test_share_runs_on_one_thread_beside_a_holder_of_every_slot(tmp_path, holders):
    holder = holders(tmp_path, cores=2)
    assert holder.held()[0] == 2
    start = time.perf_counter()
    with CorePool(tmp_path, cores=2, busy="share", watch_load=False, lease="adaptive").lease() as threads:
        assert threads == torch.get_num_threads() == 1
    assert time.perf_counter() - start < 5.0
    holder.release()


@pytest.mark.parametrize("lease", ["adaptive", "fixed"])
def test_a_killed_holder_frees_its_slots(tmp_path, holders, lease):
    holder = holders(tmp_path, cores=2, lease=lease)
    assert holder.held()[0] == 2
    holder.kill()
    with CorePool(tmp_path, cores=2, watch_load=False, lease=lease).lease() as threads:  # waits if a slot stayed held
        assert threads == 2


def test_threads_of_one_process_contend_and_a_nested_lease_is_the_outer(tmp_path):
    pool = CorePool(tmp_path, cores=2, busy="share", watch_load=False, lease="adaptive")
    held, done = threading.Event(), threading.Event()
    seen = {}

    def work():
        with pool.lease() as threads, pool.lease() as inner:  # nested: no second take, no deadlock
            seen["outer"], seen["inner"] = threads, inner
            held.set()
            done.wait(30)

    t = threading.Thread(target=work)
    t.start()
    assert held.wait(30)
    with pool.lease() as threads:
        seen["other"] = threads
    done.set()
    t.join(30)
    assert seen == {"outer": 2, "inner": 2, "other": 1}


def test_settings_carry_the_service_prefix(monkeypatch, tmp_path):
    from services.policy.config import PolicyConfig
    from services.teacher.config import TeacherConfig
    from services.trainer.config import TrainerConfig

    for prefix, config in (("TRAINER", TrainerConfig), ("POLICY", PolicyConfig), ("TEACHER", TeacherConfig)):
        monkeypatch.setenv(f"CASCADE_{prefix}_MAX_THREADS", "3")
        monkeypatch.setenv(f"CASCADE_{prefix}_CORES_DIR", str(tmp_path))
        monkeypatch.setenv(f"CASCADE_{prefix}_WATCH_LOAD", "false")
        assert config().lease == "fixed"
        monkeypatch.setenv(f"CASCADE_{prefix}_LEASE", "adaptive")
        cfg = config()
        assert (cfg.max_threads, cfg.cores_dir, cfg.watch_load, cfg.lease) == (3, tmp_path, False, "adaptive")
        assert not CorePool.from_settings(cfg).watch_load and CorePool.from_settings(cfg).mode == "adaptive"
        assert CorePool.from_settings(cfg).want == min(3, CorePool(None).cores)
    monkeypatch.setenv("CASCADE_TRAINER_MAX_THREADS", "-1")
    with pytest.raises(ValueError, match="max_threads"):
        TrainerConfig()
    monkeypatch.setenv("CASCADE_TRAINER_MAX_THREADS", "1")
    monkeypatch.setenv("CASCADE_TRAINER_LEASE", "greedy")
    with pytest.raises(ValueError, match="lease"):
        TrainerConfig()


# -- the fixed lease -----------------------------------------------------------------------------
@pytest.mark.parametrize("want, cores, rank, ranks, slots", [
    (2, 2, 0, 1, range(0, 2)), (2, 2, 0, 2, range(0, 1)), (2, 2, 1, 2, range(1, 2)), (8, 8, 2, 3, range(4, 6)),
    (1, 8, 3, 4, range(3, 4)), (2, 2, 1, 3, range(1, 2)), (2, 2, 2, 3, range(0)), (3, 3, 0, 1, range(0, 3)),
])
def test_rank_slots_are_disjoint_shares(want, cores, rank, ranks, slots):
    assert rank_slots(want, cores, rank, ranks) == slots


def test_rank_slots_of_every_rank_never_overlap_and_fit():
    for cores in range(1, 9):
        for ranks in range(1, 12):
            taken = [i for r in range(ranks) for i in rank_slots(cores, cores, r, ranks)]
            assert len(taken) == len(set(taken)) and all(0 <= i < cores for i in taken), (cores, ranks)


def test_rank_slots_refuse_a_rank_outside_the_ranks():
    with pytest.raises(ValueError, match="rank must be in"):
        rank_slots(2, 2, 2, 2)


@pytest.mark.parametrize("rank, world, env, local", [
    (0, 1, {"LOCAL_RANK": "3"}, (0, 1)),  # alone (LOCAL_RANK is then the N of cuda:N)
    (1, 2, {"LOCAL_RANK": "1"}, (1, 2)),  # no local size: every rank on this host
    (3, 4, {}, (3, 4)),
    (3, 4, {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, (1, 2)),  # torchrun, 2 hosts of 2
    (5, 8, {"LOCAL_RANK": "1", "LOCAL_SIZE": "4"}, (1, 4)),  # the deepspeed launcher
    (5, 8, {"LOCAL_WORLD_SIZE": "4"}, (1, 4)),
])
def test_host_ranks_read_the_launchers_variables(rank, world, env, local):
    assert host_ranks(rank, world, env) == local


def test_host_ranks_refuse_a_local_rank_past_the_local_size():
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        host_ranks(1, 4, {"LOCAL_RANK": "2", "LOCAL_WORLD_SIZE": "2"})


def test_a_fixed_lease_waits_for_every_one_of_its_slots(tmp_path, holders):
    """A holder of slot 1 (rank 1 of 2) leaves slot 0 free: a fixed lease of 2 waits all the same,
    then runs on 2 threads."""
    rank1 = holders(tmp_path, cores=2, lease="fixed", rank=1, ranks=2)
    assert rank1.held()[:2] == (1, 1)
    waiter = holders(tmp_path, cores=2, lease="fixed")
    assert waiter.line(1.0) is None  # it holds nothing meanwhile: slot 0 is free to take
    fd = try_slot(slot_path(tmp_path, 0))
    assert fd is not None
    os.close(fd)
    released = rank1.release()
    threads, torch_threads, acquired = waiter.held()
    assert (threads, torch_threads) == (2, 2) and acquired >= released
    waiter.release()


LEASER = """
import sys, time, torch
from services.common.cores import CorePool
directory, rounds, rank, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
pool = CorePool(directory, cores=2, rank=rank, ranks=ranks)
for _ in range(rounds):
    with pool.lease() as threads:
        start = time.time()
        assert threads == torch.get_num_threads() == 2 // ranks, threads
        time.sleep(0.002)
        print(start, time.time(), flush=True)
"""


def test_two_processes_leasing_every_slot_take_turns_and_finish(tmp_path):
    """Two processes each lease 2 of 2 slots 150 times: both finish (no deadlock), and no two leases
    ever overlap in time (no oversubscription)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", LEASER, str(tmp_path), "150", "0", "1"], stdout=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    try:
        outs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0]
    spans = sorted(tuple(map(float, line.split())) for out in outs for line in out.splitlines())
    assert len(spans) == 300
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:])), "two leases overlapped"


RANKS = """
import sys, threading
from services.common.cores import CorePool
directory, ranks, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
barrier = threading.Barrier(2, timeout=5)  # the all-reduce the two ranks meet in, inside their lease
stop, failed = threading.Event(), []

def rank(r):
    pool = CorePool(directory, cores=2, rank=r if ranks == 2 else 0, ranks=ranks)
    try:
        for _ in range(rounds):
            with pool.lease():
                barrier.wait()
    except threading.BrokenBarrierError:
        failed.append(r)
        barrier.abort()

def other():  # a policy's Generate: every slot, again and again
    pool = CorePool(directory, cores=2)
    while not stop.is_set():
        with pool.lease():
            pass

threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
others = [threading.Thread(target=other) for _ in range(2)]
for t in threads + others:
    t.start()
for t in threads:
    t.join()
stop.set()
for t in others:
    t.join()
print("deadlock" if failed else "done", flush=True)
"""


@pytest.mark.parametrize("ranks, outcome", [(2, "done"), (1, "deadlock")])
def test_ranks_meeting_in_a_collective_inside_their_lease_finish_with_their_shares(tmp_path, ranks, outcome):
    """Two trainer ranks (threads contend like processes) meet at a barrier inside each lease while two
    other leasers take every slot: with the per-rank rule (rank r of 2: slot r) they finish; each rank
    wanting every slot (the control) deadlocks: one holds both at the barrier, the other waits for
    them (the barrier's timeout tells)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", RANKS, str(tmp_path), str(ranks), "100"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [outcome]


def watch(obj, name: str, directory: Path, cores: int) -> list[tuple[int, int]]:
    """Wrap `obj.name` (a service's heavy call) to record (torch threads, free slots of the pool) while it
    runs; the services' tests use it to check that their calls run inside a lease."""
    seen: list[tuple[int, int]] = []
    inner = getattr(obj, name)

    def observed(*args, **kwargs):
        free = [fd for fd in (try_slot(slot_path(directory, i)) for i in range(cores)) if fd is not None]
        for fd in free:
            os.close(fd)
        seen.append((torch.get_num_threads(), len(free)))
        return inner(*args, **kwargs)

    setattr(obj, name, observed)
    return seen
