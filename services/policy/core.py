"""The policy core: validated generation and atomic weight swaps over one backend.

`PolicyCore` renders chat prompts with the tokenizer's chat template, validates every request
(each error names the request field), serialises generation behind a lock so a weight swap only
ever happens between batches, verifies the checksum and the architecture of published weights
before loading them, and counts what it does in Prometheus metrics. It knows nothing of gRPC:
the servicer in server.py translates messages, tests call this object directly.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client import Counter, Gauge, Histogram

from services.common.checksum import read_weights
from services.common.cores import CorePool
from services.common.errors import FailedPrecondition, InvalidArgument
from services.common.weightfetch import WeightSource
from services.policy.backends import build_backend
from services.policy.backends.base import PolicyBackend, Sample, SamplingConfig, is_weight_file, read_spec
from services.policy.config import PolicyConfig

ROLES = frozenset({"system", "user", "assistant", "tool"})
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 256

TOKENS = Counter("cascade_policy_tokens_generated_total", "Tokens sampled by the policy.")
SAMPLES = Counter("cascade_policy_samples_total", "Samples generated, by finish reason.", ["finish_reason"])
BATCH = Histogram(
    "cascade_policy_batch_samples", "Samples (prompts x n) per Generate call.", buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
)
LOAD_SECONDS = Histogram("cascade_policy_weight_load_seconds", "Seconds to verify, read and swap published weights.")
VERSION = Gauge("cascade_policy_weight_version", "Weight version being served.")



@dataclass(frozen=True)
class Chat:
    """A prompt given as chat messages, rendered with the tokenizer's chat template."""

    messages: list[dict[str, str]]
    """[{"role": "user", "content": "..."}, ...]; roles: system, user, assistant, tool."""


Prompt = Sequence[int] | np.ndarray | Chat
"""Token ids (already templated) or a Chat."""


@dataclass
class GenerateResult:
    prompt_token_ids: list[list[int]]
    """Templated prompt ids, one row per prompt."""
    samples: list[Sample]
    """Prompt-major: sample j of prompt i is samples[i * n + j]."""
    weight_version: int


def check_sampling(params: SamplingConfig, max_new_tokens: int) -> None:
    """Raise InvalidArgument naming the first bad field of `params` (field names as in the proto)."""
    if not math.isfinite(params.temperature) or params.temperature < 0:
        raise InvalidArgument("sampling.temperature", f"must be a finite number >= 0, got {params.temperature}")
    if not math.isfinite(params.top_p) or not 0 < params.top_p <= 1:
        raise InvalidArgument("sampling.top_p", f"must be in (0, 1], got {params.top_p}")
    if params.top_k < 0:
        raise InvalidArgument("sampling.top_k", f"must be >= 0 (0 disables it), got {params.top_k}")
    if not 1 <= params.max_tokens <= max_new_tokens:
        raise InvalidArgument("sampling.max_tokens", f"must be in [1, {max_new_tokens}], got {params.max_tokens}")
    if len(params.stop) > MAX_STOP_STRINGS:
        raise InvalidArgument("sampling.stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(params.stop)}")
    for i, s in enumerate(params.stop):
        if not s or len(s) > MAX_STOP_CHARS:
            raise InvalidArgument(f"sampling.stop[{i}]", f"must hold 1 to {MAX_STOP_CHARS} characters, got {len(s)}")


def check_token_ids(ids: np.ndarray, vocab_size: int, field: str) -> None:
    """Raise InvalidArgument unless `ids` is non-empty and every id is in [0, vocab_size)."""
    if ids.size == 0:
        raise InvalidArgument(field, "is empty; a prompt needs at least one token")
    bad = np.flatnonzero((ids < 0) | (ids >= vocab_size))
    if bad.size:
        raise InvalidArgument(field, f"token id {int(ids[bad[0]])} at position {int(bad[0])} is outside the vocabulary [0, {vocab_size})")


def check_messages(messages: list[dict[str, str]], field: str) -> None:
    """Raise InvalidArgument unless the conversation is non-empty with known roles."""
    if not messages:
        raise InvalidArgument(field, "has no messages")
    for j, m in enumerate(messages):
        if m.get("role") not in ROLES:
            raise InvalidArgument(f"{field}[{j}].role", f"must be one of {sorted(ROLES)}, got {m.get('role')!r}")


