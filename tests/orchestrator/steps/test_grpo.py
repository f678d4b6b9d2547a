"""The GRPO step's phases, run in their declared order on the in-process stack (real cores, no gRPC)."""

from __future__ import annotations

import pytest

from services.orchestrator.batches import draw_batch
from services.orchestrator.steps import STEP_KINDS
from services.orchestrator.steps.grpo import reference_domain

SAMPLING = {"temperature": 1.0, "max_tokens": 8, "thinking": False}


def grpo(**extra) -> dict:
    return {"name": "rl", "type": "grpo", "domains": ["mcqa"], "batch_size": 2, "rollouts_per_prompt": 2, "steps": 2,
            "sampling": SAMPLING, "optimizer": {"lr": 1e-3, "weight_decay": 0.01, "grad_clip": 0.5},
            "dynamic_filtering": False, **extra}


def run_step(ctx, stage: int, step: int) -> list[str]:
    kind = STEP_KINDS[ctx.stage(stage).type]
    phases = []
    for phase in kind.phases:
        phase.run(ctx, stage, step)
        phases.append(ctx.ledger.step(ctx.step_id(stage, step)).phase)
    return phases


def test_the_declared_phases_are_the_chain():
    assert [(p.name, p.queue) for p in STEP_KINDS["grpo"].phases] == [
        ("generate", "rollout"), ("score", "reward"), ("update", "train")]


def test_a_step_runs_generate_score_update_and_records_each_phase(run):
    ctx = run([grpo(kl_coef=0.1)])
    STEP_KINDS["grpo"].start_stage(ctx, 0)  # the KL reference: the stage's start weights under reference/rl
    ctx.ledger.begin_stage(ctx.run_id, 0, "rl", "grpo", 2, start_weight_version=0)
    assert run_step(ctx, 0, 0) == ["generated", "scored", "done"]
    sid = ctx.step_id(0, 0)
    out, scores = ctx.artifacts.get(sid, "rollouts"), ctx.artifacts.get(sid, "scores")
    drawn = draw_batch(STEP_KINDS["grpo"].pool(ctx, 0), 0, 0, 0, 2)
    assert out["task_ids"] == [r.id for r in drawn], "the batch is the one drawn for (seed, stage, step)"
    assert len(out["texts"]) == len(scores["rewards"]) == 4
    reference = ctx.artifacts.get(sid, "reference")
    assert [len(r) for r in reference] == [len(t) for t in out["token_ids"]]
    record = ctx.ledger.step(sid)
    valid = [r for r, v in zip(scores["rewards"], scores["verdicts"]) if v != "error"]
    assert record.metrics["reward_mean"] == pytest.approx(sum(valid) / len(valid))
    assert record.metrics["train/lr"] == pytest.approx(1e-3) and record.weight_version >= 1
    assert reference_domain("rl") == "reference/rl"


def test_each_phase_is_idempotent(run):
    ctx = run([grpo()])
    ctx.ledger.begin_stage(ctx.run_id, 0, "rl", "grpo", 2, start_weight_version=0)
    kind = STEP_KINDS["grpo"]
    kind.phase("generate").run(ctx, 0, 0)
    sid = ctx.step_id(0, 0)
    first = ctx.artifacts.get(sid, "rollouts")
    kind.phase("generate").run(ctx, 0, 0)  # a redelivered task: nothing sampled again
    assert ctx.artifacts.get(sid, "rollouts") == first
    kind.phase("score").run(ctx, 0, 0)
    kind.phase("update").run(ctx, 0, 0)
    version = ctx.ledger.step(sid).weight_version
    kind.phase("update").run(ctx, 0, 0)  # trained once: no second TrainStep, no second version
    record = ctx.ledger.step(sid)
    assert record.weight_version == version and record.metrics["train/replayed"] == 0.0
    assert record.attempts == 2, "the redelivered generate is counted as an attempt, and did nothing else"


def test_an_unknown_phase_is_named():
    with pytest.raises(KeyError, match="GrpoStep has no phase 'teach'"):
        STEP_KINDS["grpo"].phase("teach")


