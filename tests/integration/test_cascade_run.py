"""A real cascade over real gRPC services and a real Celery worker, checked on the ledger.

The services (policy, teacher, reward, trainer, reward-model trainer) run as processes on
loopback, built from the tiny model (and the env service). A two-stage cascade (GRPO, then MOPD with `teachers: auto`)
runs on the embedded SQLite broker; one GRPO step runs on Redis and on RabbitMQ. The assertions
read the ledger: every step recorded once and done, weight versions strictly increasing, and the
teacher of each MOPD domain the best-evaluated checkpoint before the stage.
"""

from __future__ import annotations

import json
import secrets
import time

import pytest

from services.common.grpc_client import ReplicaClient
from services.common.pb import trainer_pb2, trainer_pb2_grpc
from services.common.supervisor import Supervisor
from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.celery_app import queue_names
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.ledger import Ledger
from services.orchestrator.stack import local_stack
from services.orchestrator.tasks import submit

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TERMINAL = ("succeeded", "failed", "cancelled")
SAMPLING = {"temperature": 1.0, "max_tokens": 12, "thinking": False}


def grpo_stage(name: str, steps: int) -> dict:
    return {"name": name, "type": "grpo", "domains": ["mcqa"], "batch_size": 4, "rollouts_per_prompt": 2,
            "steps": steps, "sampling": SAMPLING, "optimizer": {"lr": 1e-3}, "eval_every": 1,
            "dynamic_filtering": False, "eval": {"prompts_per_domain": 4}}


def cascade(model: str, stages: list[dict]) -> dict:
    return CascadeConfig.model_validate({"name": "it", "seed": 0, "model": model, "data": "synthetic",
                                         "stages": stages}).model_dump(mode="json")


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_model_dir):
    home = tmp_path_factory.mktemp("stack")
    built = local_stack(home, tiny_model_dir, env=True)  # the env service too (the multi-turn cascade)
    sup = Supervisor(home / "logs")
    sup.start_all([s for s in built.specs if s.name != "worker"])
    yield home, built, sup
    sup.stop(grace=5)


def settings_for(stack, broker_url: str, prefix: str = "") -> OrchestratorSettings:
    env = {**stack[1].env, "CASCADE_ORCH_BROKER_URL": broker_url, "CASCADE_ORCH_QUEUE_PREFIX": prefix}
    return OrchestratorSettings(**{k[len("CASCADE_ORCH_"):].lower(): v for k, v in env.items()})


def start_worker(stack, broker_url: str, name: str, prefix: str = "") -> str:
    _home, built, sup = stack
    worker = next(s for s in built.specs if s.name == "worker")
    env = {**worker.env, **built.env, "CASCADE_ORCH_BROKER_URL": broker_url, "CASCADE_ORCH_QUEUE_PREFIX": prefix}
    argv = list(worker.argv)  # the stack's worker consumes the unprefixed queues: this one, the prefix's
    argv[argv.index("-Q") + 1] = ",".join(queue_names(prefix))
    sup.start(type(worker)(f"worker-{name}", argv, env, restart=False), wait=False)
    return f"worker-{name}"


