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


def test_with_max_staleness_the_next_step_is_sampled_on_the_weights_this_one_started_from(run, tiny_model_dir):
    from tests.orchestrator.steps.test_mopd import mopd

    ctx = run([mopd(str(tiny_model_dir), steps=3, max_staleness=1)])
    kind = STEP_KINDS["mopd"]
    kind.start_stage(ctx, 0)
    ctx.ledger.begin_stage(ctx.run_id, 0, "mopd", "mopd", 3, start_weight_version=0)
    for step in range(3):
        for phase in kind.phases:
            phase.run(ctx, 0, step)
        if step < 2:  # step+1 sampled during this update, by the weights this step started from
            ahead = ctx.ledger.step(ctx.step_id(0, step + 1))
            started_from = ctx.ledger.step(ctx.step_id(0, step - 1)).weight_version if step else 0
            assert ahead.phase == "generated" and ahead.metrics["sampled_ahead"] == 1.0
            assert ahead.metrics["sampled_weight_version"] == started_from
    steps = [ctx.ledger.step(ctx.step_id(0, s)) for s in range(3)]
    assert [s.phase for s in steps] == ["done"] * 3 and len(ctx.ledger.steps(ctx.run_id)) == 3
    assert [s.metrics["staleness"] for s in steps] == [0.0, 1.0, 1.0]
    assert [s.attempts for s in steps] == [1, 1, 1], "a step sampled ahead: its generate phase did nothing"
    assert [s.weight_version for s in steps] == sorted({s.weight_version for s in steps})


def test_nothing_is_sampled_ahead_across_an_evaluation_or_past_the_stage(run):
    ctx = run([grpo(max_staleness=1, steps=4, eval_every=2)])
    kind, cfg = STEP_KINDS["grpo"], ctx.stage(0)
    assert [kind.samples_ahead(cfg, s) for s in range(4)] == [True, False, True, False]
    assert not any(kind.samples_ahead(run([grpo(steps=4)]).stage(0), s) for s in range(4)), "0: on-policy"