def test_every_train_step_carries_the_stage_optimizer_and_the_sampling(run):
    """What the trainer needs to apply the stage's settings (issue 20): rate, weight decay, clipping,
    and π_inf's temperature/filters and the KL estimator in the loss params."""
    ctx = run([grpo(kl_coef=0.1, kl_clamp=5.0, tis_cap=2.0, sampling={**SAMPLING, "temperature": 0.7, "top_p": 0.9})])
    STEP_KINDS["grpo"].start_stage(ctx, 0)
    ctx.ledger.begin_stage(ctx.run_id, 0, "rl", "grpo", 2, start_weight_version=0)
    sent = []
    trainer = ctx.clients.trainer

    class Recording:  # passes every call through to the real trainer servicer, keeping the requests
        def call(self, method, request, timeout=None):
            sent.append((method, request))
            return trainer.call(method, request, timeout)

    ctx.clients = type(ctx.clients)(**{**vars(ctx.clients), "trainer": Recording()})
    run_step(ctx, 0, 0)
    train = [r for m, r in sent if m == "TrainStep"]
    if not train:  # every sample masked out: nothing to learn from is a skipped step
        assert ctx.ledger.step(ctx.step_id(0, 0)).metrics["train/skipped"] == 1.0
        return
    (request,) = train
    assert (request.weight_decay, request.grad_clip) == pytest.approx((0.01, 0.5))
    assert request.learning_rate == pytest.approx(1e-3) and request.reset_optimizer
    p = request.params
    assert (p.temperature, p.top_p, p.top_k) == pytest.approx((0.7, 0.9, 0))
    assert (p.kl_coef, p.kl_estimator, p.kl_clamp, p.tis_cap) == pytest.approx((0.1, "k2", 5.0, 2.0))


def test_a_multi_turn_step_trains_on_whole_trajectories(run):
    """env: workbench — G episodes per task on the env service, the env's reward, env tokens out of the mask."""
    ctx = run([grpo(domains=["workbench"], env="workbench", max_turns=2, max_episode_tokens=1536, steps=1,
                    sampling={"temperature": 1.0, "max_tokens": 12, "thinking": False})])
    ctx.ledger.begin_stage(ctx.run_id, 0, "rl", "grpo", 1, start_weight_version=0)
    assert run_step(ctx, 0, 0) == ["generated", "scored", "done"]
    sid = ctx.step_id(0, 0)
    out, scores = ctx.artifacts.get(sid, "rollouts"), ctx.artifacts.get(sid, "scores")
    assert len(out["input_ids"]) == 4 and scores["rewards"] == out["rewards"]
    assert out["task_ids"] == [t["id"] for t in draw_batch(STEP_KINDS["grpo"].pool(ctx, 0), 0, 0, 0, 2)]
    for ids, mask in zip(out["input_ids"], out["loss_mask"]):
        assert len(ids) == len(mask) and mask[0] == 0 and sum(mask) >= 1
    record = ctx.ledger.step(sid)
    assert record.metrics["episodes/turns_mean"] == pytest.approx(sum(out["turns"]) / 4)
    assert {"episodes/env_seconds_per_turn", "episodes/tool_errors", "episodes/limit_turns",
            "episodes/limit_tokens", "episodes/limit_env_seconds"} <= set(record.metrics)
    assert record.metrics["train/replayed"] == 0.0 and record.weight_version >= 1


class Through:
    """A client that passes every call through to the real servicer, `before(method)` first."""

    def __init__(self, client, before):
        self.client, self.before = client, before

    def call(self, method, request, timeout=None):
        self.before(method)
        return self.client.call(method, request, timeout)

    call_each = call


def meeting(ctx, methods: set[str], parties: int = 2):
    """ctx's reward and teacher clients made to hold each call of `methods` until `parties` of them
    run at once (a barrier): calls made in turn never meet, and the first raises BrokenBarrierError."""
    import threading

    barrier = threading.Barrier(parties, timeout=20)
    threads: list[str] = []

    def before(method):
        if method in methods:
            threads.append(threading.current_thread().name)
            barrier.wait()

    c = ctx.clients
    ctx.clients = type(c)(**{**vars(c), "reward": Through(c.reward, before), "teachers": Through(c.teachers, before)})
    return threads


def test_the_verifiers_and_the_kl_reference_score_the_batch_at_once(run):
    ctx = run([grpo(kl_coef=0.1, steps=1)])
    STEP_KINDS["grpo"].start_stage(ctx, 0)
    ctx.ledger.begin_stage(ctx.run_id, 0, "rl", "grpo", 1, start_weight_version=0)
    STEP_KINDS["grpo"].phase("generate").run(ctx, 0, 0)
    meeting(ctx, {"Score", "ScoreTokens"})  # in turn, the first call would wait for ever
    STEP_KINDS["grpo"].phase("score").run(ctx, 0, 0)
    sid = ctx.step_id(0, 0)
    assert ctx.ledger.step(sid).phase == "scored"
    assert ctx.artifacts.has(sid, "scores") and ctx.artifacts.has(sid, "reference")