def wait_for(ledger: Ledger, run_id: int, until, what: str, sup, worker: str, timeout: float = 420,
             every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, f"{what}: {ledger.resume_point(run_id)}; worker: {sup.tail(worker)}"
        time.sleep(every)


def run_on(stack, broker_url: str, name: str, config: dict) -> tuple[Ledger, int]:
    """One run on a shared broker (Redis, RabbitMQ) under queue names of its own: a worker that
    anything else left on that broker (another checkout's test, a demo) cannot take its tasks."""
    sup = stack[2]
    prefix = f"it{secrets.token_hex(3)}."
    settings = settings_for(stack, broker_url, prefix)
    worker = start_worker(stack, broker_url, name, prefix)
    ledger = Ledger(settings.ledger())
    run_id = ledger.create_run(config["name"], config)
    submit(run_id, settings)
    wait_for(ledger, run_id, lambda: ledger.run(run_id).status in TERMINAL, "run did not finish", sup, worker)
    sup.kill(worker)
    run = ledger.run(run_id)
    assert run.status == "succeeded", f"{run.status}: {run.error}; worker log: {sup.tail(worker)}"
    return ledger, run_id


def trainer_global_step(stack) -> int:
    address = stack[1].env["CASCADE_ORCH_TRAINER_ADDRESS"]
    with ReplicaClient(address, trainer_pb2_grpc.TrainerServiceStub) as client:
        return client.call("GetState", trainer_pb2.GetStateRequest(), timeout=30).global_step


def check_steps(ledger: Ledger, run_id: int, expected: int, replay_allowed: bool = False) -> None:
    """Every step recorded once and done, weight versions increasing. A replayed TrainStep (the
    trainer answering a step id it had applied) is the exactly-once guard at work after a kill, and
    a sign of a duplicate send anywhere else."""
    steps = ledger.steps(run_id)
    assert len(steps) == expected
    assert len({(s.stage_index, s.step_index) for s in steps}) == expected, "a step recorded twice"
    assert all(s.phase == "done" for s in steps)
    if not replay_allowed:
        assert all(s.metrics.get("train/replayed", 0.0) == 0.0 for s in steps), "a step was sent to the trainer twice"
    versions = [s.weight_version for s in steps]
    assert all(b > a for a, b in zip(versions, versions[1:])), f"weight versions not increasing: {versions}"
    published = [v for v, _uri, _sha in ledger.weight_versions(run_id)]
    assert published == sorted(set(published)) and set(versions) <= set(published)


def test_grpo_then_mopd_with_auto_teachers_on_the_sqlite_broker(stack, tiny_model_dir):
    home = stack[0]
    mopd = {"name": "mopd", "type": "mopd", "domains": ["mcqa"], "teachers": "auto", "batch_size": 4,
            "rollouts_per_prompt": 2, "steps": 2, "sampling": SAMPLING, "optimizer": {"lr": 1e-3},
            "eval": {"prompts_per_domain": 4, "samples_per_prompt": 2, "sampling": SAMPLING}}
    config = cascade(str(tiny_model_dir), [grpo_stage("grpo", 2), mopd])
    ledger, run_id = run_on(stack, f"sqla+sqlite:///{home}/broker.sqlite", "sqlite", config)
    check_steps(ledger, run_id, 4)
    resets = [(s.stage_index, s.step_index) for s in ledger.steps(run_id) if s.metrics.get("train/optimizer_reset")]
    assert resets == [(0, 0), (1, 0)], "each stage starts from fresh AdamW moments"
    before = [e for e in ledger.evals(run_id) if e.stage_index < 1 and e.domain == "mcqa"]
    assert len(before) == 3, "baseline + after each of the 2 GRPO steps"
    best = max(before, key=lambda e: (e.score, -e.stage_index, -e.step_index))
    chosen = ledger.teachers(run_id, 1)
    assert chosen["mcqa"][0] == best.checkpoint and chosen["mcqa"][1] == pytest.approx(best.score)
    assert {e.stage_index for e in ledger.evals(run_id)} == {0, 1}
    # the teacher drawn again at the stage's start and the student at its end, with MOPD's eval sampling
    # (4 prompts x 2 samples) and one fresh seed; their samples kept
    teacher, student = (ledger.fresh_evals(run_id, 1, role) for role in ("teacher", "student"))
    assert set(teacher) == set(student) == {"mcqa"} and 0.0 <= teacher["mcqa"] <= 1.0 and 0.0 <= student["mcqa"] <= 1.0
    # the per-prompt scores behind every evaluation and fresh draw (what the claims' intervals resample)
    prompts = ledger.prompt_scores(run_id)
    for e in ledger.evals(run_id):
        scores = prompts[("eval", e.stage_index, e.step_index, e.domain)]
        assert scores and sum(scores.values()) / len(scores) == pytest.approx(e.score), e
    for role, drawn in (("teacher", teacher), ("student", student)):
        assert len(prompts[(role, 1, 0, "mcqa")]) == 4
        assert sum(prompts[(role, 1, 0, "mcqa")].values()) / 4 == pytest.approx(drawn["mcqa"])
    for role in ("teachers", "student"):
        [samples] = (home / "runs" / str(run_id)).rglob(f"*stage-1-{role}-v*/samples.json")
        assert len(json.loads(samples.read_text())["texts"]) == 8
    # the worker logs one JSON object per line, the run's own records included
    records = [json.loads(line) for line in (home / "logs" / "worker-sqlite.log").read_text().splitlines()
               if line.startswith("{")]
    started = [r["stage"] for r in records if r["msg"] == "stage started" and r["run_id"] == run_id]
    assert started == ["grpo", "mopd"]


@pytest.mark.redis
def test_a_grpo_step_on_redis(stack, tiny_model_dir, redis_url):
    ledger, run_id = run_on(stack, redis_url, "redis", cascade(str(tiny_model_dir), [grpo_stage("grpo", 1)]))
    check_steps(ledger, run_id, 1)


@pytest.mark.rabbitmq
def test_a_grpo_step_on_rabbitmq(stack, tiny_model_dir, rabbitmq_url):
    ledger, run_id = run_on(stack, rabbitmq_url, "rabbitmq", cascade(str(tiny_model_dir), [grpo_stage("grpo", 1)]))
    check_steps(ledger, run_id, 1)


def test_a_killed_worker_costs_time_not_data_and_cancel_stops_cleanly(stack, tiny_model_dir):
    """SIGKILL the worker mid-step; a new worker and a resubmission finish the run, each step once.
    Then a second run is cancelled mid-stage and stops without starting another step."""
    home, _built, sup = stack
    broker = f"sqla+sqlite:///{home}/broker-faults.sqlite"
    settings = settings_for(stack, broker)
    ledger = Ledger(settings.ledger())
    config = cascade(str(tiny_model_dir), [grpo_stage("grpo", 6)])
    run_id = ledger.create_run("killed", config)
    applied_before = trainer_global_step(stack)
    worker = start_worker(stack, broker, "doomed")
    submit(run_id, settings)

    def mid_step():  # a step of the tiny model takes ~0.2 s: look often, and kill inside one
        return any(s.phase != "done" for s in ledger.steps(run_id))

    wait_for(ledger, run_id, mid_step, "no step started", sup, worker, every=0.02)
    sup.kill(worker)
    assert ledger.run(run_id).status not in TERMINAL, "the run ended before the kill"
    worker = start_worker(stack, broker, "rescuer")
    submit(run_id, settings)  # what `cascade resume` does: the runner picks up from the ledger
    wait_for(ledger, run_id, lambda: ledger.run(run_id).status in TERMINAL, "resumed run did not finish", sup, worker)
    assert ledger.run(run_id).status == "succeeded", ledger.run(run_id).error
    # the kill may land after TrainStep applied a step and before the ledger recorded it: the retried
    # task's TrainStep is then a replay, and the trainer's step count shows nothing was applied twice
    check_steps(ledger, run_id, 6, replay_allowed=True)
    assert trainer_global_step(stack) - applied_before == 6, "a step was applied twice (or lost)"
    assert max(s.attempts for s in ledger.steps(run_id)) >= 1

    cancelled = ledger.create_run("cancelled", cascade(str(tiny_model_dir), [grpo_stage("grpo", 20)]))
    submit(cancelled, settings)
    wait_for(ledger, cancelled, lambda: len(ledger.steps(cancelled)) >= 2, "no step started", sup, worker)
    ledger.request_cancel(cancelled)
    wait_for(ledger, cancelled, lambda: ledger.run(cancelled).status in TERMINAL, "cancel ignored", sup, worker)
    assert ledger.run(cancelled).status == "cancelled"
    begun = len(ledger.steps(cancelled))
    time.sleep(2)
    assert len(ledger.steps(cancelled)) == begun < 20, "no step starts after a cancel"
    sup.kill(worker)


def test_mopd_with_an_explicit_teacher_map_loads_each_teacher(stack, tiny_model_dir):
    home = stack[0]
    mopd = {"name": "mopd", "type": "mopd", "domains": ["mcqa"], "teachers": {"mcqa": str(tiny_model_dir)},
            "batch_size": 2, "rollouts_per_prompt": 2, "steps": 1, "sampling": SAMPLING, "optimizer": {"lr": 1e-3},
            "eval": {"prompts_per_domain": 2}}
    ledger, run_id = run_on(stack, f"sqla+sqlite:///{home}/broker-explicit.sqlite", "explicit",
                            cascade(str(tiny_model_dir), [mopd]))
    check_steps(ledger, run_id, 1)
    assert ledger.teachers(run_id, 0)["mcqa"][0] == str(tiny_model_dir)


def test_a_reward_model_stage_feeds_the_rlhf_stage(stack, tiny_model_dir):
    """`rm` trains on the reward-model trainer without touching policy versions, starting from the
    policy's weights; the next stage's `rlhf` rewards come from the model it published."""
    home = stack[0]
    rm = {"name": "rm", "type": "rm", "domains": ["rlhf"], "output": "it-rm", "batch_size": 2, "steps": 2,
          "max_seq_len": 64, "optimizer": {"lr": 1e-3}}
    rlhf = {**grpo_stage("rlhf", 1), "domains": ["rlhf"], "reward_model": "it-rm"}
    ledger, run_id = run_on(stack, f"sqla+sqlite:///{home}/broker-rm.sqlite", "rm",
                            cascade(str(tiny_model_dir), [rm, rlhf]))
    steps = ledger.steps(run_id)
    assert [(s.stage_index, s.phase) for s in steps] == [(0, "done"), (0, "done"), (1, "done")]
    assert [s.weight_version for s in steps[:2]] == [None, None], "a reward model is not a policy version"
    first, second = (s.metrics for s in steps[:2])
    assert first["train/init_copied"] > 0 and first["train/init_fresh"] == 1, "starts from the policy, fresh head"
    assert "train/init_copied" not in second
    assert steps[2].weight_version and all(e.domain == "rlhf" for e in ledger.evals(run_id))


def test_sft_publishes_only_the_weights_an_evaluation_or_the_next_stage_reads(stack, tiny_model_dir):
    """The policy does not sample during SFT: 4 steps with an evaluation after step 1 publish two
    versions (steps 1 and 3), and each evaluation scores the version published just before it
    (avg@3: three sampled answers per validation prompt)."""
    home = stack[0]
    sft = {"name": "sft", "type": "sft", "domains": ["mcqa"], "batch_size": 2, "steps": 4, "max_seq_len": 64,
           "optimizer": {"lr": 1e-3}, "eval_every": 2,
           "eval": {"prompts_per_domain": 2, "samples_per_prompt": 3, "sampling": SAMPLING}}
    ledger, run_id = run_on(stack, f"sqla+sqlite:///{home}/broker-sft.sqlite", "sft", cascade(str(tiny_model_dir), [sft]))
    versions = [s.weight_version for s in ledger.steps(run_id)]
    assert versions[0] is None and versions[2] is None and versions[1] and versions[3] > versions[1], versions
    evals = {e.step_index: e.weight_version for e in ledger.evals(run_id)}
    assert evals[1] == versions[1] and evals[3] == versions[3], evals
    assert {e.n for e in ledger.evals(run_id)} <= {6}, "2 prompts x 3 samples each (errored samples would be fewer)"


def test_multi_turn_grpo_then_mopd_on_workbench_episodes(stack, tiny_model_dir):
    """env: workbench — GRPO 2 steps then MOPD 2 steps whose samples are whole episodes on the env service."""
    home = stack[0]
    episodes = {"domains": ["workbench"], "env": "workbench", "max_turns": 2, "max_episode_tokens": 1536,
                "batch_size": 2, "rollouts_per_prompt": 2, "steps": 2, "sampling": SAMPLING,
                "optimizer": {"lr": 1e-3}, "eval": {"prompts_per_domain": 2, "domains": ["mcqa"]}}
    stages = [{"name": "agent-grpo", "type": "grpo", "dynamic_filtering": False, **episodes},
              {"name": "agent-mopd", "type": "mopd", "teachers": {"workbench": str(tiny_model_dir)}, **episodes}]
    ledger, run_id = run_on(stack, f"sqla+sqlite:///{home}/broker-episodes.sqlite", "episodes",
                            cascade(str(tiny_model_dir), stages))
    check_steps(ledger, run_id, 4)
    for s in ledger.steps(run_id):
        assert s.metrics["samples"] == 4 and s.metrics["episodes/turns_mean"] >= 1.0
        assert "episodes/env_seconds_per_turn" in s.metrics and "reward_mean" in s.metrics
        assert s.metrics.get("train/skipped", 0.0) == 0.0, "every step trained on its trajectories"
    from services.orchestrator.artifacts import ArtifactStore

    store = ArtifactStore(home / "runs" / str(run_id) / "steps")
    for s in ledger.steps(run_id):
        out = store.get(s.step_id, "rollouts")
        assert len(out["input_ids"]) == 4 and all(len(i) == len(m) for i, m in zip(out["input_ids"], out["loss_mask"]))
        assert all(m[0] == 0 and sum(m) >= 1 for m in out["loss_mask"]), "the prompt is out of the mask, turns in"


def test_sft_on_tool_conversations_then_multi_turn_grpo_scored_by_validation_episodes(stack, tiny_model_dir, tmp_path):
    """`cascade data synth --env workbench` writes workbench tasks and SFT conversations played on the env
    core; an SFT stage trains on them (with the tool domain), then an env GRPO stage is evaluated at its
    start and end by whole validation episodes on the env service, recorded with their per-task scores."""
    from typer.testing import CliRunner

    from services.cli.data import app
    from services.orchestrator import datasets
    from services.orchestrator.batches import draw_batch
    from services.orchestrator.report import run_claims
    from services.orchestrator.steps.sft import tokenize_conversations

    home, data = stack[0], tmp_path / "agentic"
    done = CliRunner().invoke(app, ["synth", "--out", str(data), "--domains", "tool", "--env", "workbench",
                                    "--train", "4", "--val", "2", "--sft", "8"])
    assert done.exit_code == 0, done.output
    sft = {"name": "sft", "type": "sft", "domains": ["tool", "workbench"], "data": str(data), "batch_size": 4,
           "steps": 2, "max_seq_len": 2048, "optimizer": {"lr": 1e-3},
           "eval": {"prompts_per_domain": 2, "domains": ["tool"], "at_start": False}}
    rl = {"name": "workbench-rl", "type": "grpo", "domains": ["workbench"], "env": "workbench", "data": str(data),
          "max_turns": 3, "max_episode_tokens": 2048, "batch_size": 2, "rollouts_per_prompt": 2, "steps": 2,
          "sampling": SAMPLING, "optimizer": {"lr": 1e-3}, "dynamic_filtering": False,
          "eval": {"prompts_per_domain": 2, "samples_per_prompt": 2, "sampling": SAMPLING}}
    config = cascade(str(tiny_model_dir), [sft, rl])
    ledger, run_id = run_on(stack, f"sqla+sqlite:///{home}/broker-toolsft.sqlite", "toolsft", config)
    steps = ledger.steps(run_id)
    assert [(s.stage_index, s.step_index, s.phase) for s in steps] == [(0, 0, "done"), (0, 1, "done"), (1, 0, "done"),
                                                                        (1, 1, "done")]
    versions = [s.weight_version for s in steps if s.weight_version]  # SFT publishes for its reader only (step 1)
    assert steps[1].weight_version and versions == sorted(set(versions)) and len(versions) == 3, versions
    from services.common.modelio import load_tokenizer

    tok, pool = load_tokenizer(tiny_model_dir), datasets.sft_examples(data, ["tool", "workbench"])
    with_tools = 0
    for s in ledger.steps(run_id)[:2]:  # the SFT steps trained on the drawn conversations, tool results included
        batch = draw_batch(pool, 0, 0, s.step_index, 4)
        rows, _masks = tokenize_conversations(tok, batch, 2048)
        assert s.metrics["tokens"] == sum(map(len, rows)) and s.metrics["sequences"] == 4
        with_tools += sum(any(m["role"] == "tool" for m in ex["messages"]) for ex in batch)
    assert with_tools >= 1, "a workbench conversation with tool results was trained on"
    episodes = {e.step_index: e for e in ledger.evals(run_id) if e.stage_index == 1 and e.domain == "workbench"}
    assert sorted(episodes) == [-1, 1] and all(e.n == 4 for e in episodes.values()), episodes
    prompts = ledger.prompt_scores(run_id)
    for e in episodes.values():
        scores = prompts[("eval", 1, e.step_index, "workbench")]
        assert sorted(scores) == ["workbench-validation-0", "workbench-validation-1"]
        assert sum(scores.values()) / 2 == pytest.approx(e.score)
    from services.orchestrator.artifacts import ArtifactStore

    kept = ArtifactStore(home / "runs" / str(run_id) / "steps").get("evals/stage-1-step--1-episodes", "samples")
    assert len(kept["turns"]) == 4 and all(t >= 1 for t in kept["turns"]), kept
    gains = next(c for c in run_claims(ledger, run_id) if c.claim.startswith("each RL stage"))
    assert [f.subject for f in gains.figures] == ["workbench-rl/workbench"] and gains.figures[0].n == 2
