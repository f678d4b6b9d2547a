"""The reward-model step's one phase on the in-process stack: the rm trainer, no policy version."""

from __future__ import annotations

from services.orchestrator.steps import STEP_KINDS


def test_the_declared_phases_are_the_chain_and_it_is_not_evaluated():
    kind = STEP_KINDS["rm"]
    assert [(p.name, p.queue) for p in kind.phases] == [("update", "train")] and kind.evaluates is False


def test_the_stage_publishes_a_reward_model_not_a_policy_version(run):
    ctx = run([{"name": "rm", "type": "rm", "domains": ["rlhf"], "output": "rm-out", "batch_size": 2, "steps": 1,
                "max_seq_len": 64, "optimizer": {"lr": 1e-3}}])
    ctx.ledger.begin_stage(ctx.run_id, 0, "rm", "rm", 1, start_weight_version=0)
    STEP_KINDS["rm"].phase("update").run(ctx, 0, 0)
    record = ctx.ledger.step(ctx.step_id(0, 0))
    assert record.phase == "done" and record.weight_version is None and ctx.ledger.weight_versions(ctx.run_id) == []
    assert record.metrics["pairs"] == 2 and record.metrics["train/init_copied"] > 0, "starts from the policy's weights"
    assert ctx.artifacts.get("reward-models/rm-out", "weights")["uri"]
