"""`vllm` backend: the same interface on vLLM's offline engine (GPU only; `pip install .[vllm]`).

vLLM is imported only when this backend is built, so the rest of Cascade never needs it. Without
vLLM or without CUDA, building it raises one FailedPrecondition line saying which is missing.

- sampling: `SamplingParams(n, temperature, top_p, top_k, max_tokens, stop, seed, logprobs=0)`;
  `logprobs=0` returns the log-prob of the sampled token only, and the engine is created with
  `logprobs_mode="processed_logprobs"` so that log-prob is taken after temperature / top-k /
  top-p, i.e. under pi_inf like the `hf` backend (greedy requests get the untempered log-prob).
- weights: a swap streams the new safetensors files into the live model on every worker through
  `LLM.collective_rpc` (the model's own `load_weights`), between batches.
This module knows nothing of gRPC, chat templates, request validation or checksums.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from services.common.errors import FailedPrecondition
from services.common.modelio import load_tokenizer, resolve_uri
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


def require_vllm() -> None:
    """Raise FailedPrecondition unless vLLM is installed and a CUDA device is visible."""
    if importlib.util.find_spec("vllm") is None:
        raise FailedPrecondition("backend 'vllm' needs the vllm package: pip install 'cascade-posttrain[vllm]' on a GPU machine")
    import torch

    if not torch.cuda.is_available():
        raise FailedPrecondition("backend 'vllm' needs a CUDA GPU, and none is visible (use backend 'hf' on CPU)")


def build_vllm(config: PolicyConfig) -> VllmBackend:
    """Registry entry: the `vllm` backend (fails with one clear line without vLLM or a GPU)."""
    require_vllm()
    return VllmBackend(config)


def load_safetensors_into_worker(worker, directory: str) -> int:
    """Run on each vLLM worker: stream every *.safetensors tensor of `directory` into the model."""
    from safetensors.torch import safe_open

    model = worker.model_runner.get_model() if hasattr(worker.model_runner, "get_model") else worker.model_runner.model

    def tensors():
        for path in sorted(Path(directory).glob("*.safetensors")):
            with safe_open(str(path), framework="pt", device="cpu") as f:
                for name in f.keys():  # noqa: SIM118 - safe_open is not a dict
                    yield name, f.get_tensor(name)

    loaded = model.load_weights(weights=tensors())
    return len(loaded) if loaded is not None else 0


def eos_token_ids_of(directory: Path, tokenizer) -> list[int]:
    """eos ids from generation_config.json (int or list) plus the tokenizer's eos."""
    import json

    path = Path(directory) / "generation_config.json"
    ids = json.loads(path.read_text()).get("eos_token_id") if path.is_file() else None
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    return sorted({*ids, *([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])})


class VllmBackend(PolicyBackend):
    """vLLM `LLM` engine + the HF tokenizer of the same directory."""

    name = "vllm"

    def __init__(self, config: PolicyConfig):
        from vllm import LLM

        directory = resolve_uri(config.model, "model")
        self.tokenizer = load_tokenizer(directory)
        self.spec = read_spec(directory, "cuda")
        self.eos_ids = eos_token_ids_of(directory, self.tokenizer)
        self.llm = LLM(
            model=str(directory),
            dtype=_VLLM_DTYPES.get(config.dtype, config.dtype),
            gpu_memory_utilization=config.gpu_memory_utilization,
            tensor_parallel_size=config.tensor_parallel_size,
            max_model_len=config.max_model_len,
            enforce_eager=config.enforce_eager,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
        )

    def generate(self, prompts: list[list[int]], n: int, params: SamplingConfig) -> list[Sample]:
        from vllm import SamplingParams, TokensPrompt

        sampling = SamplingParams(
            n=n,
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
        return directory  # GPU memory holds one copy: the load itself happens in swap_weights

    def swap_weights(self, staged) -> None:
        self.llm.collective_rpc(load_safetensors_into_worker, args=(str(staged),))
        self.llm.reset_prefix_cache()
        self.spec = type(self.spec)(**{**self.spec.__dict__, "model": str(staged)})


_VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
