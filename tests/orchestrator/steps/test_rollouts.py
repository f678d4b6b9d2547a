"""What GRPO and MOPD share: the batch read back by index (checked by id), reward_mean's one definition."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.common.errors import FailedPrecondition
from services.orchestrator.steps import STEP_KINDS
from services.orchestrator.steps.rollouts import errored, prompt_padded, reward_metrics, rollout_seed
from tests.orchestrator.steps.test_grpo import grpo


@pytest.mark.parametrize(("rewards", "verdicts", "mean"), [
    ([1.0, 0.0, 1.0, 0.0], ["correct", "incorrect", "correct", "incorrect"], 0.5),
    ([1.0, 0.0, 0.0, 0.0], ["correct", "error", "incorrect", "error"], 0.5),   # errors left out, not scored 0
    ([0.0, 0.0], ["error", "error"], math.nan),
])
def test_reward_mean_is_over_the_samples_that_did_not_error(rewards, verdicts, mean):
    m = reward_metrics({"rewards": rewards, "verdicts": verdicts})
    assert m["reward_mean"] == pytest.approx(mean, nan_ok=True)
    assert sum(v for k, v in m.items() if k.startswith("verdict/")) == len(verdicts)
    assert errored({"verdicts": verdicts}).tolist() == [v == "error" for v in verdicts]


def test_rollout_seeds_differ_per_stage_and_step():
    assert len({rollout_seed(0, s, t) for s in range(3) for t in range(50)}) == 150


def test_prompt_padded_puts_zeros_on_the_prompt():
    assert prompt_padded([[7, 8], [9]], [[0.1], [0.2, 0.3], [0.4]], np.array([False, True, True]), 2) == [
        [0.0, 0.0, 0.2, 0.3], [0.0, 0.4]]


def test_the_batch_is_read_back_and_a_changed_data_folder_is_refused(run):
    ctx = run([grpo()])
    ctx.ledger.begin_stage(ctx.run_id, 0, "rl", "grpo", 2, start_weight_version=0)
    kind = STEP_KINDS["grpo"]
    kind.phase("generate").run(ctx, 0, 1)
    sid = ctx.step_id(0, 1)
    out = ctx.artifacts.get(sid, "rollouts")
    assert [r.id for r in kind.batch_records(ctx, 0, 1)] == out["task_ids"]
    ctx.artifacts.put(sid, "rollouts", {**out, "task_ids": list(reversed(out["task_ids"]))})
    with pytest.raises(FailedPrecondition, match="train data changed"):
        kind.batch_records(ctx, 0, 1)
