"""The SFT step's one phase on the in-process stack: weights published only where they are read."""

from __future__ import annotations

import pytest

from services.orchestrator.steps import STEP_KINDS
from services.orchestrator.steps.sft import has_reasoning


def test_the_declared_phases_are_the_chain():
    assert [(p.name, p.queue) for p in STEP_KINDS["sft"].phases] == [("update", "train")]


def test_steps_train_and_only_the_last_publishes(run):
    ctx = run([{"name": "sft", "type": "sft", "domains": ["mcqa"], "batch_size": 2, "steps": 2, "max_seq_len": 64,
                "optimizer": {"lr": 1e-3}, "packing": False}])
    ctx.ledger.begin_stage(ctx.run_id, 0, "sft", "sft", 2, start_weight_version=0)
    for step in (0, 1):
        STEP_KINDS["sft"].phase("update").run(ctx, 0, step)
    first, last = (ctx.ledger.step(ctx.step_id(0, s)) for s in (0, 1))
    assert first.phase == last.phase == "done"
    assert first.weight_version is None and last.weight_version, "step 0 is read by no one: not published"
    assert first.metrics["sequences"] == 2 and first.metrics["train/tokens"] > 0


def test_thinking_mode_follows_the_conversation():
    assert has_reasoning([{"role": "assistant", "content": "<think>x</think>y"}])
    assert not has_reasoning([{"role": "assistant", "content": "y"}, {"role": "user", "content": "</think>"}])


def test_packing_is_sent_with_every_train_step(run):
    """SFT `packing` reaches the trainer (it used to be accepted and never read)."""
    ctx = run([{"name": "sft", "type": "sft", "domains": ["mcqa"], "batch_size": 2, "steps": 1, "max_seq_len": 64,
                "optimizer": {"lr": 1e-3, "weight_decay": 0.1}}])
    ctx.ledger.begin_stage(ctx.run_id, 0, "sft", "sft", 1, start_weight_version=0)
    sent = []
    trainer = ctx.clients.trainer

    class Recording:  # passes every call through to the real trainer servicer, keeping the requests
        def call(self, method, request, timeout=None):
            sent.append((method, request))
            return trainer.call(method, request, timeout)

    ctx.clients = type(ctx.clients)(**{**vars(ctx.clients), "trainer": Recording()})
    STEP_KINDS["sft"].phase("update").run(ctx, 0, 0)
    (request,) = [r for m, r in sent if m == "TrainStep"]
    assert request.packing is True and request.weight_decay == pytest.approx(0.1) and request.grad_clip == 1.0


def trained_batches(run, overlap: bool, steps: int = 3) -> tuple[list[bytes], int]:
    """The batch of every TrainStep of `steps` SFT steps run with overlap on or off, and the prefetch hits."""
    from services.orchestrator.overlap import PREFETCH

    ctx = run([{"name": "sft", "type": "sft", "domains": ["mcqa", "math"], "batch_size": 3, "steps": steps,
                "max_seq_len": 96, "optimizer": {"lr": 1e-3}}])
    ctx.settings = ctx.settings.model_copy(update={"overlap": overlap})
    ctx.ledger.begin_stage(ctx.run_id, 0, "sft", "sft", steps, start_weight_version=0)
    sent = []
    trainer = ctx.clients.trainer

    class Recording:
        def call(self, method, request, timeout=None):
            sent.append((method, request))
            return trainer.call(method, request, timeout)

    ctx.clients = type(ctx.clients)(**{**vars(ctx.clients), "trainer": Recording()})
    hits = PREFETCH.hits
    for step in range(steps):
        STEP_KINDS["sft"].phase("update").run(ctx, 0, step)
    return [r.batch.SerializeToString() for m, r in sent if m == "TrainStep"], PREFETCH.hits - hits


def test_prefetched_conversations_are_the_batches_tokenised_without_prefetch(run):
    ahead, hits = trained_batches(run, overlap=True)
    in_line, none = trained_batches(run, overlap=False)
    assert hits == 2 and none == 0, "steps 1 and 2 were tokenised while the step before trained"
    assert ahead == in_line and len(set(ahead)) == 3
