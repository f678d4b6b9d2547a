"""An env stage's validation episodes scored like a single-turn evaluation (the run itself: the
SFT-on-tools cascade of tests/integration/test_cascade_run.py)."""

from __future__ import annotations

import math

from services.orchestrator.cascade_schema import GrpoStage, SftStage
from services.orchestrator.env_evals import env_domain, episode_scores


def test_errored_episodes_are_left_out_of_the_mean_and_of_their_tasks_avg():
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    verdicts = ["ok", "limit_turns", "error", "ok", "error", "error"]
    mean, n, per_task = episode_scores(["a", "b", "c"], rewards, verdicts, 2)
    assert (mean, n) == (2 / 3, 3)
    assert per_task == {"a": 0.5, "b": 1.0}, "c's episodes all errored: no score for it"
    mean, n, per_task = episode_scores(["a"], [0.0], ["error"], 1)
    assert math.isnan(mean) and n == 0 and per_task == {}


def test_only_an_env_stage_scores_its_domain_by_episodes():
    common = {"domains": ["workbench"], "batch_size": 2, "steps": 1, "optimizer": {"lr": 1e-3}}
    assert env_domain(GrpoStage(name="g", type="grpo", rollouts_per_prompt=2, env="workbench", **common)) == "workbench"
    assert env_domain(GrpoStage(name="g", type="grpo", rollouts_per_prompt=2, **common)) is None
    assert env_domain(SftStage(name="s", type="sft", **common)) is None
