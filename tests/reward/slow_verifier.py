"""Verifiers that misbehave on purpose, importable by the deadline pool's worker processes."""

import time

from services.reward.verifiers.base import correct


def sleepy_reward(task, response, ctx):
    """Sleeps for `response` seconds, then says correct."""
    time.sleep(float(response))
    return correct("woke up")


def crashing_reward(task, response, ctx):
    raise ZeroDivisionError("verifier bug")
