"""The core pool (services/common/cores.py): slots split between real processes, a waiter wakes when
the holder lets go, a killed holder frees its slots, torch's thread count follows the lease."""

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

from services.common.cores import CorePool, idle_cores, runnable_threads, slot_path, try_slot, wanted_threads

ROOT = Path(__file__).resolve().parents[2]

HOLDER = """
import sys, time, torch
from services.common.cores import CorePool
directory, cores, max_threads, busy = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
print("started", flush=True)
with CorePool(directory, max_threads, cores=cores, busy=busy, watch_load=False).lease() as threads:
    print("held", threads, torch.get_num_threads(), time.time(), flush=True)
    sys.stdin.readline()
    print("released", time.time(), flush=True)
"""


class Holder:
    """A separate Python process holding a lease until told to let go (a line on its stdin)."""

    def __init__(self, directory: Path, cores: int, max_threads: int = 0, busy: str = "wait"):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory), str(cores), str(max_threads), busy],
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


def test_a_busy_machine_gives_a_lease_fewer_threads(tmp_path):
    """Threads of another process that spin on the CPU count as load: with watch_load the lease takes
    only the cores they leave idle, without it every free slot."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        deadline = time.monotonic() + 30
        while (runnable_threads() or 0) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        with CorePool(tmp_path, cores=3).lease() as threads:
            assert threads == 1
        with CorePool(tmp_path, cores=3, watch_load=False).lease() as threads:
            assert threads == 3
    finally:
        for p in spinners:
            p.kill()
            p.wait(30)


def test_busy_must_be_known(tmp_path):
    with pytest.raises(ValueError, match="busy must be one of wait, share"):
        CorePool(tmp_path, busy="spin")


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
    with CorePool(tmp_path, cores=4, watch_load=False).lease() as threads:
        assert threads == torch.get_num_threads() == 1  # the one slot the other process left
    other.release()
    with CorePool(tmp_path, cores=4, watch_load=False).lease() as threads:
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
    with CorePool(tmp_path, cores=2, busy="share", watch_load=False).lease() as threads:
        assert threads == torch.get_num_threads() == 1
    assert time.perf_counter() - start < 5.0
    holder.release()


def test_a_killed_holder_frees_its_slots(tmp_path, holders):
    holder = holders(tmp_path, cores=2)
    assert holder.held()[0] == 2
    holder.kill()
    with CorePool(tmp_path, cores=2, busy="share", watch_load=False).lease() as threads:
        assert threads == 2


def test_threads_of_one_process_contend_and_a_nested_lease_is_the_outer(tmp_path):
    pool = CorePool(tmp_path, cores=2, busy="share", watch_load=False)
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
        cfg = config()
        assert (cfg.max_threads, cfg.cores_dir, cfg.watch_load) == (3, tmp_path, False)
        assert not CorePool.from_settings(cfg).watch_load
        assert CorePool.from_settings(cfg).want == min(3, CorePool(None).cores)
    monkeypatch.setenv("CASCADE_TRAINER_MAX_THREADS", "-1")
    with pytest.raises(ValueError, match="max_threads"):
        TrainerConfig()


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