def test_with_overlap_off_every_call_is_made_in_turn(run):
    import threading

    ctx = run([grpo(kl_coef=0.1, steps=1)])
    ctx.settings = ctx.settings.model_copy(update={"overlap": False})
    STEP_KINDS["grpo"].start_stage(ctx, 0)
    ctx.ledger.begin_stage(ctx.run_id, 0, "rl", "grpo", 1, start_weight_version=0)
    STEP_KINDS["grpo"].phase("generate").run(ctx, 0, 0)
    threads = meeting(ctx, {"Score", "ScoreTokens"}, parties=1)
    STEP_KINDS["grpo"].phase("score").run(ctx, 0, 0)
    assert threads == [threading.current_thread().name] * 2


def prepared_steps(run, overlap: bool, steps: int = 3) -> tuple[list[dict], int]:
    """The `rollouts` artefacts of `steps` GRPO steps run with overlap on or off, and the prefetch hits."""
    from services.orchestrator.overlap import PREFETCH

    ctx = run([grpo(steps=steps)])
    ctx.settings = ctx.settings.model_copy(update={"overlap": overlap})
    ctx.ledger.begin_stage(ctx.run_id, 0, "rl", "grpo", steps, start_weight_version=0)
    hits = PREFETCH.hits
    for step in range(steps):
        run_step(ctx, 0, step)
    return [ctx.artifacts.get(ctx.step_id(0, s), "rollouts") for s in range(steps)], PREFETCH.hits - hits


def test_prefetched_prompts_are_the_batches_drawn_without_prefetch(run):
    ahead, hits = prepared_steps(run, overlap=True)
    in_line, none = prepared_steps(run, overlap=False)
    assert hits == 2 and none == 0, "steps 1 and 2 were prepared while the step before trained"
    for a, b in zip(ahead, in_line):
        assert (a["task_indices"], a["task_ids"], a["prompt_ids"]) == (b["task_indices"], b["task_ids"], b["prompt_ids"])
    assert len({tuple(a["task_ids"]) for a in ahead}) == 3, "each step its own batch"


def test_prompts_rendered_ahead_are_the_token_ids_the_policy_makes_of_them(run):
    """rollout.render_prompt (sent as token ids) against the policy's own chat-template rendering."""
    from services.orchestrator import rollout
    from services.orchestrator.cascade_config import SamplingConfig

    ctx = run([grpo()])
    kind = STEP_KINDS["grpo"]
    for thinking in (False, True):
        records = kind.pool(ctx, 0)[:3]
        sampling = SamplingConfig(max_tokens=1, thinking=thinking)
        by_policy = rollout.generate(ctx.clients.policy, records, 1, sampling, 0)["prompt_ids"]
        mine = [rollout.render_prompt(ctx.tokenizer, r, thinking) for r in records]
        assert mine == by_policy
        sent = rollout.generate(ctx.clients.policy, records, 1, sampling, 0, prompt_ids=mine)["prompt_ids"]
        assert sent == by_policy


def test_a_call_past_the_policy_limit_goes_as_several_requests_with_the_same_samples(run, tiny_model_dir):
    """rollout.generate splits prompts x n above `request_samples` into requests of whole prompts; a policy
    that takes 6 samples a request then serves 5 prompts x 3 (it refuses them as one request), and the
    samples are those one large request draws (keyed by seed, prompt and index, not by the request)."""
    from services.common.errors import InvalidArgument
    from services.orchestrator import rollout
    from services.orchestrator.cascade_config import SamplingConfig
    from services.policy.config import PolicyConfig
    from services.policy.core import PolicyCore
    from services.policy.server import PolicyServicer
    from tests.orchestrator.steps.conftest import InProcess

    ctx = run([grpo()])
    records = STEP_KINDS["grpo"].pool(ctx, 0)[:5]
    sampling = SamplingConfig(max_tokens=6, temperature=1.0)
    whole = rollout.generate(ctx.clients.policy, records, 3, sampling, 11)
    small = InProcess(PolicyServicer(PolicyCore.build(PolicyConfig(model=str(tiny_model_dir), max_request_samples=6))))
    with pytest.raises(InvalidArgument, match="max_request_samples"):
        rollout.generate(small, records, 3, sampling, 11)
    parts = rollout.generate(small, records, 3, sampling, 11, request_samples=6)
    for key in ("prompt_ids", "token_ids", "texts", "truncated"):
        assert parts[key] == whole[key], key
    assert len(parts["texts"]) == 15
