"""An evaluation already measured in the run is taken again only for the same weights and setting;
`teachers: auto` ranks only evaluations drawn the same way."""

from __future__ import annotations

import pytest

from services.common.errors import FailedPrecondition
from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.context import RunContext
from services.orchestrator.evals import comparable, measured, per_prompt_scores
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


# ------------------------------------------------------------- teachers: auto ranks comparable scores only
GREEDY = {"prompts_per_domain": 8}  # eval.sampling unset: greedy


def mopd(eval_: dict) -> dict:
    return {"name": "m", "type": "mopd", "domains": ["if"], "batch_size": 2, "rollouts_per_prompt": 2, "steps": 2,
            "optimizer": {"lr": 1e-4}, "eval": eval_}


def mixed(first_eval: dict, mopd_eval: dict) -> RunContext:
    """Stage a evaluates `first_eval`, stage b greedy; stage c is the MOPD stage."""
    config = CascadeConfig.model_validate({"name": "t", "model": "/models/tiny", "stages": [
        grpo("a", ["if"], eval=first_eval), grpo("b", ["if"], eval=GREEDY), mopd(mopd_eval)]})
    return RunContext(run_id=1, config=config, settings=None, ledger=None, clients=None)


SAMPLED_A = EvalRecord(0, 3, 4, "w/v4", "if", 0.9, 32)   # a sampled score (stage a)
GREEDY_B = EvalRecord(1, 3, 8, "w/v8", "if", 0.6, 8)     # a greedy score (stage b)


def test_the_stages_own_way_is_ranked_alone():
    """A sampled 0.9 and a greedy 0.6 do not compare: a greedy MOPD stage ranks the greedy ones."""
    assert comparable(mixed(EVAL, GREEDY), 2, [SAMPLED_A, GREEDY_B]) == [GREEDY_B]
    assert comparable(mixed(EVAL, EVAL), 2, [SAMPLED_A, GREEDY_B]) == [SAMPLED_A]


def test_scores_all_drawn_one_way_are_ranked_whatever_the_stage_evaluates():
    assert comparable(mixed(GREEDY, EVAL), 2, [SAMPLED_A, GREEDY_B]) == [SAMPLED_A, GREEDY_B]


def test_a_domain_drawn_several_other_ways_is_refused():
    other = {**EVAL, "sampling": {"temperature": 0.6, "max_tokens": 32}}
    with pytest.raises(FailedPrecondition, match=r"stages\[2\].teachers: auto: domain 'if' was evaluated in 2 different ways"):
        comparable(mixed(EVAL, other), 2, [SAMPLED_A, GREEDY_B])


# ------------------------------------------------------------- per-prompt scores behind an evaluation
def test_per_prompt_scores_are_avg_at_k_over_the_samples_that_did_not_error():
    """Records a, b, c with k = 2 samples each; b's second sample errored, c's both: c is left out."""
    rewards = [1.0, 0.0, 0.5, 0.0, 1.0, 1.0]
    verdict_list = ["pass", "fail", "pass", "error", "error", "error"]
    assert per_prompt_scores([("a", 0), ("b", 1), ("c", 2)], rewards, verdict_list, 2) == {"a": 0.5, "b": 0.5}
    assert per_prompt_scores([("b", 1)], rewards, verdict_list, 2) == {"b": 0.5}, "a domain's records only"


def test_scoring_runs_behind_the_block_and_is_waited_for_when_it_leaves():
    import threading

    from services.orchestrator.evals import Scoring

    barrier = threading.Barrier(2, timeout=20)
    done = []
    with Scoring(concurrent=True) as scoring:
        scoring.submit(lambda: (barrier.wait(), done.append("scored")))
        barrier.wait()  # the block goes on (the next generation) while the scoring runs
    assert done == ["scored"]
    with Scoring(concurrent=False) as scoring:
        scoring.submit(lambda: done.append("in turn"))
        assert done[-1] == "in turn", "not concurrent: scored at once"


def test_a_scoring_error_is_raised_and_the_blocks_own_error_comes_first():
    from services.orchestrator.evals import Scoring

    def fails():
        raise ConnectionError("reward service gone")

    with pytest.raises(ConnectionError, match="reward service gone"):
        with Scoring(concurrent=True) as scoring:
            scoring.submit(fails)
    with pytest.raises(KeyError, match="generation"):
        with Scoring(concurrent=True) as scoring:
            scoring.submit(fails)
            raise KeyError("generation")
