"""The cascade file's schema: an ordered list of training stages, every field documented.

Stage kinds are a discriminated union on `type` (`sft`, `grpo`, `mopd`, `rm`) kept in the
`STAGE_TYPES` registry; checks that need the whole stage list run on `CascadeConfig`. Evaluation
sampling has one definition, `eval_sampling(stage)`. Loading files and wording errors is
cascade_config's; learning-rate schedules are cascade_schedules'. This module knows nothing about
Celery, gRPC or the ledger.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from services.common.tasks import Domain
from services.orchestrator.cascade_schedules import ConstantSchedule, Schedule, StrictModel, schedule_lr

NAME = r"^[a-z0-9][a-z0-9_.-]*$"


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
        """Learning rate at 0-based `step` of a stage of `total_steps` steps (cascade_schedules.schedule_lr)."""
        return schedule_lr(self.schedule, self.lr, step, total_steps)


class EvalConfig(StrictModel):
    """Validation of the current checkpoint: per-domain mean reward on held-back prompts."""

    prompts_per_domain: int = Field(default=32, ge=1)
    """Validation prompts scored per domain at each evaluation."""
    domains: list[Domain] | None = None
    """Domains evaluated; unset = the stage's own domains. Add others to watch for regressions."""
    sampling: SamplingConfig | None = None
    """Sampling of every evaluation of the stage; unset = greedy (temperature 0) with the stage's rollout
    max_tokens and thinking mode (sft / rm stages: 64 tokens, non-thinking). This is the one definition
    (`eval_sampling`); `teachers: auto` ranks only scores drawn the same way."""
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


class SftStage(StageBase):
    """Supervised fine-tuning: token cross-entropy on assistant tokens, sequence packing."""

    type: Literal["sft"]
    """Stage kind `sft` (the key of STAGE_TYPES and of the step kind that runs it)."""
    max_seq_len: int = Field(default=4096, ge=8)
    """Longest conversation trained, in tokens (a longer one is cut to it)."""
    packing: bool = True
    """Pack the step's conversations into shared rows (positions restarted per conversation); a row's
    width budget is the trainer's `pack_tokens` (default 512 tokens, or the longest conversation)."""


class RolloutStage(StageBase):
    """Fields of the stages that sample from the policy (grpo, mopd)."""

    rollouts_per_prompt: int = Field(ge=1)
    """Responses sampled per prompt (the group size G)."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    """Sampling of the training rollouts."""
    share_prompts: bool = True
    """The trainer computes each prompt once for all its completions in the step's batch (shared rows
    under a block attention mask, services/trainer/sharing.py): the same loss and gradients up to
    float rounding, a fraction of the forward and backward work when prompts are long or G is large.
    Off: every completion's row carries its own copy of the prompt."""
    overlong: Literal["filter", "zero_reward", "none"] = "none"
    """Truncated responses: `filter` masks them out of the loss, `zero_reward` scores them 0, `none` keeps them."""
    env: str | None = None
    """Multi-turn environment of the env service the rollouts are episodes of (`workbench`, `swe`,
    `python`; services.common.synth.multiturn.ENVIRONMENT_NAMES); unset = one assistant turn scored
    by its verifier. Its tasks are `<data>/<env>/{train,validation}.jsonl` (`synthetic`: generated)."""
    max_turns: int = Field(default=4, ge=1, le=64)
    """Assistant turns an episode may take (env stages); past it: verdict `limit_turns`."""
    max_episode_tokens: int = Field(default=4096, ge=16)
    """Tokens of an episode's whole sequence (prompt, turns, tool results; env stages); reached:
    verdict `limit_tokens`, and each turn samples at most what is left of it."""
    env_seconds: float = Field(default=60.0, gt=0)
    """Environment seconds an episode's tool calls may use, all turns together (env stages); past it:
    verdict `limit_env_seconds`."""
    max_staleness: int = Field(default=0, ge=0, le=1)
    """Weight versions a batch may lag the weights it trains: 0 = strictly on-policy (the paper); 1 =
    the policy samples step t+1 on the weights step t starts from while the trainer trains step t
    (MOPD's truncated importance weights, and GRPO's `tis_cap` when set, correct for the lag; each
    step records the version that sampled it). Never across an evaluation, which scores step t's
    weights; single-turn stages only."""

    @field_validator("env")
    @classmethod
    def _known_env(cls, v: str | None) -> str | None:
        from services.common.synth.multiturn import ENVIRONMENT_NAMES

        if v is not None and v not in ENVIRONMENT_NAMES:
            raise ValueError(f"unknown environment {v!r}; the env service runs {list(ENVIRONMENT_NAMES)}")
        return v

    @model_validator(mode="after")
    def _limits_need_env(self) -> RolloutStage:
        # a value other than its default: a stored run's config (dumped with every default) re-validates
        limits = ("max_turns", "max_episode_tokens", "env_seconds")
        unread = [f for f in limits if getattr(self, f) != type(self).model_fields[f].default]
        if self.env is None and unread:
            raise ValueError(f"{', '.join(unread)} limit episodes of an environment; set `env` or remove them")
        if self.env is not None and self.max_staleness:
            raise ValueError("max_staleness: 1 samples single-turn batches ahead; an env stage's episodes are "
                             "sampled on-policy: set max_staleness: 0 or remove `env`")
        return self


