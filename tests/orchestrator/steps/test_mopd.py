"""The MOPD step's phases on the in-process stack: teachers at the stage's start, generate, teach, update."""

from __future__ import annotations

from services.orchestrator.steps import STEP_KINDS
from tests.orchestrator.steps.test_grpo import SAMPLING, run_step


def mopd(model: str, **extra) -> dict:
    return {"name": "mopd", "type": "mopd", "domains": ["mcqa"], "teachers": {"mcqa": model}, "batch_size": 2,
            "rollouts_per_prompt": 2, "steps": 1, "sampling": SAMPLING, "optimizer": {"lr": 1e-3}, **extra}


def test_the_declared_phases_are_the_chain():
    assert [(p.name, p.queue) for p in STEP_KINDS["mopd"].phases] == [
        ("generate", "rollout"), ("teach", "teacher"), ("update", "train")]


def test_a_step_distils_from_the_teacher_of_each_samples_domain(run, tiny_model_dir):
    ctx = run([mopd(str(tiny_model_dir), grpo_alpha=0.5)])
    STEP_KINDS["mopd"].start_stage(ctx, 0)  # vocabulary checked, teacher loaded and recorded
    assert ctx.ledger.teachers(ctx.run_id, 0)["mcqa"][0] == str(tiny_model_dir)
    ctx.ledger.begin_stage(ctx.run_id, 0, "mopd", "mopd", 1, start_weight_version=0)
    assert run_step(ctx, 0, 0) == ["generated", "scored", "done"]
    sid = ctx.step_id(0, 0)
    out, teacher = ctx.artifacts.get(sid, "rollouts"), ctx.artifacts.get(sid, "teacher")
    assert [len(t) for t in teacher] == [len(t) for t in out["token_ids"]], "a teacher log-prob per completion token"
    record = ctx.ledger.step(sid)
    assert "reward_mean" in record.metrics and ctx.artifacts.has(sid, "scores"), "grpo_alpha: verifier scores too"
    nonempty = sum(1 for t in out["token_ids"] if t)
    assert record.metrics["trained_samples"] <= nonempty


def test_pure_distillation_draws_no_verifier_scores(run, tiny_model_dir):
    ctx = run([mopd(str(tiny_model_dir))])
    STEP_KINDS["mopd"].start_stage(ctx, 0)
    ctx.ledger.begin_stage(ctx.run_id, 0, "mopd", "mopd", 1, start_weight_version=0)
    run_step(ctx, 0, 0)
    sid = ctx.step_id(0, 0)
    assert not ctx.artifacts.has(sid, "scores") and "reward_mean" not in ctx.ledger.step(sid).metrics


def test_a_multi_turn_step_distils_the_policy_tokens_of_whole_trajectories(run, tiny_model_dir):
    ctx = run([mopd(str(tiny_model_dir), domains=["workbench"], teachers={"workbench": str(tiny_model_dir)},
                    env="workbench", max_turns=2, max_episode_tokens=1536,
                    sampling={"temperature": 1.0, "max_tokens": 12, "thinking": False})])
    STEP_KINDS["mopd"].start_stage(ctx, 0)
    ctx.ledger.begin_stage(ctx.run_id, 0, "mopd", "mopd", 1, start_weight_version=0)
    assert run_step(ctx, 0, 0) == ["generated", "scored", "done"]
    sid = ctx.step_id(0, 0)
    out, teacher = ctx.artifacts.get(sid, "rollouts"), ctx.artifacts.get(sid, "teacher")
    for ids, mask, lp, p in zip(out["input_ids"], out["loss_mask"], teacher, out["prompt_len"]):
        assert len(lp) == len(ids), "the teacher scored the whole sequence after the first prompt"
        assert all(x == 0.0 for x in lp[:p]) and all(x < 0.0 for x, m in zip(lp, mask) if m)
    record = ctx.ledger.step(sid)
    assert "reward_mean" in record.metrics, "the env's reward is reported"
    assert record.metrics["trained_samples"] >= 1 and record.weight_version >= 1


def test_the_teacher_and_the_verifiers_score_the_batch_at_once(run, tiny_model_dir):
    from tests.orchestrator.steps.test_grpo import meeting

    ctx = run([mopd(str(tiny_model_dir), grpo_alpha=0.5)])
    STEP_KINDS["mopd"].start_stage(ctx, 0)
    ctx.ledger.begin_stage(ctx.run_id, 0, "mopd", "mopd", 1, start_weight_version=0)
    STEP_KINDS["mopd"].phase("generate").run(ctx, 0, 0)
    meeting(ctx, {"Score", "ScoreTokens"})  # in turn, the first call would wait for ever
    STEP_KINDS["mopd"].phase("teach").run(ctx, 0, 0)
    sid = ctx.step_id(0, 0)
    record = ctx.ledger.step(sid)
    assert record.phase == "scored" and "reward_mean" in record.metrics
    assert ctx.artifacts.has(sid, "teacher") and ctx.artifacts.has(sid, "scores")
    STEP_KINDS["mopd"].phase("teach").run(ctx, 0, 0)  # a redelivery calls nothing (a call would not meet)
    assert ctx.ledger.step(sid).phase == "scored"


