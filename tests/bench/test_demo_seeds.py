"""bench/demo_seeds.py's pieces: the seeded copy of a recipe, the scores after SFT, the figure cells
and the per-seed table, on hand-made records."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import demo_seeds  # noqa: E402

from services.orchestrator.ledger import EvalRecord  # noqa: E402
from services.orchestrator.report import Claim, Figure  # noqa: E402


def test_the_seeded_copy_changes_only_the_seed_and_the_model(tmp_path):
    recipe = tmp_path / "demo.yaml"
    recipe.write_text(yaml.safe_dump({"name": "demo", "seed": 0, "model": ".cascade/models/tiny",
                                      "stages": [{"name": "sft", "type": "sft", "steps": 3}]}))
    copy = yaml.safe_load(demo_seeds.own_model(recipe, tmp_path / "home", 2).read_text())
    assert copy["seed"] == 2 and copy["model"] == str(tmp_path / "home" / "models" / "tiny")
    assert copy["stages"] == [{"name": "sft", "type": "sft", "steps": 3}] and copy["name"] == "demo"


def _eval(stage, step, domain, score):
    return EvalRecord(stage, step, 0, "", domain, score, 64)


def test_after_sft_is_each_domains_last_evaluation_of_the_first_stage():
    stages = [{"type": "sft"}, {"type": "grpo"}]
    evals = [_eval(0, 299, "code", 0.1), _eval(0, 599, "code", 0.4), _eval(0, 599, "if", 0.3),
             _eval(1, -1, "code", 0.9)]
    assert demo_seeds.after_first_stage(evals, stages) == {"code": 0.4, "if": 0.3}
    assert demo_seeds.after_first_stage(evals, [{"type": "grpo"}]) == {}


def test_the_table_counts_seeds_where_a_claim_holds(tmp_path):
    def run(seed, verdict, low):
        fig = Figure("if-rl/if", "change", 0.08, low, 0.12, 64, verdict)
        return {"seed": seed, "wall": 400.0, "after_sft": {"if": 0.35},
                "claims": [Claim("each RL stage raises its own domains (by ≥ 0.05)", verdict, "", (fig,))]}

    class Args:
        config = Path("configs/demo.yaml")

    text = demo_seeds.render([run(0, "holds", 0.03), run(1, "not shown", -0.01)], Args, 12.0)
    assert "| each RL stage raises its own domains (by ≥ 0.05) | holds | not shown | 1 of 2 |" in text
    assert "| if-rl/if | +0.08 [+0.03, +0.12] holds | +0.08 [-0.01, +0.12] not shown |" in text
    assert "| if | 0.35 | 0.35 |" in text
    assert "--float-path avx2" in text and "Float path: avx2 (ATEN_CPU_CAPABILITY=avx2 " in text
    assert demo_seeds.figure_text(Figure("code", "fraction", 0.93, 0.88, 0.99, 64, "not shown")) == \
        "93% [88%, 99%] not shown"


def test_reuse_reads_a_home_only_when_its_last_run_succeeded_with_this_recipe_seed_and_float_path(tmp_path):
    from services.orchestrator.cascade_config import load_cascade
    from services.orchestrator.ledger import ledger_at

    recipe = tmp_path / "demo.yaml"
    recipe.write_text(yaml.safe_dump({"name": "demo", "seed": 0, "model": "m", "stages": [
        {"name": "sft", "type": "sft", "domains": ["if"], "batch_size": 2, "steps": 3,
         "optimizer": {"lr": 1.0e-3}}]}))
    home = tmp_path / "seed1"
    assert demo_seeds.reusable(home, recipe, 1) is None  # no ledger yet
    home.mkdir()
    ledger = ledger_at(f"sqlite:///{home / 'ledger.sqlite'}")
    config = {**load_cascade(recipe).model_dump(mode="json"), "seed": 1}
    run = ledger.create_run("demo", config)
    assert demo_seeds.reusable(home, recipe, 1) is None  # not finished
    ledger.set_run_status(run, "succeeded")
    assert demo_seeds.reusable(home, recipe, 1) is None  # no record of its float path
    (home / demo_seeds.FLOAT_PATH_FILE).write_text("avx2\n")
    assert demo_seeds.reusable(home, recipe, 1) == run
    assert demo_seeds.reusable(home, recipe, 1, "native") is None  # another float path
    assert demo_seeds.reusable(home, recipe, 2) is None  # another seed
    recipe.write_text(recipe.read_text().replace("steps: 3", "steps: 4"))
    assert demo_seeds.reusable(home, recipe, 1) is None  # another recipe
