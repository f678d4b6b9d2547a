"""DeadlinePool: verifiers in worker processes under a hard deadline."""

import time

import pytest

from services.common.errors import InvalidArgument
from services.reward.verifiers.base import VerifyOptions
from services.reward.verifiers.math import math_reward
from services.reward.workers import DeadlinePool
from tests.reward.helpers import task
from tests.reward.slow_verifier import crashing_reward, sleepy_reward


@pytest.fixture(scope="module")
def pool():
    p = DeadlinePool(workers=1)
    p.warm_up()
    yield p
    p.close()


def test_runs_a_verifier(pool):
    out = pool.call(math_reward, task("math", ground_truth="1/2"), "\\boxed{0.5}", VerifyOptions(), 30)
    assert out.verdict == "correct"


def test_deadline_kills_and_replaces_the_worker(pool):
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="sleepy_reward ran past 0.5s"):
        pool.call(sleepy_reward, task("math", ground_truth="1"), "30", VerifyOptions(), 0.5)
    assert time.monotonic() - start < 5
    out = pool.call(sleepy_reward, task("math", ground_truth="1"), "0", VerifyOptions(), 30)
    assert out.reason == "woke up"


def test_task_errors_and_crashes_come_back(pool):
    with pytest.raises(InvalidArgument, match="ground_truth"):
        pool.call(math_reward, task("math", ground_truth="  "), "\\boxed{1}", VerifyOptions(), 30)
    with pytest.raises(RuntimeError, match="ZeroDivisionError: verifier bug"):
        pool.call(crashing_reward, task("math", ground_truth="1"), "", VerifyOptions(), 30)
