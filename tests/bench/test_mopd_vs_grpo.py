"""bench/mopd_vs_grpo.py: where the race starts in a whole run (the MOPD stage's start, or the end of
the forgetting stage named by --after), read from a real SQLite ledger; and the steps summary."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import mopd_vs_grpo  # noqa: E402

from services.orchestrator.cascade_config import load_cascade  # noqa: E402
from services.orchestrator.ledger import Ledger  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

STAGES = [{"name": "sft", "type": "sft"}, {"name": "mopd", "type": "mopd"}, {"name": "rlhf", "type": "grpo"},
          {"name": "code-rl", "type": "grpo"}]


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    run = led.create_run("demo", {"stages": STAGES})
    for version in range(4):
        led.record_weight_version(run, version, f"/w/v{version}", "0" * 64)
    for index, stage in enumerate(STAGES):  # stage i starts from version i
        led.begin_stage(run, index, stage["name"], stage["type"], 5, start_weight_version=index)
    for index in range(3):
        led.set_stage_status(run, index, "succeeded")
    yield led, run
    led.close()


def test_the_race_starts_where_mopd_started_or_where_the_named_stage_ended(ledger):
    led, run = ledger
    assert mopd_vs_grpo.start_point(led, run, STAGES, None, 1) == (Path("/w/v1"), 1)
    # after rlhf (stage 2): the weights code-rl started from; teachers from stages 0..2
    assert mopd_vs_grpo.start_point(led, run, STAGES, "rlhf", 1) == (Path("/w/v3"), 3)
    # the last stage: the run's newest weights, once it has succeeded
    with pytest.raises(SystemExit, match="did not finish stage 'code-rl'"):
        mopd_vs_grpo.start_point(led, run, STAGES, "code-rl", 1)
    led.set_stage_status(run, 3, "succeeded")
    assert mopd_vs_grpo.start_point(led, run, STAGES, "code-rl", 1) == (Path("/w/v3"), 4)
    with pytest.raises(SystemExit, match="no stage named 'rm'"):
        mopd_vs_grpo.start_point(led, run, STAGES, "rm", 1)


def test_the_summary_counts_a_target_not_reached_as_a_lower_bound():
    assert mopd_vs_grpo.counted(None, 10) == 11 and mopd_vs_grpo.counted(0, 10) == 0
    text = mopd_vs_grpo.summary({"mopd": [1, 2, 0], "grpo": [5, 11, 3]}, {"mopd": 10, "grpo": 10})
    assert "MOPD mean 1.0, range 0-2" in text and "GRPO mean 6.3, range 3-11" in text
    assert "MOPD / GRPO 0.16 (target ≤ 0.33)" in text


def test_grpo_may_run_longer_and_each_arm_is_bounded_by_its_own_steps():
    class Args:
        steps, grpo_steps = 12, None
    assert mopd_vs_grpo.arm_steps(Args) == {"mopd": 12, "grpo": 12}
    Args.grpo_steps = 36
    limits = mopd_vs_grpo.arm_steps(Args)
    assert limits == {"mopd": 12, "grpo": 36}
    # MOPD reached in 9; GRPO missed within its 36 steps in two runs, so those count as 37
    steps_of = {"mopd": [9, 9, 9], "grpo": [mopd_vs_grpo.counted(12, 36)] + [mopd_vs_grpo.counted(None, 36)] * 2}
    text = mopd_vs_grpo.summary(steps_of, limits)
    assert "MOPD within 12 counts as 13; GRPO within 36 counts as 37" in text
    assert "GRPO mean 28.7, range 12-37" in text and "MOPD / GRPO 0.31" in text


def test_the_race_is_evaluated_at_the_claims_precision():
    assert mopd_vs_grpo.race_samples({"fresh_samples": 8, "eval": {"samples_per_prompt": 4}}) == 8
    assert mopd_vs_grpo.race_samples({"fresh_samples": None, "eval": {"samples_per_prompt": 4}}) == 4


def test_staying_at_the_target_is_counted_from_the_last_dip(ledger):
    led, run = ledger
    # teacher 0.5 -> target 0.45; start (-1) 0.30, then 0.46 (a lucky crossing), 0.40, 0.47, 0.50, 0.48
    for step, score in enumerate([0.30, 0.46, 0.40, 0.47, 0.50, 0.48], start=-1):
        led.record_eval(run, 0, step, 0, "/w/v0", "if", score, 64)
    evals = led.evals(run)
    assert mopd_vs_grpo.steps_to_target(evals, 0, "if", 0.5) == (1, 0.48)
    assert mopd_vs_grpo.steps_to_hold(evals, 0, "if", 0.5) == 3
    assert mopd_vs_grpo.steps_to_hold(evals, 0, "if", 0.535) is None  # the last one is below the target
    assert mopd_vs_grpo.steps_to_hold(evals, 0, "if", 0.3) == 0  # there from the start and never below


def test_the_race_is_won_with_margin_only_when_every_run_is():
    text = mopd_vs_grpo.per_run_ratios(["s0", "s1"], {"mopd": [3, 6], "grpo": [12, 15]},
                                       {"mopd": [4, 9], "grpo": [20, 15]})
    assert "s0: 0.25 / 0.20; s1: 0.40 / 0.60" in text and "Largest: 0.40 / 0.60" in text


def test_the_mopd_arm_is_the_papers_even_when_the_recipes_stage_adds_the_outcome_term(tmp_path):
    cfg = load_cascade(ROOT / "configs" / "demo.yaml").model_dump(mode="json")
    stage = next(s for s in cfg["stages"] if s["type"] == "mopd")
    arms = mopd_vs_grpo.race_arms({**stage, "grpo_alpha": 1.0}, {"if": "/w/v41"}, {"mopd": 24, "grpo": 48}, 4)
    mopd, grpo = arms["mopd"], arms["grpo"]
    assert "grpo_alpha" not in mopd, "the outcome term is GRPO's advantage: the race would set GRPO against itself"
    # loaded as a stage, the arm's alpha is the schema's default: none
    (tmp_path / "arm.yaml").write_text(yaml.safe_dump({**cfg, "stages": [mopd]}))
    one = load_cascade(tmp_path / "arm.yaml").stages[0]
    assert one.grpo_alpha is None and one.teachers == {"if": "/w/v41"} and not one.remeasure_teachers
    for key in ("batch_size", "sampling", "optimizer", "share_prompts", "domains", "eval"):
        assert mopd[key] == grpo[key], key
    assert (mopd["steps"], grpo["steps"], mopd["eval"]["samples_per_prompt"], mopd["eval_every"]) == (24, 48, 4, 1)
    assert grpo["dynamic_filtering"] and mopd["domains"] == ["if"]


def test_a_learning_rate_sweep_races_each_arm_at_its_own_best_rate(tmp_path):
    assert mopd_vs_grpo.parse_lrs(None) == [None] and mopd_vs_grpo.parse_lrs("1.5e-4,3e-4") == [1.5e-4, 3e-4]
    for bad in ("3e-4,x", "0,3e-4", "3e-4,3e-4", "-1e-4"):
        with pytest.raises(ValueError, match="--lrs"):
            mopd_vs_grpo.parse_lrs(bad)
    stage = {"optimizer": {"lr": 3e-4, "schedule": {"type": "linear_warmup", "warmup_steps": 3}}, "batch_size": 32}
    assert mopd_vs_grpo.at_lr(stage, None) is stage
    moved = mopd_vs_grpo.at_lr(stage, 6e-4)
    assert moved["optimizer"] == {"lr": 6e-4, "schedule": stage["optimizer"]["schedule"]} and stage["optimizer"]["lr"] == 3e-4
    arms = mopd_vs_grpo.race_arms({**moved, "domains": ["if"], "rollouts_per_prompt": 4, "sampling": {},
                                   "share_prompts": True, "eval": {}, "eps_low": 0.5, "eps_high": 2.0},
                                  {"if": "/w/v1"}, {"mopd": 4, "grpo": 8}, 4)
    assert arms["mopd"]["optimizer"]["lr"] == arms["grpo"]["optimizer"]["lr"] == 6e-4  # both arms at the swept rate
    assert mopd_vs_grpo.lr_home(tmp_path, None) == tmp_path  # no sweep: the layout before it
    assert mopd_vs_grpo.lr_home(tmp_path, 1.5e-4) == tmp_path / "lr-0.00015"
    # per rate and arm, per run: (steps until it stays, steps to the target), counted
    outcomes = {3e-4: {"mopd": [(20, 5), (22, 16)], "grpo": [(48, 8), (49, 49)]},
                6e-4: {"mopd": [(15, 4), (14, 9)], "grpo": [(49, 6), (49, 49)]},
                1.5e-4: {"mopd": [(25, 9), (25, 25)], "grpo": [(49, 30), (48, 49)]}}
    assert mopd_vs_grpo.best_lr(outcomes, "mopd") == 6e-4
    assert mopd_vs_grpo.best_lr(outcomes, "grpo") == 3e-4  # 48.5 until it stays at both 3e-4 and 1.5e-4: 28.5 < 39.5
    table = mopd_vs_grpo.sweep_table(outcomes, {"mopd": 6e-4, "grpo": 3e-4})
    assert "| 0.0003 | 10.5 | 21.0 | 28.5 | 48.5 (picked) |" in table
    assert "| 0.0006 | 6.5 | 14.5 (picked) | 27.5 | 49.0 |" in table
