"""The interface every generation backend implements, and the plain types it speaks.

A backend turns already-templated prompt token ids into samples with the log-prob of each sampled
token under the sampling distribution (pi_inf). It knows nothing of gRPC, chat templates, request
validation, checksums or weight versions: the policy core does those and calls the backend with
clean inputs. Weight swaps come in two halves so the core can keep them atomic: `stage_weights`
runs outside the generation lock (read and build the new weights off to the side where the
backend can), `swap_weights` runs under it (make the staged weights live).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from services.common.errors import InvalidArgument

FINISH_STOP = "stop"
"""The sample ended with an end-of-sequence token or a stop string."""
FINISH_LENGTH = "length"
"""The sample reached max_tokens (truncated)."""


@dataclass(frozen=True)
class SamplingConfig:
    """Validated sampling parameters (see proto SamplingParams for the wire contract)."""

    max_tokens: int
    """New tokens per sample, >= 1."""
    temperature: float = 1.0
    """>= 0; 0 is greedy decoding."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]; 1.0 disables the filter."""
    top_k: int = 0
    """Keep the k most likely tokens; 0 disables the filter."""
    stop: tuple[str, ...] = ()
    """Stop strings; a sample ends after the first token that completes one (kept in the output)."""
    seed: int | None = None
    """Seed of the request's draws; with one seed a prompt's samples depend on the prompt alone, not on
    the rest of the request (hf backend: `sampling.row_uniforms`). None draws a fresh one."""


@dataclass
class Sample:
    """One generated sample."""

    token_ids: np.ndarray
    """Sampled token ids (int32), including the end-of-sequence token when it ended the sample."""
    logprobs: np.ndarray
    """log pi_inf of each sampled token (float32), aligned with token_ids."""
    text: str
    """Decoded text without the final end-of-sequence token (see decode_sample)."""
    finish_reason: str
    """FINISH_STOP or FINISH_LENGTH."""


@dataclass(frozen=True)
class ModelSpec:
    """What a backend is serving; the core compares it against weights it is asked to load."""

    model: str
    architecture: str
    vocab_size: int
    max_context: int
    device: str
    shape: dict[str, Any] = field(default_factory=dict)
    """Architecture-defining config values (hidden size, layers, heads...) for compatibility checks."""


class PolicyBackend(ABC):
    """A model that samples. Implementations: `hf` (transformers), `vllm` (vLLM, GPU or CPU build)."""

    name: str
    spec: ModelSpec
    tokenizer: Any
    """The HF tokenizer (chat template, decoding); shared with the core for prompt rendering."""

    @abstractmethod
    def generate(self, prompts: list[list[int]], n: int, params: SamplingConfig) -> list[Sample]:
        """Sample `n` completions of every prompt; return them prompt-major (prompt i, sample j at i*n+j)."""

    def close(self) -> None:  # noqa: B027 - optional hook: an in-process model frees with the object
        """Stop what the backend started beside this process (vLLM's engine-core process)."""

    reads_weight_bytes: bool = False
    """True: `stage_weights` gets the contents of the directory's *.safetensors files, read once
    while the core verified the checksum (so it loads exactly the verified bytes); False: it gets
    an empty mapping and reads the directory itself."""

    @abstractmethod
    def stage_weights(self, directory: Path, weights: Mapping[str, Any]) -> Any:
        """Prepare the weights of an HF directory (already checksummed and shape-checked) for a swap,
        without touching the live model; `weights`: relative path -> verified contents (a writable
        uint8 numpy array) of each weight file (see reads_weight_bytes). Tensors that do not fit the
        served model: InvalidArgument naming `weights.uri`."""

    def spare_buffers(self) -> Mapping[str, Any]:
        """Weight-file buffers of an earlier load that no live tensor uses any more (relative path ->
        uint8 array); the core reads the next weights into them. None by default."""
        return {}

    @abstractmethod
    def swap_weights(self, staged: Any) -> None:
        """Make staged weights live. Called with no generation running."""


SHAPE_KEYS = (
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "tie_word_embeddings",
)
"""Config values two checkpoints must share for one to replace the other in a running backend."""


def shape_of(config: dict[str, Any]) -> dict[str, Any]:
    """The architecture-defining subset of an HF config (as a dict, e.g. config.json)."""
    return {key: config[key] for key in SHAPE_KEYS if key in config}


def read_spec(directory: Path, device: str, field: str = "model") -> ModelSpec:
    """ModelSpec of an HF directory from its config.json (no weights read); `field` names it in errors."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise InvalidArgument(field, f"{directory} has no config.json (not an HF model directory)")
    cfg = json.loads(path.read_text())
    return ModelSpec(
        model=str(directory),
        architecture=(cfg.get("architectures") or ["unknown"])[0],
        vocab_size=int(cfg["vocab_size"]),
        max_context=int(cfg.get("max_position_embeddings") or 0),
        device=device,
        shape=shape_of(cfg),
    )


def is_weight_file(rel: str) -> bool:
    """Whether a file of a weight directory (relative path) holds tensors."""
    return rel.endswith(".safetensors")


def decode_sample(tokenizer, token_ids: np.ndarray, eos_ids: Sequence[int]) -> str:
    """Text of a sample: every token decoded except a final end-of-sequence token.

    The chat template's markup tokens (<think>, </think>, <tool_call>...) are kept even where the
    tokenizer marks them special: reward verifiers split reasoning from the answer and parse tool
    calls from this text. Only the end-of-sequence token that ended the sample is dropped.
    """
    ids = token_ids.tolist()
    if ids and ids[-1] in eos_ids:
        ids = ids[:-1]
    return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
