"""The cascade schema: both shipped files load; every bad field is reported at once, by path."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from services.orchestrator.cascade_config import (
    CascadeConfig,
    CascadeConfigError,
    GrpoStage,
    LinearWarmupSchedule,
    MopdStage,
    OptimizerConfig,
    RmStage,
    SamplingConfig,
    SftStage,
    eval_sampling,
    load_cascade,
)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

BASE = {
    "name": "t",
    "model": "/models/tiny",
    "stages": [
        {"name": "warm", "type": "sft", "domains": ["if", "mcqa"], "batch_size": 4, "steps": 2,
         "optimizer": {"lr": 1e-3}},
        {"name": "rl", "type": "grpo", "domains": ["mcqa"], "batch_size": 4, "rollouts_per_prompt": 4,
         "steps": 2, "optimizer": {"lr": 1e-4}, "sampling": {"temperature": 1.0, "max_tokens": 16}},
        {"name": "mopd", "type": "mopd", "domains": ["if", "mcqa"], "batch_size": 4, "rollouts_per_prompt": 2,
         "steps": 2, "optimizer": {"lr": 1e-4}},
    ],
}


def write(tmp_path: Path, data: dict, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data, sort_keys=False))
    return path


def problems(tmp_path: Path, data: dict) -> list[str]:
    with pytest.raises(CascadeConfigError) as info:
        load_cascade(write(tmp_path, data))
    return info.value.problems


class TestShippedFiles:
    def test_demo_has_the_laptop_recipe(self):
        cfg = load_cascade(CONFIGS / "demo.yaml")
        assert [s.type for s in cfg.stages] == ["sft", "grpo", "grpo", "mopd", "rm", "grpo", "grpo"]
        mopd = next(s for s in cfg.stages if isinstance(s, MopdStage))
        assert mopd.teachers == "auto"
        rlhf = next(s for s in cfg.stages if isinstance(s, GrpoStage) and "rlhf" in s.domains)
        assert rlhf.reward_model == next(s for s in cfg.stages if isinstance(s, RmStage)).output
        assert rlhf.kl_coef == pytest.approx(0.03)
        for s in cfg.stages:
            if isinstance(s, (GrpoStage, MopdStage)):
                assert s.batch_size * s.rollouts_per_prompt <= 256 and s.sampling.max_tokens <= 48  # laptop-sized steps

    def test_agentic_demo_is_sft_on_tool_conversations_then_python_episodes(self):
        cfg = load_cascade(CONFIGS / "agentic.yaml")
        sft, rl = cfg.stages
        assert sft.type == "sft" and sft.domains == ["python"] and sft.max_seq_len >= 512
        assert sft.steps * sft.batch_size <= 12800, "one epoch of the 12,800 conversations the header writes at most"
        assert "--env-sft 12800" in (CONFIGS / "agentic.yaml").read_text()
        assert isinstance(rl, GrpoStage) and rl.env == "python" and rl.domains == ["python"]
        assert rl.max_turns >= 2 and rl.eval.at_start, "the cell, the answer; the start is the gain's baseline"

    def test_paper_recipe_stage_order_and_numbers(self):
        cfg = load_cascade(CONFIGS / "nemotron-cascade-2.yaml")
        assert [s.name for s in cfg.stages] == [
            "sft", "if-rl", "multi-domain-rl", "mopd", "rlhf", "long-context-rl", "code-rl", "swe-rl"]
        for s in cfg.stages:
            if isinstance(s, GrpoStage):
                rollouts = 64 if s.name in ("code-rl", "swe-rl") else 16  # code and SWE RL: 64 a prompt
                assert (s.batch_size, s.rollouts_per_prompt, s.optimizer.lr) == (128, rollouts, 3e-6)
                assert s.sampling.temperature == 1.0
                assert s.kl_coef == (0.03 if s.name == "rlhf" else 0.0)
        mopd = cfg.stages[3]
        assert isinstance(mopd, MopdStage) and (mopd.batch_size, mopd.rollouts_per_prompt) == (128, 4)
        assert (mopd.eps_low, mopd.eps_high) == (0.5, 2.0)
        assert isinstance(mopd.optimizer.schedule, LinearWarmupSchedule)
        assert mopd.optimizer.lr_at(0, mopd.steps) == pytest.approx(2e-7)
        assert mopd.optimizer.lr_at(30, mopd.steps) == pytest.approx(2e-6)


class TestValid:
    def test_yaml_and_json_give_the_same_model(self, tmp_path):
        a = load_cascade(write(tmp_path, BASE))
        b = load_cascade(write(tmp_path, BASE, "c.json"))
        assert a == b and isinstance(a, CascadeConfig)
        assert isinstance(a.stages[0], SftStage) and isinstance(a.stages[2], MopdStage)

    def test_defaults_are_the_documented_ones(self, tmp_path):
        cfg = load_cascade(write(tmp_path, BASE))
        rl, mopd = cfg.stages[1], cfg.stages[2]
        assert (rl.kl_coef, rl.dynamic_filtering, rl.overlong, rl.sampling.top_k) == (0.0, True, "none", 0)
        assert (mopd.eps_low, mopd.eps_high, mopd.grpo_alpha, mopd.teachers) == (0.5, 2.0, None, "auto")
        assert cfg.data == "synthetic" and cfg.seed == 0
        greedy = eval_sampling(rl)  # the one definition: greedy, with the rollouts' length and thinking mode
        assert (greedy.temperature, greedy.max_tokens, greedy.thinking) == (0.0, rl.sampling.max_tokens, rl.sampling.thinking)
        assert eval_sampling(cfg.stages[0]) == SamplingConfig(temperature=0.0, max_tokens=64, thinking=False)
        assert cfg.stages[0].eval_domains() == ["if", "mcqa"]

    def test_explicit_teacher_map_needs_no_earlier_stage(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"] = [data["stages"][2] | {"teachers": {"if": "/ckpt/a", "mcqa": "/ckpt/b"}}]
        cfg = load_cascade(write(tmp_path, data))
        assert cfg.stages[0].teachers == {"if": "/ckpt/a", "mcqa": "/ckpt/b"}

    def test_eval_domains_count_as_covered_for_auto(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"][0]["domains"] = ["mcqa"]
        data["stages"][1]["eval"] = {"domains": ["if", "mcqa"]}
        assert load_cascade(write(tmp_path, data)).stages[2].teachers == "auto"


class TestInvalid:
    def test_every_bad_field_is_listed_with_its_path_and_value(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"][1]["sampling"]["temperature"] = -1
        data["stages"][1]["batch_size"] = 0
        data["stages"][2]["eps_low"] = 1.5
        data["seed"] = -3
        got = problems(tmp_path, data)
        assert "c.yaml: stages[1].sampling.temperature: Input should be greater than or equal to 0 (got -1)" in got
        assert "c.yaml: stages[1].batch_size: Input should be greater than or equal to 1 (got 0)" in got
        assert "c.yaml: stages[2].eps_low: Input should be less than 1 (got 1.5)" in got
        assert "c.yaml: seed: Input should be greater than or equal to 0 (got -3)" in got
        assert len(got) == 4

    def test_unknown_key_is_an_error_with_a_hint(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"][1]["sampling"]["temprature"] = 0.7
        (line,) = problems(tmp_path, data)
        assert line.startswith("c.yaml: stages[1].sampling.temprature: unknown key; did you mean 'temperature'?")

    def test_unknown_stage_type_and_missing_fields(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"].append({"name": "x", "type": "ppo"})
        del data["stages"][0]["steps"]
        got = problems(tmp_path, data)
        assert any(p.startswith("c.yaml: stages[3]: Input tag 'ppo'") for p in got)
        assert "c.yaml: stages[0].steps: Field required" in got

    def test_unknown_domain_is_named(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"][1]["domains"] = ["chess"]
        (line,) = problems(tmp_path, data)
        assert line.startswith("c.yaml: stages[1].domains[0]: Input should be") and "'chess'" in line

    def test_stage_names_must_be_unique(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"][1]["name"] = "warm"
        assert problems(tmp_path, data) == [
            "c.yaml: stages[1].name: stage name 'warm' is used twice; names must be unique"]

    def test_auto_teachers_need_an_earlier_stage_per_domain(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"][2]["domains"] = ["if", "tool"]
        (line,) = problems(tmp_path, data)
        assert line.startswith("c.yaml: stages[2].teachers: `auto` needs every domain") and "tool never was" in line

    def test_teacher_map_must_cover_exactly_the_domains(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"][2]["teachers"] = {"if": "/a"}
        (line,) = problems(tmp_path, data)
        assert line == "c.yaml: stages[2].teachers: no teacher for domain(s) mcqa; map every domain or use `auto`"

    @pytest.mark.parametrize(("field", "value", "message"), [
        ("eps_low", 0.0, "Input should be greater than 0"),
        ("eps_high", 1.0, "Input should be greater than 1"),
        ("teachers", "best", "must be `auto` or a mapping domain -> checkpoint path/ref"),
        ("grpo_alpha", -0.1, "Input should be greater than or equal to 0"),
    ])
    def test_mopd_bounds(self, tmp_path, field, value, message):
        data = copy.deepcopy(BASE)
        data["stages"][2][field] = value
        (line,) = problems(tmp_path, data)
        assert line.startswith(f"c.yaml: stages[2].{field}: {message}")

    def test_grpo_needs_a_group(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"][1]["rollouts_per_prompt"] = 1
        (line,) = problems(tmp_path, data)
        assert line.startswith("c.yaml: stages[1].rollouts_per_prompt: GRPO needs at least 2")

    def test_rlhf_needs_an_earlier_reward_model(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"][1]["domains"] = ["rlhf"]
        assert problems(tmp_path, data)[0].startswith("c.yaml: stages[1].reward_model: the rlhf domain needs")
        data["stages"][1]["reward_model"] = "my-rm"
        assert "is not the output of an earlier rm stage" in problems(tmp_path, data)[0]
        rm = {"name": "rm", "type": "rm", "output": "my-rm", "batch_size": 2, "steps": 1, "optimizer": {"lr": 1e-4}}
        data["stages"].insert(1, rm)
        cfg = load_cascade(write(tmp_path, data))
        assert cfg.stages[2].reward_model == "my-rm" and cfg.stages[1].init == "policy"
        data["stages"][1]["init"] = ""
        assert problems(tmp_path, data)[0].startswith("c.yaml: stages[1].init: ")
        del data["stages"][1]["init"]
        data["stages"][1]["base"] = "models/x"  # the old name of `init`: refused, not ignored
        assert problems(tmp_path, data)[0].startswith("c.yaml: stages[1].base: unknown key")

    def test_schedule_fields_are_checked_inside_the_union(self, tmp_path):
        data = copy.deepcopy(BASE)
        data["stages"][2]["optimizer"]["schedule"] = {"type": "linear_warmup", "warmup_step": 3}
        got = problems(tmp_path, data)
        assert "c.yaml: stages[2].optimizer.schedule.warmup_steps: Field required" in got
        assert any(p.startswith("c.yaml: stages[2].optimizer.schedule.warmup_step: unknown key; "
                                "did you mean 'warmup_steps'?") for p in got)

    @pytest.mark.parametrize(("text", "expected"), [
        ("name: [unclosed", "c.yaml: not valid YAML"),
        ("- just\n- a list\n", "c.yaml: the top level must be a mapping"),
    ])
    def test_unreadable_files(self, tmp_path, text, expected):
        path = tmp_path / "c.yaml"
        path.write_text(text)
        with pytest.raises(CascadeConfigError) as info:
            load_cascade(path)
        assert info.value.problems[0].startswith(expected)

    def test_missing_file(self, tmp_path):
        with pytest.raises(CascadeConfigError, match="cannot read the cascade file"):
            load_cascade(tmp_path / "nope.yaml")


class TestLearningRate:
    @pytest.mark.parametrize(("schedule", "step", "expected"), [
        ({"type": "constant"}, 7, 1e-3),
        ({"type": "linear_warmup", "warmup_steps": 4, "start_lr": 0.0}, 0, 0.0),
        ({"type": "linear_warmup", "warmup_steps": 4, "start_lr": 0.0}, 1, 2.5e-4),
        ({"type": "linear_warmup", "warmup_steps": 4, "start_lr": 0.0}, 9, 1e-3),
        ({"type": "cosine", "warmup_steps": 0, "min_lr": 0.0}, 0, 1e-3),
        ({"type": "cosine", "warmup_steps": 0, "min_lr": 0.0}, 5, 5e-4),   # halfway of 11 steps: (1+cos(pi/2))/2
        ({"type": "cosine", "warmup_steps": 0, "min_lr": 1e-4}, 10, 1e-4),
        ({"type": "cosine", "warmup_steps": 2, "min_lr": 0.0}, 0, 5e-4),   # warm-up never wastes a step at 0
        ({"type": "cosine", "warmup_steps": 2, "min_lr": 0.0}, 1, 1e-3),
    ])
    def test_schedule_table(self, schedule, step, expected):
        opt = OptimizerConfig.model_validate({"lr": 1e-3, "schedule": schedule})
        assert opt.lr_at(step, 11) == pytest.approx(expected)


def test_eval_avg_at_k_needs_a_temperature(tmp_path):
    data = copy.deepcopy(BASE)
    data["stages"][1]["eval"] = {"samples_per_prompt": 4}
    assert any("samples_per_prompt=4 repeats one greedy answer" in p for p in problems(tmp_path, data))
    data["stages"][1]["eval"] = {"samples_per_prompt": 4, "sampling": {"temperature": 1.0, "max_tokens": 16}}
    assert load_cascade(write(tmp_path, data)).stages[1].eval.samples_per_prompt == 4


def test_an_unknown_key_with_a_newline_is_named_on_one_line(tmp_path):
    data = copy.deepcopy(BASE)
    data["stages"][1]["sampling"]["\n"] = None
    (line,) = problems(tmp_path, data)
    assert "stages[1].sampling['\\n']: unknown key" in line and "\n" not in line


def test_mopd_remeasuring_teachers_needs_sampled_evaluations(tmp_path):
    """Greedy scores are the same at every seed: unset, remeasuring is off with greedy evaluations and on
    with sampled ones; `true` with greedy evaluations is refused, not silently skipped."""
    data = copy.deepcopy(BASE)
    assert load_cascade(write(tmp_path, data)).stages[2].remeasures is False
    data["stages"][2]["remeasure_teachers"] = True
    (line,) = problems(tmp_path, data)
    assert "stages[2]: remeasure_teachers: true needs sampled evaluations" in line
    data["stages"][2]["eval"] = {"sampling": {"temperature": 1.0, "max_tokens": 16}}
    assert load_cascade(write(tmp_path, data)).stages[2].remeasures is True
    del data["stages"][2]["remeasure_teachers"]
    assert load_cascade(write(tmp_path, data)).stages[2].remeasures is True


def test_mopd_fresh_samples_size_the_fresh_draws_and_need_them(tmp_path):
    """fresh_samples: unset, the fresh draws take eval.samples_per_prompt; set, their own count; set on a
    stage that draws nothing again (greedy evaluations), refused rather than ignored."""
    data = copy.deepcopy(BASE)
    data["stages"][2]["fresh_samples"] = 8
    (line,) = problems(tmp_path, data)
    assert "stages[2]: fresh_samples sizes the fresh draws" in line and "remove fresh_samples" in line
    data["stages"][2]["eval"] = {"samples_per_prompt": 4, "sampling": {"temperature": 1.0, "max_tokens": 16}}
    assert load_cascade(write(tmp_path, data)).stages[2].fresh_k == 8
    del data["stages"][2]["fresh_samples"]
    assert load_cascade(write(tmp_path, data)).stages[2].fresh_k == 4


def test_mopd_remeasuring_teachers_needs_the_start_evaluation(tmp_path):
    data = copy.deepcopy(BASE)
    data["stages"][0]["eval"] = {"at_start": False}
    data["stages"][2]["eval"] = {"at_start": False, "sampling": {"temperature": 1.0, "max_tokens": 16}}
    (line,) = problems(tmp_path, data)
    assert line.startswith("c.yaml: stages[2]: remeasure_teachers draws the teachers at the stage's start evaluation")
    data["stages"][2]["remeasure_teachers"] = False
    cfg = load_cascade(write(tmp_path, data))
    assert [s.eval.at_start for s in cfg.stages] == [False, True, False]
