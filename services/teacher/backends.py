"""Teacher scoring backends, keyed by the config's `backend` name: `build(directory, config) -> TeacherModel`.

- `hf`: transformers on CPU or GPU, token-budget batches, prompt KV cache shared by the
  completions of a group (services/teacher/scoring.py).
- `vllm`: vLLM's engine (CUDA build on a GPU, CPU build elsewhere); every prompt + completion goes
  through it as one prompt with `prompt_logprobs`, the completions of a group reusing their
  prompt's cached KV blocks. A same-shaped checkpoint swaps into the running engine. Imported
  lazily; an engine that cannot start is one FailedPrecondition line naming the setting.
This module knows nothing of gRPC, domains or request validation.
"""

from __future__ import annotations

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

    def reload(self, directory: Path) -> bool:
        """Swap the checkpoint of `directory` into this loaded teacher in place; False: this backend
        (or this checkpoint's shape) needs a fresh load instead."""
        return False

    def close(self) -> None:  # noqa: B027 - optional hook, nothing to free by default
        """Free what the teacher holds beyond Python objects (an engine's processes). Default: nothing."""


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


class VllmTeacher(TeacherModel):
    """vLLM engine scoring with prompt log-probs: prompt + completion go in as one prompt, and the
    log-prob vLLM reports for each completion position is log pi_teacher of that token (T = 1).

    Prefix caching shares a group's prompt: the first completion of every prompt runs first and
    leaves the prompt's KV blocks cached, the other G - 1 then reuse them (only whole blocks of
    `block_size` tokens are shared). A request whose cache hit reaches into its completion (siblings
    that also share their first tokens) lacks those positions' log-probs, so it is scored again with
    the cache off. A swap reloads a same-shaped checkpoint into the running engine (`reload`)."""

    name = "vllm"

    def __init__(self, directory: Path, config: TeacherConfig):
        import dataclasses

        from services.common.vllm_engine import (
            device_of_platform,
            require_vllm,
            served_max_len,
            start_engine,
            tensor_layout,
        )

        require_vllm()
        self.layout = tensor_layout(directory)
        self.share_prompt = config.share_prompt
        self.cached_tokens = 0
        """Prompt tokens served from the prefix cache so far (how much the groups shared)."""
        self.llm = start_engine(
            directory, prefix="CASCADE_TEACHER_", dtype=config.dtype, gpu_memory_utilization=config.gpu_memory_utilization,
            kv_cache_memory_bytes=config.kv_cache_memory_bytes, tensor_parallel_size=config.tensor_parallel_size,
            max_model_len=config.max_model_len, enforce_eager=config.enforce_eager, block_size=config.block_size,
            enable_prefix_caching=config.share_prompt,
        )
        spec = read_spec(directory, device_of_platform())
        # vLLM generates one token after every scored sequence: it must fit the engine's max_model_len
        self.spec = dataclasses.replace(spec, max_context=served_max_len(self.llm) - 1)

    def score(self, prompts, completions, prompt_index, top_k, temperature):
        if temperature != 1.0:
            raise InvalidArgument("temperature", "the vllm teacher backend scores at temperature 1.0 only (use backend hf)")
        seqs = [np.concatenate([prompts[p], c]).astype(np.int64).tolist() for p, c in zip(prompt_index, completions)]
        firsts = sorted({p: i for i, p in reversed(list(enumerate(prompt_index)))}.values())
        first = set(firsts)
        phases = [firsts, [i for i in range(len(seqs)) if i not in first]] if self.share_prompt else [list(range(len(seqs)))]
        outputs: dict[int, object] = {}
        for phase in phases:
            outputs.update(zip(phase, self._prompt_logprobs([seqs[i] for i in phase], top_k, cached=self.share_prompt)))
        self.cached_tokens += sum(out.num_cached_tokens or 0 for out in outputs.values())
        stale = [i for i, out in outputs.items() if (out.num_cached_tokens or 0) > len(prompts[prompt_index[i]]) - 1]
        outputs.update(zip(stale, self._prompt_logprobs([seqs[i] for i in stale], top_k, cached=False)))
        scores = [self._scores(outputs[i], len(prompts[p]), completions[i], top_k) for i, p in enumerate(prompt_index)]
        return scores, [len(s) for s in seqs]

    def _prompt_logprobs(self, seqs: list[list[int]], top_k: int, cached: bool) -> list:
        from vllm import SamplingParams, TokensPrompt

        if not seqs:
            return []
        params = SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=top_k, detokenize=False,
                                skip_reading_prefix_cache=not cached)
        return self.llm.generate([TokensPrompt(prompt_token_ids=s) for s in seqs], params, use_tqdm=False)

    @staticmethod
    def _scores(out, start: int, comp: np.ndarray, top_k: int) -> Scores:
        steps = out.prompt_logprobs[start : start + len(comp)]
        lp = np.asarray([step[int(t)].logprob for t, step in zip(comp, steps)], dtype=np.float32)
        ids, vals = [], []
        for step in steps if top_k else ():
            ranked = sorted((v.rank, tok, v.logprob) for tok, v in step.items() if v.rank is not None and v.rank <= top_k)
            ids.extend(tok for _, tok, _ in ranked[:top_k])
            vals.extend(val for _, _, val in ranked[:top_k])
        return Scores(lp, np.asarray(ids, np.int32), np.asarray(vals, np.float32))

    def reload(self, directory: Path) -> bool:
        """Load a checkpoint of the same architecture and tensor shapes into the running engine (in
        place, prefix cache reset); False when its shapes differ (the caller starts a new engine).
        A reload that fails puts the served checkpoint back and raises FailedPrecondition saying so."""
        import dataclasses

        from services.common.vllm_engine import tensor_layout

        new = read_spec(directory, self.spec.device)
        if new.architecture != self.spec.architecture or tensor_layout(directory) != self.layout:
            return False
        previous = self.spec.model
        try:
            self.llm.collective_rpc("cascade_reload_weights", args=(str(directory),))
        except Exception as exc:  # noqa: BLE001 - put the served weights back, then say why
            self.llm.collective_rpc("cascade_reload_weights", args=(previous,))
            raise FailedPrecondition(f"loading teacher {directory} into the vLLM engine failed ({exc}); {previous} still serves") from None
        finally:
            self.llm.reset_prefix_cache()
        self.spec = dataclasses.replace(self.spec, model=str(directory))
        return True

    def close(self) -> None:
        shutdown = getattr(self.llm.llm_engine.engine_core, "shutdown", None)
        if shutdown is not None:
            shutdown()


BACKENDS: dict[str, Callable[[Path, TeacherConfig], TeacherModel]] = {"hf": HfTeacher, "vllm": VllmTeacher}


def build_teacher(directory: Path, config: TeacherConfig) -> TeacherModel:
    """The backend named by `config.backend`, loaded from `directory`."""
    if config.backend not in BACKENDS:
        raise InvalidArgument("backend", f"{config.backend!r} is not one of {sorted(BACKENDS)}")
    return BACKENDS[config.backend](directory, config)
