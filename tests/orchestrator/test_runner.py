"""The runner's plan over a real SQLite ledger: which evaluation or step comes next."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.ledger import PHASES, Ledger
from services.orchestrator.runner import Action, plan


def cascade(sft_at_start: bool) -> CascadeConfig:
    return CascadeConfig.model_validate({
        "name": "t",
        "model": "/models/tiny",
        "stages": [
            {"name": "sft", "type": "sft", "domains": ["if"], "batch_size": 2, "steps": 1,
             "optimizer": {"lr": 1e-3}, "eval": {"at_start": sft_at_start}},
            {"name": "rl", "type": "grpo", "domains": ["if"], "batch_size": 2, "rollouts_per_prompt": 2,
             "steps": 1, "optimizer": {"lr": 1e-4}},
        ],
    })


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield led
    led.close()


def walk(ledger: Ledger, cfg: CascadeConfig) -> list[Action]:
    """Follow `plan` to the end, recording what each action would have produced in the ledger."""
    run_id = ledger.create_run(cfg.name, cfg.model_dump())
    ctx = SimpleNamespace(ledger=ledger, run_id=run_id, config=cfg)
    actions: list[Action] = []
    while (action := plan(ctx)).kind != "finish":
        actions.append(action)
        st = cfg.stages[action.stage]
        if action.kind == "start_stage":
            ledger.begin_stage(run_id, action.stage, st.name, st.type, steps=st.steps, start_weight_version=0)
        elif action.kind == "eval":
            ledger.record_eval(run_id, action.stage, action.step, 0, "w", "if", 0.5, 4)
        elif action.kind == "step":
            step_id = ledger.begin_step(run_id, action.stage, action.step).step_id
            for phase in PHASES[1:]:
                ledger.advance(step_id, phase)
        elif action.kind == "end_stage":
            ledger.set_stage_status(run_id, action.stage, "succeeded")
        assert len(actions) < 20, actions
    return actions


@pytest.mark.parametrize("at_start", [True, False])
def test_start_evaluation_follows_eval_at_start(ledger, at_start):
    actions = [(a.kind, a.stage, a.step) for a in walk(ledger, cascade(at_start))]
    sft = [("start_stage", 0, 0)] + [("eval", 0, -1)] * at_start + [("step", 0, 0), ("eval", 0, 0), ("end_stage", 0, 0)]
    rl = [("start_stage", 1, 0), ("eval", 1, -1), ("step", 1, 0), ("eval", 1, 0), ("end_stage", 1, 0)]
    assert actions == sft + rl
