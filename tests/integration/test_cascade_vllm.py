"""A short cascade with the policy and the teachers on vLLM (its CPU build here): GRPO steps, then
MOPD with `teachers: auto`, over real gRPC services and a real Celery worker, checked on the ledger.

The policy's engine starts once and every published version is swapped into it; the MOPD stage's
teacher is the best-evaluated GRPO checkpoint, served by a vLLM engine in the teacher service.
"""

from __future__ import annotations

import json

import pytest

from services.common.supervisor import Supervisor
from services.orchestrator.ledger import Ledger
from services.orchestrator.stack import local_stack
from services.orchestrator.tasks import submit
from tests.integration.test_cascade_run import (
    SAMPLING,
    TERMINAL,
    cascade,
    check_steps,
    grpo_stage,
    settings_for,
    start_worker,
    wait_for,
)
from tests.needs import vllm_or_skip

vllm_or_skip()
pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, tiny_model_dir):
    home = tmp_path_factory.mktemp("vllm-stack")
    built = local_stack(home, tiny_model_dir, backend="vllm")
    sup = Supervisor(home / "logs")
    sup.start_all([s for s in built.specs if s.name != "worker"])
    yield home, built, sup
    sup.stop(grace=5)


def test_grpo_then_mopd_with_auto_teachers_on_vllm(stack, tiny_model_dir):
    home, built, sup = stack
    assert {k: v for k, v in built.specs[0].env.items() if k.endswith("BACKEND")} == {"CASCADE_POLICY_BACKEND": "vllm"}
    mopd = {"name": "mopd", "type": "mopd", "domains": ["mcqa"], "teachers": "auto", "batch_size": 4,
            "rollouts_per_prompt": 2, "steps": 2, "sampling": SAMPLING, "optimizer": {"lr": 1e-3},
            "eval": {"prompts_per_domain": 4, "samples_per_prompt": 2, "sampling": SAMPLING}}
    config = cascade(str(tiny_model_dir), [grpo_stage("grpo", 2), mopd])
    settings = settings_for(stack, f"sqla+sqlite:///{home}/broker.sqlite")
    worker = start_worker(stack, settings.broker_url, "vllm")
    ledger = Ledger(settings.ledger())
    run_id = ledger.create_run(config["name"], config)
    submit(run_id, settings)
    wait_for(ledger, run_id, lambda: ledger.run(run_id).status in TERMINAL, "run did not finish", sup, worker,
             timeout=1800, every=1.0)
    sup.kill(worker)
    run = ledger.run(run_id)
    assert run.status == "succeeded", f"{run.status}: {run.error}; worker log: {sup.tail(worker)}"
    check_steps(ledger, run_id, 4)
    before = [e for e in ledger.evals(run_id) if e.stage_index < 1 and e.domain == "mcqa"]
    best = max(before, key=lambda e: (e.score, -e.stage_index, -e.step_index))
    assert ledger.teachers(run_id, 1)["mcqa"][0] == best.checkpoint
    # the services really ran vLLM, and the policy swapped every version into its one engine
    policy_log = (home / "logs" / "policy.log").read_text()
    ready = [json.loads(line) for line in policy_log.splitlines()
             if line.startswith("{") and json.loads(line).get("msg") == "policy ready"]
    assert [r["backend"] for r in ready] == ["vllm"]
    assert policy_log.count("Initializing a V1 LLM engine") == 1
    teacher_log = (home / "logs" / "teacher.log").read_text()
    assert teacher_log.count("Initializing a V1 LLM engine") >= 1
