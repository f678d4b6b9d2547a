"""Reward-model scoring (rlhf) with the tiny model directory: real transformers, deterministic."""

import math

import pytest

from services.reward.rm import RewardModel
from services.reward.verifiers.base import Context
from services.reward.verifiers.rlhf import rlhf_reward
from tests.reward.helpers import task


@pytest.fixture(scope="module")
def rm(tiny_model_dir):
    return RewardModel(tiny_model_dir, max_length=64)


def test_scores_are_finite_batched_and_reproducible(rm, tiny_model_dir):
    pairs = [([{"role": "user", "content": "hi"}], "hello there"), ([{"role": "user", "content": "hi"}], "go away")]
    batch = rm.score(pairs)
    assert len(batch) == 2 and all(math.isfinite(x) for x in batch)
    assert batch[0] != batch[1]
    assert [rm.score([p])[0] for p in pairs] == pytest.approx(batch, abs=1e-4)  # padding does not change a score
    assert RewardModel(tiny_model_dir, max_length=64).score(pairs) == pytest.approx(batch, abs=1e-6)


def test_rlhf_verifier_returns_the_score(rm):
    out = rlhf_reward(task("rlhf"), "hello there", Context(reward_model=rm))
    assert out.verdict == "correct" and out.reward == pytest.approx(rm.score([([{"role": "user", "content": "q"}], "hello there")])[0])
    assert rlhf_reward(task("rlhf"), "  ", Context(reward_model=rm)).verdict == "invalid"