class PolicyCore:
    """One backend, its weight version, and the lock that keeps swaps between batches."""

    def __init__(self, backend: PolicyBackend, config: PolicyConfig):
        self.backend = backend
        self.config = config
        self.weight_version = 0
        self._generate_lock = threading.Lock()
        self._load_lock = threading.Lock()
        self.weights = WeightSource(config)
        self.cores = CorePool.off() if backend.name == "vllm" else CorePool.from_settings(config)  # vLLM: its own threads
        VERSION.set(0)

    @classmethod
    def build(cls, config: PolicyConfig) -> PolicyCore:
        if not config.model:
            raise InvalidArgument("model", "is not set; point CASCADE_POLICY_MODEL at an HF model directory")
        return cls(build_backend(config), config)

    def close(self) -> None:
        """Stop what the backend runs beside this process (vLLM's engine core); the core serves no more."""
        with self._generate_lock, self._load_lock:
            self.backend.close()

    def render(self, prompt: Prompt, index: int, thinking: bool) -> list[int]:
        """Token ids of one prompt: chat messages go through the chat template, ids are checked."""
        if isinstance(prompt, Chat):
            field = f"prompts[{index}].conversation.messages"
            check_messages(prompt.messages, field)
            tok = self.backend.tokenizer
            if not getattr(tok, "chat_template", None):
                raise FailedPrecondition("the model's tokenizer has no chat template; send token_ids prompts")
            text = tok.apply_chat_template(prompt.messages, add_generation_prompt=True, enable_thinking=thinking, tokenize=False)
            ids = np.asarray(tok.encode(text, add_special_tokens=False), dtype=np.int64)
        else:
            field = f"prompts[{index}].token_ids"
            ids = np.asarray(prompt, dtype=np.int64).reshape(-1)
        check_token_ids(ids, self.backend.spec.vocab_size, field)
        return ids.tolist()

    def generate(self, prompts: Sequence[Prompt], n: int, params: SamplingConfig, thinking: bool = False) -> GenerateResult:
        """Sample `n` responses per prompt with the log-prob of every sampled token (pi_inf)."""
        if not prompts:
            raise InvalidArgument("prompts", "is empty; send at least one prompt")
        if n < 1:
            raise InvalidArgument("n", f"must be >= 1, got {n}")
        if len(prompts) * n > self.config.max_request_samples:
            raise InvalidArgument("n", f"{len(prompts)} prompts x n={n} exceeds max_request_samples={self.config.max_request_samples}")
        check_sampling(params, self.config.max_new_tokens)
        rendered = [self.render(p, i, thinking) for i, p in enumerate(prompts)]
        self._check_context(rendered, params.max_tokens)
        with self._generate_lock, self.cores.lease():  # the host's free cores for this batch
            samples = self.backend.generate(rendered, n, params)
            version = self.weight_version
        BATCH.observe(len(samples))
        TOKENS.inc(sum(len(s.token_ids) for s in samples))
        for s in samples:
            SAMPLES.labels(s.finish_reason).inc()
        return GenerateResult(rendered, samples, version)

    def _check_context(self, rendered: list[list[int]], max_tokens: int) -> None:
        context = self.backend.spec.max_context
        for i, ids in enumerate(rendered):
            if context and len(ids) + max_tokens > context:
                field = f"prompts[{i}]" if len(ids) >= context else "sampling.max_tokens"
                raise InvalidArgument(field, f"prompt {i} has {len(ids)} tokens; + max_tokens={max_tokens} exceeds the model's context of {context}")

    def load_weights(self, version: int, uri: str, sha256: str) -> float:
        """Verify, stage and swap published weights; return the seconds it took.

        Each weight file is read once: the checksum is computed on the bytes the backend then
        loads. Checksum mismatch -> ChecksumMismatch (old weights stay); a checkpoint of another
        architecture or vocabulary -> InvalidArgument naming `weights.uri`.
        """
        start = time.perf_counter()
        if not sha256:
            raise InvalidArgument("weights.sha256", "is empty; published weights must carry their sha256")
        directory = self.weights.locate(uri, "weights.uri", version, sha256)  # here, or fetched from the trainer
        keep = is_weight_file if self.backend.reads_weight_bytes else (lambda rel: False)
        with self._load_lock:  # one load at a time: it reads into the backend's spare buffers
            read = read_weights(directory, keep, self.backend.spare_buffers())
            self._check_compatible(directory)
            try:
                staged = self.backend.stage_weights(directory, read.files)  # while the last blocks hash
            except Exception:
                read.check(sha256)  # bytes that are not the published ones: a mismatch, not a bad file
                raise
            read.check(sha256)  # nothing staged becomes live unless the bytes are the published ones
            with self._generate_lock:
                self.backend.swap_weights(staged)
                self.weight_version = version
        VERSION.set(version)
        seconds = time.perf_counter() - start
        LOAD_SECONDS.observe(seconds)
        return seconds

    def _check_compatible(self, directory) -> None:
        new, old = read_spec(directory, self.backend.spec.device, "weights.uri"), self.backend.spec
        if new.architecture != old.architecture:
            raise InvalidArgument("weights.uri", f"architecture {new.architecture} does not match the served {old.architecture}")
        if new.vocab_size != old.vocab_size:
            raise InvalidArgument("weights.uri", f"vocab_size {new.vocab_size} does not match the served {old.vocab_size}")
        for key in sorted(new.shape.keys() & old.shape.keys()):
            if new.shape[key] != old.shape[key]:
                raise InvalidArgument("weights.uri", f"config {key}={new.shape[key]} does not match the served {old.shape[key]}")

    def info(self) -> dict[str, Any]:
        spec = self.backend.spec
        return {
            "model": spec.model,
            "backend": self.backend.name,
            "weight_version": self.weight_version,
            "vocab_size": spec.vocab_size,
            "architecture": spec.architecture,
            "device": spec.device,
        }
