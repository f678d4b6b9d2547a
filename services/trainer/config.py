"""Settings of the trainer service (environment variables CASCADE_TRAINER_*).

Nested fields use `__`, e.g. CASCADE_TRAINER_SCHEDULE__NAME=linear_warmup,
CASCADE_TRAINER_SCHEDULE__WARMUP_STEPS=30.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.cores import CoreSettings
from services.common.settings import ServerSettings
from services.trainer.schedules import ScheduleConfig

MODEL_KINDS = ("causal_lm", "sequence_classifier")


class TrainerConfig(ServerSettings, CoreSettings):
    """What the trainer trains, how, and where it keeps checkpoints and published weights (and, by
    CoreSettings, how many torch threads a step uses: CASCADE_TRAINER_MAX_THREADS, CASCADE_TRAINER_CORES_DIR)."""

    model_config = SettingsConfigDict(
        env_prefix="CASCADE_TRAINER_", env_file=".env", extra="ignore", env_nested_delimiter="__"
    )

    model: str = ""
    """HF directory (local path or file:// URI) of the starting weights and tokenizer. Required."""
    model_kind: str = Field(default="causal_lm", pattern="^(causal_lm|sequence_classifier)$")
    """`causal_lm` (sft, grpo, mopd) or `sequence_classifier` (bt: a reward model with one output,
    its head freshly initialised on top of `model`)."""
    store: Path = Path(".cascade/trainer")
    """Checkpoint store: checkpoints/<tag>/, weights/v<version>/, journal.jsonl, journals/."""
    device: str = Field(default="auto", pattern="^(auto|cpu|cuda(:[0-9]+)?)$")
    """auto (cuda when available, else cpu), cpu, cuda or cuda:N."""
    precision: str = Field(default="auto", pattern="^(auto|fp32|bf16)$")
    """auto (bf16 on GPU, fp32 on CPU), fp32 or bf16 (GPU only)."""
    zero_stage: int = Field(default=0, ge=0, le=3)
    """DeepSpeed ZeRO stage 0-3 (all four run on CPU with gloo, see bench/results/trainer.md)."""
    dist_backend: str | None = None
    """torch.distributed backend; unset = the accelerator's (gloo on CPU, nccl on GPU)."""
    schedule: ScheduleConfig = ScheduleConfig()
    """Learning-rate schedule; its `lr` is the optimizer's peak learning rate."""
    weight_decay: float = Field(default=0.0, ge=0)
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    adam_eps: float = Field(default=1e-8, gt=0)
    """AdamW epsilon."""
    grad_clip: float = Field(default=1.0, ge=0)
    """Clip the global gradient norm to this value; 0 disables clipping."""
    micro_batch_tokens: int = Field(default=0, ge=0)
    """Largest padded tokens (rows x longest row) one forward pass takes; a larger shard is split
    into micro-batches whose gradients accumulate into one optimizer step. 0 = no split."""
    pack_tokens: int = Field(default=512, ge=0)
    """Width budget of a packed SFT row (a TrainStep with `packing`), in tokens: the step's
    conversations are laid into rows of at most max(this, the longest conversation) tokens, the
    layout of least padded area (services/trainer/packing.py). 0 = the step's longest conversation.
    512 measured fastest on the demo's SFT data on CPU, ahead of 0 and of 2048 (attention's cost
    grows with a row's width): bench/results/packing.md."""
    share_tokens: int = Field(default=512, ge=0)
    """Width budget of a shared-prompt row (a GRPO or MOPD TrainStep with `share_prompts`), in tokens:
    a prompt's completions follow one copy of it up to max(this, prompt + its longest completion)
    tokens, then a new row starts (services/trainer/sharing.py). The row's block attention mask holds
    width x width entries, so long contexts want a small budget. 0 = one completion a row (no sharing)."""
    resume: str = ""
    """Checkpoint tag to load at start-up (`latest` = the newest saved; `auto` = the newest when one
    exists, else start from `model`); empty = start from `model`."""
    autosave: bool = False
    """Save checkpoint `autosave` after every applied step, before replying; with resume=auto a
    restarted trainer then continues exactly where it stopped (weights, optimizer, journal)."""
    seed: int = 0
    """Seed of torch's RNG (the classifier head's initialisation)."""
    journal_keep: int = Field(default=100_000, ge=1)
    """Applied step ids remembered for exactly-once refusal (oldest forgotten first)."""

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        if self.precision == "bf16" and self.device == "cpu":
            raise ValueError("precision bf16 needs a GPU; use precision=fp32 (or auto) with device=cpu")
        return self