class GrpoStage(RolloutStage):
    """A Cascade-GRPO stage: on-policy REINFORCE with group-normalised advantages."""

    type: Literal["grpo"]
    """Stage kind `grpo` (the key of STAGE_TYPES and of the step kind that runs it)."""
    kl_coef: float = Field(default=0.0, ge=0)
    """Coefficient beta of the KL to the stage's start checkpoint; 0 disables KL (the paper's default)."""
    dynamic_filtering: bool = True
    """Drop groups whose rewards are all equal (all correct / all wrong): they carry no gradient."""
    reward_model: str | None = None
    """Reward model for the `rlhf` domain: an earlier `rm` stage's `output`, or a model folder."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k2"
    """Estimator of the KL to the reference (with kl_coef > 0), per token with log-ratio
    d = log π − log π_ref: `k1` = d, `k2` = d²/2 (its gradient is that of KL(π‖π_ref)), `k3` =
    exp(−d) − 1 + d. The trainer applies it."""
    kl_clamp: float | None = Field(default=None, gt=0)
    """Bound |per-token KL estimate| ≤ kl_clamp (a runaway ratio cannot dominate the loss); unset = no clamp."""
    tis_cap: float | None = Field(default=None, gt=0)
    """Truncated importance sampling: weight each token by min(π_train / π_inf, tis_cap) to correct for the
    sampler's numerics; unset = off (strictly on-policy, weight 1)."""

    @field_validator("rollouts_per_prompt")
    @classmethod
    def _group_needs_two(cls, v: int) -> int:
        if v < 2:
            raise ValueError("GRPO needs at least 2 rollouts per prompt to compute a group advantage")
        return v


class MopdStage(RolloutStage):
    """Multi-domain on-policy distillation from one teacher per domain (Nemotron-Cascade 2, section 4.4)."""

    type: Literal["mopd"]
    """Stage kind `mopd` (the key of STAGE_TYPES and of the step kind that runs it)."""
    teachers: Literal["auto"] | dict[Domain, str] = "auto"
    """`auto` = per domain, the best-evaluated earlier checkpoint; or a map domain -> checkpoint path/ref."""
    eps_low: float = Field(default=0.5, gt=0, lt=1)
    """Lower bound of the train/inference ratio r_t kept in the loss (r_t < eps_low is masked)."""
    eps_high: float = Field(default=2.0, gt=1)
    """Upper bound of r_t kept in the loss (r_t > eps_high is masked)."""
    grpo_alpha: float | None = Field(default=None, ge=0)
    """Weight of an added GRPO outcome advantage (MiMo style); unset = pure distillation."""
    remeasure_teachers: bool | None = None
    """Draw each teacher that is a checkpoint of this run once more on its domain when the stage
    starts, and the student when it ends, both with one fresh seed: `auto` picks the best of several
    noisy scores, which overstates the checkpoint, so recovery is judged on these paired fresh draws.
    Needs sampled evaluations (eval.sampling.temperature > 0): greedy scores are the same at every
    seed, so there is nothing to draw again. Unset = on when the stage's evaluations sample, off when
    they are greedy; `true` with greedy evaluations is refused."""
    fresh_samples: int | None = Field(default=None, ge=1, le=64)
    """Sampled answers per prompt of those fresh draws (teachers and student); unset = the stage's
    eval.samples_per_prompt. More samples narrow the recovery claim's interval without making the
    stage's curve evaluations (start and end, which the stages before may already have drawn) as dear."""

    @property
    def remeasures(self) -> bool:
        """Whether the teachers and the student are drawn again (remeasure_teachers, resolved)."""
        sampled = eval_sampling(self).temperature > 0
        return sampled if self.remeasure_teachers is None else self.remeasure_teachers

    @property
    def fresh_k(self) -> int:
        """Samples per prompt of the fresh draws (fresh_samples, resolved)."""
        return self.fresh_samples or self.eval.samples_per_prompt

    @model_validator(mode="after")
    def _teachers_drawn_at_start(self) -> MopdStage:
        if self.remeasure_teachers and eval_sampling(self).temperature == 0:
            raise ValueError("remeasure_teachers: true needs sampled evaluations (greedy scores are the same at "
                             "every seed); set eval.sampling.temperature > 0 or leave remeasure_teachers unset")
        if self.remeasures and not self.eval.at_start:
            raise ValueError("remeasure_teachers draws the teachers at the stage's start evaluation; "
                             "set eval.at_start: true or remeasure_teachers: false")
        if self.fresh_samples is not None and not self.remeasures:
            raise ValueError("fresh_samples sizes the fresh draws of teachers and student, and this stage draws "
                             "none (remeasure_teachers is off or its evaluations are greedy); remove fresh_samples")
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
    """Stage kind `rm` (the key of STAGE_TYPES and of the step kind that runs it)."""
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


def eval_sampling(stage: StageBase) -> SamplingConfig:
    """The sampling of every evaluation of `stage` — the one definition: `eval.sampling` when set, else
    greedy (temperature 0) with the stage's rollout max_tokens and thinking mode (a stage without
    rollouts, sft / rm: 64 tokens, non-thinking)."""
    if stage.eval.sampling is not None:
        return stage.eval.sampling
    rollout = getattr(stage, "sampling", None)
    if rollout is None:
        return SamplingConfig(temperature=0.0, max_tokens=64, thinking=False)
    return SamplingConfig(temperature=0.0, max_tokens=rollout.max_tokens, thinking=rollout.thinking)


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
