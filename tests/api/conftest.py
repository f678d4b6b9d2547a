"""Fixtures of the API tests: the production core over an embedded ledger and broker in a temp folder,
and a small run recorded through the Ledger API (two GRPO stages, an MOPD stage, an rm stage), with
the per-prompt scores behind each evaluation (100 prompts, the first ones passing)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from services.api.app import build_app
from services.api.config import ApiSettings
from services.api.core import build_core
from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.config import OrchestratorSettings

GRPO = {"batch_size": 4, "rollouts_per_prompt": 2, "optimizer": {"lr": 1e-3}}
STAGES = [
    {"name": "if-rl", "type": "grpo", "domains": ["if"], "steps": 2, **GRPO, "eval": {"domains": ["if", "mcqa"]}},
    {"name": "mcqa-rl", "type": "grpo", "domains": ["mcqa"], "steps": 2, **GRPO, "eval": {"domains": ["if", "mcqa"]}},
    {"name": "rm", "type": "rm", "domains": ["rlhf"], "output": "the-rm", "batch_size": 2, "steps": 1,
     "optimizer": {"lr": 1e-3}},
    {"name": "mopd", "type": "mopd", "domains": ["if", "mcqa"], "teachers": "auto", "steps": 3, **GRPO},
]
CASCADE = {"name": "small", "model": "/models/tiny", "stages": STAGES}
SCORES = {  # (stage, step) -> {domain: score}; step -1 = the stage's baseline
    (0, -1): {"if": 0.2, "mcqa": 0.3}, (0, 1): {"if": 0.6, "mcqa": 0.3},
    (1, -1): {"if": 0.6, "mcqa": 0.3}, (1, 1): {"if": 0.4, "mcqa": 0.7},
    (3, -1): {"if": 0.4, "mcqa": 0.7},
}
PROMPTS = 100


def passing(score: float, n: int = PROMPTS) -> dict[str, float]:
    """Per-prompt scores with mean `score`: the first round(score * n) of n validation prompts pass."""
    return {f"task-{i:03d}": float(i < round(score * n)) for i in range(n)}


TIMINGS = {"generated": 2.0, "scored": 0.5, "trained": 1.5, "published": 0.25, "synced": 0.125}


def record_run(ledger, status: str = "running") -> int:
    """Stages 0-2 done; MOPD began with teachers chosen, its step 0 done and step 1 at `scored`."""
    run_id = ledger.create_run("small", CascadeConfig.model_validate(CASCADE).model_dump(mode="json"))
    ledger.set_run_status(run_id, status)
    version = 0
    for s, st in enumerate(STAGES):
        ledger.begin_stage(run_id, s, st["name"], st["type"], st["steps"], start_weight_version=version)
        steps = st["steps"] if s < 3 else 2
        for k in range(-1, steps):
            if k >= 0:
                sid = ledger.begin_step(run_id, s, k).step_id
                for phase, seconds in TIMINGS.items():
                    if s == 3 and k == 1 and phase == "trained":
                        break
                    if phase == "published":
                        version += 1
                    ledger.advance(sid, phase, seconds=seconds, metrics={"loss": 0.5} if phase == "trained" else None,
                                   weight_version=version if phase == "published" else None)
                else:
                    ledger.advance(sid, "done")
            for domain, score in SCORES.get((s, k), {}).items():
                ledger.record_eval(run_id, s, k, version, f"/w/v{version}", domain, score, 4, passing(score))
        if s == 3:
            ledger.record_teacher(run_id, 3, "if", "/w/v2", 0.6)
            ledger.record_teacher(run_id, 3, "mcqa", "/w/v4", 0.7)
            ledger.record_fresh_eval(run_id, 3, "teacher", "mcqa", "/w/v4", 0.65, 8, passing(0.65))
            ledger.record_fresh_eval(run_id, 3, "student", "mcqa", "/w/v7", 0.62, 8, passing(0.62))
        else:
            ledger.set_stage_status(run_id, s, "succeeded")
    return run_id


@pytest.fixture
def orchestrator(tmp_path) -> OrchestratorSettings:
    """The embedded shape: SQLite ledger and SQLite broker under a temp home."""
    return OrchestratorSettings(home=tmp_path / "home")


@pytest.fixture
def core(orchestrator):
    built = build_core(orchestrator=orchestrator)
    yield built
    built.ledger.close()


@pytest.fixture
def client(core) -> TestClient:
    return TestClient(build_app(ApiSettings(), core))
