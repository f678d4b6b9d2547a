"""Teacher scoring backends, keyed by the config's `backend` name: `build(directory, config) -> TeacherModel`.

- `hf`: transformers on CPU or GPU, token-budget batches, prompt KV cache shared by the
  completions of a group (services/teacher/scoring.py).
- `vllm`: GPU; every prompt + completion goes through the engine as one prompt with
  `prompt_logprobs` (vLLM does not reuse its prefix cache for prompt log-probs). Imported lazily;
  without vLLM or CUDA, building it is one FailedPrecondition line.
This module knows nothing of gRPC, domains or request validation.
"""

from __future__ import annotations

import importlib.util
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.common.errors import FailedPrecondition, InvalidArgument
from services.teacher.config import TeacherConfig
from services.teacher.scoring import Scores


@dataclass(frozen=True)
class TeacherSpec:
    """What a loaded teacher is (from its config.json)."""

    model: str
    architecture: str
    vocab_size: int
    max_context: int
    device: str


def read_spec(directory: Path, device: str, field: str = "uri") -> TeacherSpec:
    """TeacherSpec of an HF directory without reading its weights."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise InvalidArgument(field, f"{directory} has no config.json (not an HF model directory)")
    cfg = json.loads(path.read_text())
    arch = (cfg.get("architectures") or ["unknown"])[0]
    return TeacherSpec(str(directory), arch, int(cfg["vocab_size"]), int(cfg.get("max_position_embeddings") or 0), device)


class TeacherModel(ABC):
    """One loaded teacher checkpoint that scores completion tokens."""

    name: str
    spec: TeacherSpec

    @abstractmethod
    def score(
        self, prompts: Sequence[np.ndarray], completions: Sequence[np.ndarray], prompt_index: Sequence[int], top_k: int, temperature: float
    ) -> tuple[list[Scores], list[int]]:
        """Scores of every completion (in order) and the padded token count of each forward batch."""


class HfTeacher(TeacherModel):
    name = "hf"

    def __init__(self, directory: Path, config: TeacherConfig):
        from services.common.modelio import load_causal_lm, load_tokenizer

        self.model = load_causal_lm(directory, config.device, config.dtype)
        self.pad_id = load_tokenizer(directory).pad_token_id
        self.spec = read_spec(directory, config.device)
        self.max_batch_tokens = config.max_batch_tokens
        self.share_prompt = config.share_prompt
        self.cache_kw = "cache" if "cache" in _forward_params(self.model) else "past_key_values"

    def score(self, prompts, completions, prompt_index, top_k, temperature):
        from services.teacher.scoring import batch_cost, plan_batches, score_shared, score_whole

        p_lens, c_lens = [len(p) for p in prompts], [len(c) for c in completions]
        batches = plan_batches(p_lens, c_lens, prompt_index, self.max_batch_tokens, self.share_prompt)
        found: dict[int, Scores] = {}
        costs = []
        for batch in batches:
            if self.share_prompt:
                found.update(score_shared(self.model, prompts, completions, batch, pad_id=self.pad_id, cache_kw=self.cache_kw, top_k=top_k, temperature=temperature))
                costs.append(batch_cost(batch, p_lens, c_lens))
            else:
                found.update(score_whole(self.model, prompts, completions, prompt_index, batch, pad_id=self.pad_id, top_k=top_k, temperature=temperature))
                costs.append(len(batch) * max(p_lens[g.prompt] + c_lens[g.completions[0]] for g in batch))
        return [found[i] for i in range(len(completions))], costs


def _forward_params(model) -> set[str]:
    import inspect

    return set(inspect.signature(model.forward).parameters)


def require_vllm() -> None:
    """Raise FailedPrecondition unless vLLM is installed and a CUDA device is visible."""
    if importlib.util.find_spec("vllm") is None:
        raise FailedPrecondition("backend 'vllm' needs the vllm package: pip install 'cascade-posttrain[vllm]' on a GPU machine")
    import torch

    if not torch.cuda.is_available():
        raise FailedPrecondition("backend 'vllm' needs a CUDA GPU, and none is visible (use backend 'hf' on CPU)")


class VllmTeacher(TeacherModel):
    name = "vllm"

    def __init__(self, directory: Path, config: TeacherConfig):
        require_vllm()
        from vllm import LLM

        self.spec = read_spec(directory, "cuda")
        self.llm = LLM(
            model=str(directory), dtype=_VLLM_DTYPES.get(config.dtype, config.dtype), gpu_memory_utilization=config.gpu_memory_utilization,
            tensor_parallel_size=config.tensor_parallel_size, max_model_len=config.max_model_len,
        )

    def score(self, prompts, completions, prompt_index, top_k, temperature):
        from vllm import SamplingParams, TokensPrompt

        if temperature != 1.0:
            raise InvalidArgument("temperature", "the vllm teacher backend scores at temperature 1.0 only (use backend hf)")
        seqs = [np.concatenate([prompts[p], c]).tolist() for p, c in zip(prompt_index, completions)]
        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=top_k, detokenize=False)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=s) for s in seqs], params, use_tqdm=False)
        scores = []
        for out, p, comp in zip(outputs, prompt_index, completions):
            start = len(prompts[p])
            steps = out.prompt_logprobs[start : start + len(comp)]
            lp = np.asarray([step[int(t)].logprob for t, step in zip(comp, steps)], dtype=np.float32)
            ids, vals = [], []
            for step in steps if top_k else ():
                ranked = sorted(((v.rank, tok, v.logprob) for tok, v in step.items() if v.rank is not None and v.rank <= top_k))
                ids.extend(tok for _, tok, _ in ranked[:top_k])
                vals.extend(val for _, _, val in ranked[:top_k])
            scores.append(Scores(lp, np.asarray(ids, np.int32), np.asarray(vals, np.float32)))
        return scores, [len(s) for s in seqs]


_VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

BACKENDS: dict[str, Callable[[Path, TeacherConfig], TeacherModel]] = {"hf": HfTeacher, "vllm": VllmTeacher}


def build_teacher(directory: Path, config: TeacherConfig) -> TeacherModel:
    """The backend named by `config.backend`, loaded from `directory`."""
    if config.backend not in BACKENDS:
        raise InvalidArgument("backend", f"{config.backend!r} is not one of {sorted(BACKENDS)}")
    return BACKENDS[config.backend](directory, config)
