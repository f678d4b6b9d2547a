"""The cascade file: an ordered list of training stages, validated before anything starts.

A cascade is YAML (or JSON with the same shape) read by `load_cascade(path)`. Stage kinds are a
discriminated union on `type` (`sft`, `grpo`, `mopd`, `rm`) kept in the `STAGE_TYPES` registry.
Every error names the file and the field (`demo.yaml: stages[2].sampling.temperature: ...`) and
all of them are reported at once. This module knows nothing about Celery, gRPC or the ledger.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from services.common.errors import CascadeError
from services.common.tasks import Domain

NAME = r"^[a-z0-9][a-z0-9_.-]*$"


class CascadeConfigError(CascadeError):
    """A cascade file is unreadable or invalid; `problems` holds one line per bad field."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


class StrictModel(BaseModel):
    """Unknown keys are errors, so a misspelt option never silently falls back to a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SamplingConfig(StrictModel):
    """How the policy samples responses (maps onto policy.proto SamplingParams)."""

    temperature: float = Field(default=1.0, ge=0)
    """Softmax temperature; 0 = greedy. The paper samples RL rollouts at 1.0."""
    top_p: float = Field(default=1.0, gt=0, le=1)
    """Nucleus probability mass kept; 1.0 disables nucleus sampling."""
    top_k: int = Field(default=0, ge=0)
    """Keep only the k most likely tokens; 0 disables top-k."""
    max_tokens: int = Field(default=1024, ge=1)
    """Largest number of generated tokens per response; longer responses are truncated (overlong)."""
    thinking: bool = True
    """Thinking mode (assistant turn opens with `<think>`) or non-thinking mode (empty think block)."""


class ConstantSchedule(StrictModel):
    """The learning rate is `lr` at every step."""

    type: Literal["constant"] = "constant"


class LinearWarmupSchedule(StrictModel):
    """Linear warm-up from `start_lr` to `lr` over `warmup_steps`, then constant (the paper's MOPD)."""

    type: Literal["linear_warmup"]
    warmup_steps: int = Field(ge=1)
    """Steps over which the rate climbs from start_lr to lr."""
    start_lr: float = Field(default=0.0, ge=0)
    """Learning rate at step 0."""


class CosineSchedule(StrictModel):
    """Optional linear warm-up, then cosine decay from `lr` to `min_lr` at the stage's last step."""

    type: Literal["cosine"]
    warmup_steps: int = Field(default=0, ge=0)
    """Steps of linear warm-up from 0 before the decay starts; 0 disables warm-up."""
    min_lr: float = Field(default=0.0, ge=0)
    """Learning rate reached at the last step."""


Schedule = Annotated[ConstantSchedule | LinearWarmupSchedule | CosineSchedule, Field(discriminator="type")]
SCHEDULE_TYPES: dict[str, type[StrictModel]] = {
    "constant": ConstantSchedule, "linear_warmup": LinearWarmupSchedule, "cosine": CosineSchedule,
}


class OptimizerConfig(StrictModel):
    """AdamW settings of one stage."""

    lr: float = Field(gt=0)
    """Peak learning rate (the paper's RL stages use 3e-6)."""
    schedule: Schedule = Field(default_factory=ConstantSchedule)
    """How the rate moves over the stage's steps: constant, linear_warmup or cosine."""
    weight_decay: float = Field(default=0.0, ge=0)
    """Decoupled weight decay; 0 disables it."""
    grad_clip: float = Field(default=1.0, ge=0)
    """Largest global gradient norm; 0 disables clipping."""
    reset: bool = True
    """Start the stage from fresh AdamW moments, as the paper's stages (separate runs) do. false carries
    the previous stage's: Adam's second moment (beta2 = 0.999) then remembers the earlier stage's
    gradients for hundreds of steps, so the size of this stage's steps depends on what ran before it."""

    def lr_at(self, step: int, total_steps: int) -> float:
        """Learning rate at 0-based `step` of a stage of `total_steps` steps.

        constant:      lr
        linear_warmup: start_lr + (lr - start_lr) * min(1, step / warmup_steps)
        cosine:        lr * (step + 1) / warmup_steps during warm-up (no step at rate 0), then
                       min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2, p = (step - warmup) / (total - 1 - warmup)
        """
        s = self.schedule
        if isinstance(s, LinearWarmupSchedule):
            return s.start_lr + (self.lr - s.start_lr) * min(1.0, step / s.warmup_steps)
        if isinstance(s, CosineSchedule):
            if step < s.warmup_steps:
                return self.lr * (step + 1) / s.warmup_steps
            span = max(1, total_steps - 1 - s.warmup_steps)
            p = min(1.0, (step - s.warmup_steps) / span)
            return s.min_lr + (self.lr - s.min_lr) * (1 + math.cos(math.pi * p)) / 2
        return self.lr


class EvalConfig(StrictModel):
    """Validation of the current checkpoint: per-domain mean reward on held-back prompts."""

    prompts_per_domain: int = Field(default=32, ge=1)
    """Validation prompts scored per domain at each evaluation."""
    domains: list[Domain] | None = None
    """Domains evaluated; unset = the stage's own domains. Add others to watch for regressions."""
    sampling: SamplingConfig | None = None
    """Sampling for evaluation; unset = greedy (temperature 0), with the stage's max_tokens and thinking
    mode (sft / rm stages: 64 tokens, non-thinking), so scores compare across steps."""
    samples_per_prompt: int = Field(default=1, ge=1, le=64)
    """Sampled answers per prompt, averaged (avg@k, as the paper reports); > 1 needs a temperature > 0."""
    at_start: bool = True
    """Evaluate the model the stage starts from (step -1), the baseline its gains are measured
    against. Turn off only where that model is untrained (SFT from a fresh model): the report then
    shows the stage's end alone and cannot judge a gain for it."""

    @model_validator(mode="after")
    def _k_needs_sampling(self) -> EvalConfig:
        greedy = self.sampling is None or self.sampling.temperature == 0
        if self.samples_per_prompt > 1 and greedy:
            raise ValueError(f"samples_per_prompt={self.samples_per_prompt} repeats one greedy answer; "
                             "set eval.sampling.temperature > 0 or samples_per_prompt: 1")
        return self


class StageBase(StrictModel):
    """Fields every stage has."""

    name: str = Field(pattern=NAME, max_length=64)
    """Unique name of the stage within the cascade (lowercase letters, digits, `_`, `-`, `.`)."""
    domains: list[Domain] = Field(min_length=1)
    """Task domains this stage trains on (math, code, if, mcqa, structured, tool, rlhf, long_context, swe)."""
    data: str | None = None
    """Folder with `<domain>/{train,validation,sft}.jsonl`, or `synthetic`; unset = the cascade's `data`."""
    batch_size: int = Field(ge=1)
    """Prompts (sft: sequences, rm: preference pairs) per optimizer step."""
    optimizer: OptimizerConfig
    """Learning rate and its schedule."""
    steps: int = Field(ge=1)
    """Optimizer steps in this stage (strictly on-policy RL: one step per batch)."""
    eval_every: int = Field(default=0, ge=0)
    """Evaluate every N steps; 0 = only at the stage's end (which always happens)."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """What an evaluation scores."""

    @field_validator("domains")
    @classmethod
    def _unique_domains(cls, v: list[str]) -> list[str]:
        dupes = sorted({d for d in v if v.count(d) > 1})
        if dupes:
            raise ValueError(f"domain listed twice: {', '.join(dupes)}")
        return v

    def eval_due(self, step: int) -> bool:
        """An evaluation follows `step` (0-based) mid-stage: every `eval_every` steps, the last excluded
        (the stage's end evaluation covers it)."""
        return bool(self.eval_every) and (step + 1) % self.eval_every == 0 and step + 1 < self.steps

    def eval_domains(self) -> list[str]:
        """Domains scored at this stage's evaluations."""
        return list(self.eval.domains) if self.eval.domains is not None else list(self.domains)

    def eval_sampling(self) -> SamplingConfig:
        """Sampling used by this stage's evaluations."""
        return self.eval.sampling or SamplingConfig()


class SftStage(StageBase):
    """Supervised fine-tuning: token cross-entropy on assistant tokens, sequence packing."""

    type: Literal["sft"]
    max_seq_len: int = Field(default=4096, ge=8)
    """Longest packed training sequence, in tokens."""
    packing: bool = True
    """Pack several conversations into one sequence of up to max_seq_len tokens."""


class RolloutStage(StageBase):
    """Fields of the stages that sample from the policy (grpo, mopd)."""

    rollouts_per_prompt: int = Field(ge=1)
    """Responses sampled per prompt (the group size G)."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    """Sampling of the training rollouts."""
    overlong: Literal["filter", "zero_reward", "none"] = "none"
    """Truncated responses: `filter` masks them out of the loss, `zero_reward` scores them 0, `none` keeps them."""

    def eval_sampling(self) -> SamplingConfig:
        """Sampling used by this stage's evaluations (the training sampling unless eval.sampling is set)."""
        return self.eval.sampling or self.sampling


class GrpoStage(RolloutStage):
    """A Cascade-GRPO stage: on-policy REINFORCE with group-normalised advantages."""

    type: Literal["grpo"]
    kl_coef: float = Field(default=0.0, ge=0)
    """Coefficient beta of the KL to the stage's start checkpoint; 0 disables KL (the paper's default)."""
    dynamic_filtering: bool = True
    """Drop groups whose rewards are all equal (all correct / all wrong): they carry no gradient."""
    reward_model: str | None = None
    """Reward model for the `rlhf` domain: an earlier `rm` stage's `output`, or a model folder."""

    @field_validator("rollouts_per_prompt")
    @classmethod
    def _group_needs_two(cls, v: int) -> int:
        if v < 2:
            raise ValueError("GRPO needs at least 2 rollouts per prompt to compute a group advantage")
        return v


class MopdStage(RolloutStage):
    """Multi-domain on-policy distillation from one teacher per domain (Nemotron-Cascade 2, section 4.4)."""

    type: Literal["mopd"]
    teachers: Literal["auto"] | dict[Domain, str] = "auto"
    """`auto` = per domain, the best-evaluated earlier checkpoint; or a map domain -> checkpoint path/ref."""
    eps_low: float = Field(default=0.5, gt=0, lt=1)
    """Lower bound of the train/inference ratio r_t kept in the loss (r_t < eps_low is masked)."""
    eps_high: float = Field(default=2.0, gt=1)
    """Upper bound of r_t kept in the loss (r_t > eps_high is masked)."""
    grpo_alpha: float | None = Field(default=None, ge=0)
    """Weight of an added GRPO outcome advantage (MiMo style); unset = pure distillation."""
    remeasure_teachers: bool = True
    """Draw each teacher that is a checkpoint of this run once more on its domain when the stage
    starts, and the student when it ends, both with one fresh seed: `auto` picks the best of several
    noisy scores, which overstates the checkpoint, so recovery is judged on these paired fresh draws.
    Needs sampled evals (temperature > 0)."""

    @model_validator(mode="after")
    def _teachers_drawn_at_start(self) -> MopdStage:
        if self.remeasure_teachers and not self.eval.at_start:
            raise ValueError("remeasure_teachers draws the teachers at the stage's start evaluation; "
                             "set eval.at_start: true or remeasure_teachers: false")
        return self

    @field_validator("teachers", mode="before")
    @classmethod
    def _teacher_per_domain(cls, v: Any, info: ValidationInfo) -> Any:
        shape = "must be `auto` or a mapping domain -> checkpoint path/ref"
        if (isinstance(v, str) and v != "auto") or not isinstance(v, (str, dict)):
            raise ValueError(shape)
        if isinstance(v, dict) and not all(isinstance(k, str) and isinstance(c, str) and c for k, c in v.items()):
            raise ValueError(f"{shape} (every checkpoint a non-empty string)")
        domains = info.data.get("domains")
        if isinstance(v, dict) and domains is not None:
            missing = [d for d in domains if d not in v]
            extra = [d for d in v if d not in domains]
            if missing:
                raise ValueError(f"no teacher for domain(s) {', '.join(missing)}; map every domain or use `auto`")
            if extra:
                raise ValueError(f"teacher for domain(s) {', '.join(extra)} not in this stage's domains")
        return v


class RmStage(StageBase):
    """Trains a Bradley-Terry reward model on preference pairs; the policy is not changed."""

    type: Literal["rm"]
    domains: list[Domain] = Field(default_factory=lambda: ["rlhf"], min_length=1)
    """Domains whose preference pairs train the reward model (default: rlhf)."""
    output: str = Field(pattern=NAME, max_length=64)
    """Name of the trained reward model; a grpo stage's `reward_model` refers to it."""
    init: str = Field(default="policy", min_length=1)
    """Weights the reward model starts from (its score head always starts afresh): `policy` = the
    policy's at this stage's start (what the stages before trained, as reward models are usually
    started from the SFT model), `model` = the cascade's initial model, or a model folder."""
    max_seq_len: int = Field(default=2048, ge=8)
    """Longest prompt + response sequence scored, in tokens."""


Stage = Annotated[SftStage | GrpoStage | MopdStage | RmStage, Field(discriminator="type")]
STAGE_TYPES: dict[str, type[StageBase]] = {"sft": SftStage, "grpo": GrpoStage, "mopd": MopdStage, "rm": RmStage}
POLICY_STAGES = ("sft", "grpo", "mopd")


class CascadeConfig(StrictModel):
    """A whole cascade: the starting model, the data, and the stages run in order."""

    name: str = Field(pattern=NAME, max_length=64)
    """Name of the cascade (runs are labelled with it)."""
    seed: int = Field(default=0, ge=0)
    """Seed of batch drawing and sampling; the same seed redraws the same batches."""
    model: str = Field(min_length=1)
    """Folder of the initial Hugging Face model (config, weights, tokenizer)."""
    data: str = "synthetic"
    """Folder with `<domain>/{train,validation,sft}.jsonl`, or `synthetic` for the generated tasks."""
    stages: list[Stage] = Field(min_length=1)
    """Stages in the order they run."""

    @model_validator(mode="after")
    def _cross_stage(self) -> CascadeConfig:
        problems = _cross_stage_problems(self.stages)
        if problems:
            raise ValueError("\n".join(problems))
        return self


def _cross_stage_problems(stages: list[StageBase]) -> list[str]:
    """Checks that need the whole stage list: unique names, references to earlier stages only."""
    problems: list[str] = []
    seen_names: set[str] = set()
    rm_outputs: set[str] = set()
    covered: set[str] = set()  # domains trained or evaluated by an earlier policy stage
    for i, stage in enumerate(stages):
        where = f"stages[{i}]"
        if stage.name in seen_names:
            problems.append(f"{where}.name: stage name {stage.name!r} is used twice; names must be unique")
        seen_names.add(stage.name)
        if isinstance(stage, MopdStage) and stage.teachers == "auto":
            missing = [d for d in stage.domains if d not in covered]
            if missing:
                problems.append(
                    f"{where}.teachers: `auto` needs every domain trained or evaluated by an earlier stage; "
                    f"{', '.join(missing)} never was (add it to an earlier stage's domains or eval.domains, "
                    f"or map it to a checkpoint)")
        if isinstance(stage, GrpoStage):
            if "rlhf" in stage.domains and stage.reward_model is None:
                problems.append(f"{where}.reward_model: the rlhf domain needs a reward model "
                                f"(an earlier rm stage's output or a model folder)")
            if stage.reward_model is not None and _looks_like_name(stage.reward_model) \
                    and stage.reward_model not in rm_outputs:
                problems.append(f"{where}.reward_model: {stage.reward_model!r} is not the output of an earlier rm "
                                f"stage (earlier outputs: {sorted(rm_outputs) or 'none'}); use a path for a folder")
        if isinstance(stage, RmStage):
            if stage.output in rm_outputs:
                problems.append(f"{where}.output: reward model name {stage.output!r} is used twice")
            rm_outputs.add(stage.output)
        if stage.type in POLICY_STAGES:
            covered.update(stage.domains)
            covered.update(stage.eval_domains())
    return problems


def _looks_like_name(ref: str) -> bool:
    """A bare name (no `/`, no scheme) refers to an rm stage's output; anything else is a path or URI."""
    return "/" not in ref and "\\" not in ref and ":" not in ref


# ----------------------------------------------------------------------------------------- loading

def load_cascade(path: str | Path) -> CascadeConfig:
    """Read and validate a cascade file (.yaml / .yml / .json); raise CascadeConfigError listing every problem."""
    path = Path(path)
    source = path.name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CascadeConfigError([f"{path}: cannot read the cascade file: {exc.strerror or exc}"]) from exc
    try:
        raw = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise CascadeConfigError([f"{source}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}"]) from exc
    if not isinstance(raw, dict):
        shape = f"the top level must be a mapping with name, model and stages (got {type(raw).__name__})"
        raise CascadeConfigError([f"{source}: {shape}"])
    try:
        return CascadeConfig.model_validate(raw)
    except ValidationError as exc:
        raise CascadeConfigError(format_problems(exc, source)) from exc


def format_problems(exc: ValidationError, source: str) -> list[str]:
    """One line per problem: `SOURCE: stages[2].sampling.temperature: message (got -1)`."""
    lines: list[str] = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        if not loc and err["type"] == "value_error":  # cross-stage checks already name their fields
            msg = err["msg"].removeprefix("Value error, ")
            lines.extend(f"{source}: {line}" for line in msg.splitlines())
            continue
        where = _loc_to_path(loc) or "<root>"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key" + _hint(loc)
        got = err.get("input")
        shown = "" if isinstance(got, (dict, list)) or err["type"] == "missing" else f" (got {got!r})"
        lines.append(f"{source}: {where}: {msg}{shown}")
    return lines


_TAGS = set(STAGE_TYPES) | set(SCHEDULE_TYPES)


def _loc_to_path(loc: tuple) -> str:
    """('stages', 2, 'grpo', 'sampling', 'top_p') -> 'stages[2].sampling.top_p' (union tags dropped)."""
    out = ""
    prev: Any = None
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in _TAGS and (isinstance(prev, int) or prev == "schedule"):
            pass
        elif not _PLAIN_KEY.match(str(part)):  # a key with spaces, dots or newlines: quoted, on one line
            out += f"[{str(part)!r}]"
        else:
            out += f".{part}" if out else str(part)
        prev = part
    return out


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


def _hint(loc: tuple) -> str:
    """`; did you mean 'x'? valid keys: ...` for an unknown key at `loc`."""
    model = _model_at(loc[:-1])
    if model is None:
        return ""
    valid = sorted(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
    guess = f"; did you mean {close[0]!r}?" if close else ""
    return f"{guess} (valid keys here: {', '.join(valid)})"


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at `loc` (following union tags)."""
    model: type[BaseModel] | None = CascadeConfig
    for part in loc:
        if isinstance(part, int):
            continue
        if part in STAGE_TYPES and model is StageBase:
            model = STAGE_TYPES[part]
            continue
        if part in SCHEDULE_TYPES and model is ConstantSchedule:
            model = SCHEDULE_TYPES[part]
            continue
        field = model.model_fields.get(part) if model is not None else None
        if field is None:
            return None
        model = _first_model(field.annotation)
    return model


def _first_model(annotation: Any) -> type[BaseModel] | None:
    """The first BaseModel class inside an annotation such as `list[Stage]` or `SamplingConfig | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _first_model(arg)
        if found is not None:
            return StageBase if found in STAGE_TYPES.values() else found
    return None