def test_the_start_evaluation_is_scored_while_the_teachers_are_drawn_again(run, tiny_model_dir):
    """remeasure_teachers: the reward service scores the start evaluation's samples (the first Score)
    while the policy samples the teacher's checkpoint (the second Generate); then both are recorded."""
    import threading

    from services.orchestrator import runner
    from tests.orchestrator.steps.test_grpo import Through

    ctx = run([mopd(str(tiny_model_dir), remeasure_teachers=True,
                    eval={"prompts_per_domain": 2, "sampling": {"temperature": 1.0, "max_tokens": 4, "thinking": False}})])
    STEP_KINDS["mopd"].start_stage(ctx, 0)
    ctx.ledger.begin_stage(ctx.run_id, 0, "mopd", "mopd", 1, start_weight_version=0)
    barrier = threading.Barrier(2, timeout=20)
    seen: dict[str, int] = {}

    def before(method):
        seen[method] = seen.get(method, 0) + 1
        if (method, seen[method]) in {("Score", 1), ("Generate", 2)}:
            barrier.wait()  # in turn, the evaluation's scoring would wait for ever for the teacher's sampling

    c = ctx.clients
    ctx.clients = type(c)(**{**vars(c), "reward": Through(c.reward, before), "policy": Through(c.policy, before)})
    runner.evaluate(ctx, 0, runner.BASELINE)
    assert {e.domain for e in ctx.ledger.evals(ctx.run_id) if e.step_index == runner.BASELINE} == {"mcqa"}
    assert set(ctx.ledger.fresh_evals(ctx.run_id, 0, "teacher")) == {"mcqa"}
    assert seen["Generate"] == 2 and seen["Score"] == 2


def test_the_teachers_of_a_batchs_domains_score_it_at_once(run, tiny_model_dir):
    from tests.orchestrator.steps.test_grpo import meeting

    model = str(tiny_model_dir)
    ctx = run([mopd(model, domains=["mcqa", "math"], teachers={"mcqa": model, "math": model}, batch_size=4)])
    kind = STEP_KINDS["mopd"]
    kind.start_stage(ctx, 0)
    ctx.ledger.begin_stage(ctx.run_id, 0, "mopd", "mopd", 1, start_weight_version=0)
    kind.phase("generate").run(ctx, 0, 0)
    assert {r.domain for r in kind.batch_records(ctx, 0, 0)} == {"mcqa", "math"}
    meeting(ctx, {"ScoreTokens"})  # one call per domain: in turn, the first would wait for ever
    kind.phase("teach").run(ctx, 0, 0)
    out, teacher = ctx.artifacts.get(ctx.step_id(0, 0), "rollouts"), ctx.artifacts.get(ctx.step_id(0, 0), "teacher")
    assert [len(t) for t in teacher] == [len(t) for t in out["token_ids"]]


def test_the_fresh_draws_take_fresh_samples_a_prompt_and_the_curve_keeps_its_own(run, tiny_model_dir):
    """fresh_samples: the teachers' fresh draw samples that many answers a prompt, the start evaluation
    (a point of the curve) eval.samples_per_prompt; the student's fresh draw at the end as many as the teachers'."""
    from services.orchestrator import evals, runner

    sampling = {"temperature": 1.0, "max_tokens": 4, "thinking": False}
    ctx = run([mopd(str(tiny_model_dir), fresh_samples=3,
                    eval={"prompts_per_domain": 2, "samples_per_prompt": 1, "sampling": sampling})])
    STEP_KINDS["mopd"].start_stage(ctx, 0)
    ctx.ledger.begin_stage(ctx.run_id, 0, "mopd", "mopd", 1, start_weight_version=0)
    runner.evaluate(ctx, 0, runner.BASELINE)
    assert len(ctx.artifacts.get(f"evals/stage-0-step-{runner.BASELINE}", "samples")["texts"]) == 2
    assert len(ctx.artifacts.get("evals/stage-0-teachers-v0", "samples")["texts"]) == 2 * 3
    with evals.Scoring(False) as scoring:
        evals.evaluate_student(ctx, 0, 0, scoring)
    assert len(ctx.artifacts.get("evals/stage-0-student-v0", "samples")["texts"]) == 2 * 3
    assert set(ctx.ledger.fresh_draws(ctx.run_id, 0)["student"]) == {"mcqa"}
