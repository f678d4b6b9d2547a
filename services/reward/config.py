"""Settings of the reward service (environment prefix CASCADE_REWARD_, e.g. CASCADE_REWARD_PORT)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from services.common.settings import ServerSettings


class RewardConfig(ServerSettings):
    """How the reward service scores: concurrency, deadlines, sandbox limits, reward model."""

    model_config = SettingsConfigDict(env_prefix="CASCADE_REWARD_", env_file=".env", extra="ignore")

    max_parallel: int = Field(default=4, ge=1, le=256)
    """Items scored at once (threads); sandbox and verifier workers bound the real parallelism."""
    max_pending_items: int = Field(default=4096, ge=1)
    """Items admitted (queued + running) across all calls; a call beyond it gets RESOURCE_EXHAUSTED."""
    verify_workers: int = Field(default=2, ge=1, le=64)
    """Worker processes for the pure verifiers (math, if, structured, tool, mcqa, long_context)."""
    verify_timeout_s: float = Field(default=10.0, gt=0, le=600)
    """Deadline of one pure verification; past it the worker is killed and the verdict is `timeout`."""
    math_last_box: bool = True
    """math: compare the last `\\boxed{}` of the response (True) or the first (False)."""
    if_reward: Literal["all", "fraction"] = "all"
    """if: `all` = 1 only when every instruction is followed (IF-RL), `fraction` = share followed."""
    if_mode: Literal["strict", "loose"] = "strict"
    """if: which IFEval mode decides the reward."""
    sandbox_workers: int = Field(default=2, ge=1, le=64)
    """Sandboxed programs running at once (each pool slot has its own uid in root mode)."""
    sandbox_timeout_s: float = Field(default=5.0, gt=0, le=600)
    """Wall-clock seconds of one sandboxed run (a code test; swe runs get twice this)."""
    sandbox_memory_mb: int = Field(default=512, ge=64)
    """Address-space limit of each sandboxed process, MiB."""
    sandbox_nproc: int = Field(default=32, ge=2, le=4096)
    """Processes one sandboxed run may have at once (root mode)."""
    sandbox_fsize_mb: int = Field(default=16, ge=1)
    """Largest file (stdout included) a sandboxed process may write, MiB."""
    sandbox_nofile: int = Field(default=64, ge=16)
    """Open files per sandboxed process."""
    sandbox_base_uid: int | None = Field(default=None, ge=1000, le=2**31 - 1024)
    """First uid of the sandbox slots (slot i runs as base_uid + i; keep the range unused). Unset: a block
    of 64 picked from the process id, so two reward services on one host never share a uid."""
    sandbox_root: Path | None = None
    """Where run directories are made; default /var/lib/cascade/sandbox as root (never under /tmp)."""
    sandbox_python: str | None = None
    """Interpreter for sandboxed code; default: ours if the sandbox uid may run it, else the system's."""
    allow_unisolated: bool = False
    """Run code without a network namespace / per-run uid when they are unavailable. Unsafe; off."""
    reward_model: Path | None = None
    """HF sequence-classification directory for the `rlhf` domain (kind bt), or the judge (kind genrm:
    a causal-LM folder, or the model name an endpoint serves); unset = rlhf items get `error`."""
    reward_model_kind: str = Field(default="bt", pattern="^(bt|genrm)$")
    """`bt`: a Bradley-Terry sequence classifier (rm.py); `genrm`: a generative judge's expected 0-9
    rating (genrm.py), the paper's RLHF reward."""
    genrm_endpoint: str | None = None
    """genrm: base URL of an OpenAI-compatible server that serves the judge (its /v1/completions);
    unset = the judge is loaded here from the `reward_model` folder."""
    genrm_api_key: str | None = None
    """genrm: bearer token sent to `genrm_endpoint` (keep it in the environment, not in a file)."""
    genrm_template: Path | None = None
    """genrm: file with the judge prompt ({conversation} and {response} placeholders); unset = genrm.py's."""
    reward_model_device: str = "cpu"
    """Device of the reward model (cpu, cuda:0)."""
    reward_model_dtype: str = "float32"
    """Weights dtype of the reward model (float32, bfloat16, float16)."""
    reward_model_max_length: int = Field(default=2048, ge=16)
    """Tokens of (prompt, response) the reward model reads; longer inputs are cut from the left."""
