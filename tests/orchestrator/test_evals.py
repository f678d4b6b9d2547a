"""An evaluation already measured in the run is taken again only for the same weights and setting."""

from __future__ import annotations

import pytest

from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.context import RunContext
from services.orchestrator.evals import measured
from services.orchestrator.ledger import EvalRecord

EVAL = {"prompts_per_domain": 8, "samples_per_prompt": 4, "sampling": {"temperature": 1.0, "max_tokens": 32}}


def grpo(name: str, domains: list[str], **over) -> dict:
    return {"name": name, "type": "grpo", "domains": domains, "batch_size": 2, "rollouts_per_prompt": 2,
            "steps": 4, "optimizer": {"lr": 1e-4}, "eval": EVAL, **over}


def context(third: dict) -> RunContext:
    config = CascadeConfig.model_validate({"name": "t", "model": "/models/tiny", "stages": [
        grpo("a", ["if", "code"]), grpo("b", ["if"]), third]})
    return RunContext(run_id=1, config=config, settings=None, ledger=None, clients=None)


EARLIER = [EvalRecord(0, 3, 4, "w/v4", "if", 0.5, 32), EvalRecord(0, 3, 4, "w/v4", "code", 0.25, 32),
           EvalRecord(1, -1, 4, "w/v4", "if", 0.5, 32), EvalRecord(1, 3, 8, "w/v8", "if", 0.625, 32)]


def test_the_weights_the_last_stage_ended_with_are_not_measured_again():
    ctx = context(grpo("c", ["if", "code"]))
    found = measured(ctx, 2, 8, ["if", "code"], EARLIER)
    assert found == {"if": EARLIER[3]}  # code was last measured on v4
    assert measured(ctx, 2, 4, ["if", "code"], EARLIER) == {"if": EARLIER[0], "code": EARLIER[1]}


@pytest.mark.parametrize("change", [
    {"eval": {**EVAL, "samples_per_prompt": 8}},
    {"eval": {**EVAL, "prompts_per_domain": 16}},
    {"eval": {**EVAL, "sampling": {"temperature": 1.0, "max_tokens": 48}}},
    {"data": "/data/other"},
], ids=["samples", "prompts", "sampling", "data"])
def test_another_setting_is_measured_afresh(change):
    ctx = context(grpo("c", ["if"], **change))
    assert measured(ctx, 2, 8, ["if"], EARLIER) == {}


def test_a_domain_not_asked_for_is_not_taken():
    assert measured(context(grpo("c", ["if"])), 2, 4, ["if"], EARLIER) == {"if": EARLIER[0]}
