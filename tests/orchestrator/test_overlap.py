"""Independent calls at once, every one waited for; batches prepared ahead, the same as made in line."""

from __future__ import annotations

import threading

import pytest

from services.orchestrator.overlap import Prefetch, together


def meeting(parties: int):
    """Calls that return only once `parties` of them are running at the same time (a barrier): in
    turn, the first would wait out the barrier's timeout and raise BrokenBarrierError."""
    barrier = threading.Barrier(parties, timeout=20)

    def call(value):
        return lambda: (barrier.wait(), value)[1]

    return call


def test_the_calls_run_at_once_and_return_in_order():
    call = meeting(3)
    assert together([call("a"), call("b"), call("c")]) == ["a", "b", "c"]


def test_without_overlap_the_calls_run_in_turn_on_this_thread():
    seen = []
    assert together([lambda: seen.append(threading.current_thread()) or 1,
                     lambda: seen.append(threading.current_thread()) or 2], concurrent=False) == [1, 2]
    assert seen == [threading.current_thread()] * 2


def test_every_call_finishes_and_the_first_error_in_call_order_is_raised():
    finished = threading.Event()
    started = threading.Event()

    def slow():
        started.wait(20)
        finished.set()
        return "slow"

    def fails():
        started.set()
        raise ValueError("second")

    with pytest.raises(ValueError, match="second"):
        together([slow, fails])
    assert finished.is_set(), "the other call was waited for"

    def first():
        raise KeyError("first")

    with pytest.raises(KeyError, match="first"):
        together([first, fails])


def test_a_prepared_batch_is_taken_once_and_is_what_work_makes():
    made = []

    def work():
        made.append(1)
        return [3, 1, 2]

    cache = Prefetch()
    cache.start("step-1", work)
    assert cache.take("step-1", lambda: pytest.fail("prepared: not made again")) == [3, 1, 2]
    assert cache.hits == 1 and made == [1]
    assert cache.take("step-1", work) == [3, 1, 2] and made == [1, 1], "taken once: made in line after"
    assert cache.hits == 1


def test_a_failed_preparation_is_made_again_in_line():
    cache = Prefetch()

    def broken():
        raise OSError("disk busy")

    cache.start("k", broken)
    assert cache.take("k", lambda: "in line") == "in line" and cache.hits == 0


def test_starting_twice_prepares_once():
    calls = []
    cache = Prefetch()
    gate = threading.Event()

    def work():
        gate.wait(20)
        calls.append(1)
        return len(calls)

    cache.start("a", work)
    cache.start("a", work)
    gate.set()
    assert cache.take("a", lambda: "made here") == 1 and calls == [1]


def test_only_the_newest_entries_are_kept():
    cache = Prefetch(keep=2)
    for key in ("a", "b", "c"):
        cache.start(key, lambda key=key: key.upper())
    assert cache.take("a", lambda: "made here") == "made here", "the oldest was dropped"
    assert [cache.take(k, lambda: None) for k in ("b", "c")] == ["B", "C"]
