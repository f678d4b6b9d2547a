"""The cascade schema: the one evaluation sampling, the GRPO KL settings, and no field nothing reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from services.orchestrator import cascade_schedules, cascade_schema
from services.orchestrator.cascade_schema import GrpoStage, SamplingConfig, eval_sampling

ROOT = Path(__file__).resolve().parents[2]
GRPO = {"name": "rl", "type": "grpo", "domains": ["mcqa"], "batch_size": 2, "rollouts_per_prompt": 2, "steps": 1,
        "optimizer": {"lr": 1e-6}, "sampling": {"temperature": 0.7, "max_tokens": 99, "thinking": False}}


class TestEvalSampling:
    def test_unset_is_greedy_with_the_rollouts_length_and_thinking_mode(self):
        assert eval_sampling(GrpoStage.model_validate(GRPO)) == SamplingConfig(temperature=0.0, max_tokens=99, thinking=False)

    def test_a_stage_without_rollouts_evaluates_greedy_64_tokens_non_thinking(self):
        sft = cascade_schema.SftStage.model_validate({k: v for k, v in GRPO.items() if k not in ("rollouts_per_prompt", "sampling")}
                                                     | {"type": "sft"})
        assert eval_sampling(sft) == SamplingConfig(temperature=0.0, max_tokens=64, thinking=False)

    def test_set_is_taken_as_it_is(self):
        s = {"temperature": 1.0, "max_tokens": 8}
        assert eval_sampling(GrpoStage.model_validate(GRPO | {"eval": {"sampling": s}})) == SamplingConfig(**s)

    def test_there_is_one_definition(self):
        """No stage method that could say otherwise (two used to, and contradicted the one that ran)."""
        for cls in cascade_schema.STAGE_TYPES.values():
            assert not hasattr(cls, "eval_sampling")


class TestGrpoKl:
    def test_defaults(self):
        stage = GrpoStage.model_validate(GRPO)
        assert (stage.kl_estimator, stage.kl_clamp, stage.tis_cap) == ("k2", None, None)

    @pytest.mark.parametrize(("field", "value"), [("kl_estimator", "k4"), ("kl_clamp", 0), ("tis_cap", -1.0)])
    def test_bad_values_name_the_field(self, field, value):
        with pytest.raises(ValidationError, match=field):
            GrpoStage.model_validate(GRPO | {field: value})


class TestMaxStaleness:
    def test_on_policy_by_default_and_one_step_at_most(self):
        assert GrpoStage.model_validate(GRPO).max_staleness == 0
        assert GrpoStage.model_validate(GRPO | {"max_staleness": 1}).max_staleness == 1
        with pytest.raises(ValidationError, match="max_staleness"):
            GrpoStage.model_validate(GRPO | {"max_staleness": 2})

    def test_an_env_stage_is_sampled_on_policy(self):
        with pytest.raises(ValidationError, match="max_staleness: 1 samples single-turn batches ahead"):
            GrpoStage.model_validate(GRPO | {"max_staleness": 1, "env": "workbench"})


# ------------------------------------------------------------------------------------ settings coverage
EXEMPT = {
    ("ConstantSchedule", "type"): "the discriminator: it picks the class schedule_lr dispatches on",
    ("LinearWarmupSchedule", "type"): "the discriminator: it picks the class schedule_lr dispatches on",
    ("CosineSchedule", "type"): "the discriminator: it picks the class schedule_lr dispatches on",
}


def models() -> list[type[BaseModel]]:
    found = []
    for module in (cascade_schema, cascade_schedules):
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == module.__name__ \
                    and obj.model_fields and obj is not cascade_schedules.StrictModel:
                found.append(obj)
    return found


def reading_source() -> str:
    """Every services/ module that runs a cascade, without the lines that declare the fields."""
    declares = re.compile(r"^\s+\w+\s*:\s*[^=]+(=.*)?$")
    text = []
    for path in sorted((ROOT / "services").rglob("*.py")):
        if "pb" in path.parts or path.name == "cascade_config.py":  # stubs; loading and error wording
            continue
        text.extend(line for line in path.read_text().splitlines() if not declares.match(line) or "(" in line)
    return "\n".join(text)


def test_every_config_model_is_walked():
    names = {m.__name__ for m in models()}
    assert {"SamplingConfig", "OptimizerConfig", "EvalConfig", "SftStage", "GrpoStage", "MopdStage", "RmStage",
            "CascadeConfig", "LinearWarmupSchedule", "CosineSchedule"} <= names


def unread_fields(walked: list[type[BaseModel]], source: str) -> list[str]:
    """`Model.field` of every field with no read in `source`: `.field` (attribute) or `["field"]` (a
    stored config) outside the field's own declaration; discriminators are exempt."""
    unread = []
    for model in walked:
        for field in model.model_fields:
            if (model.__name__, field) not in EXEMPT and not re.search(rf"\.{field}\b|\[\"{field}\"\]", source):
                unread.append(f"{model.__name__}.{field}")
    return unread


def test_every_field_of_every_cascade_model_is_read_by_code():
    """A field nothing reads is a setting the code silently ignores."""
    assert unread_fields(models(), reading_source()) == []


def test_the_coverage_check_fails_on_a_field_nothing_reads():
    class Probe(cascade_schedules.StrictModel):
        never_read_setting: int = 0
        seed: int = 0  # read (CascadeConfig.seed)

    assert unread_fields([Probe], reading_source()) == ["Probe.never_read_setting"]


def test_every_field_is_documented():
    undocumented = [f"{m.__name__}.{name}" for m in models() for name, field in m.model_fields.items()
                    if not (field.description or "").strip() and (m.__name__, name) not in EXEMPT]
    assert not undocumented, f"fields without a docstring: {undocumented}"


def grpo(**extra) -> dict:
    return {"type": "grpo", "name": "g", "domains": ["workbench"], "steps": 1, "batch_size": 1,
            "rollouts_per_prompt": 2, "optimizer": {"lr": 1e-6}, **extra}


def test_a_stage_names_its_environment_and_limits():
    stage = GrpoStage.model_validate(grpo(env="workbench", max_turns=3, max_episode_tokens=2048, env_seconds=5))
    assert (stage.env, stage.max_turns, stage.max_episode_tokens, stage.env_seconds) == ("workbench", 3, 2048, 5.0)
    assert GrpoStage.model_validate(grpo()).env is None


def test_an_unknown_environment_is_refused_naming_the_ones_that_exist():
    with pytest.raises(ValidationError, match=r"unknown environment 'chess'; the env service runs \['python', 'swe', 'workbench'\]"):
        GrpoStage.model_validate(grpo(env="chess"))


def test_episode_limits_without_an_environment_are_refused():
    with pytest.raises(ValidationError, match="max_turns limit episodes of an environment; set `env`"):
        GrpoStage.model_validate(grpo(max_turns=3))
    with pytest.raises(ValidationError, match="max_turns"):
        GrpoStage.model_validate(grpo(env="workbench", max_turns=0))


def test_a_stored_stage_with_every_default_dumped_validates_again():
    """The ledger keeps a run's config as model_dump (defaults included); every worker validates it
    again, so the limits' defaults of a stage without `env` must not read as set."""
    stage = GrpoStage.model_validate(grpo())
    assert GrpoStage.model_validate(stage.model_dump(mode="json")) == stage
    with_env = GrpoStage.model_validate(grpo(env="workbench", max_turns=3))
    assert GrpoStage.model_validate(with_env.model_dump(mode="json")) == with_env
