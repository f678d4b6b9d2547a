"""`hf` backend: batched sampling with transformers on CPU or GPU.

All B*n samples of a request decode together: the B prompts are left-padded into one batch, one
prefill forward fills a KV cache, which is repeated for each prompt's n samples (the prompt is
computed once, not n times), then every decode step is one forward of one new token for every
unfinished row (finished rows are dropped from the batch and the cache). No Python loop over
samples touches the model. Sampling math (temperature, top-k, top-p, the log-prob of the sampled
token under pi_inf) lives in services/policy/sampling.py. Each sample draws its tokens by
inverse CDF from its own stream of uniforms, keyed by the request's seed, its prompt and its
index (`row_uniforms`): the same prompt and seed give the same samples whatever else the request
holds (up to the float differences of batched arithmetic), and two weight versions evaluated
with one seed share their random numbers. A weight swap re-points the live
model's parameters at tensors read from the bytes the core verified (same architecture, so no
model is rebuilt). On CPU a model with grouped key/value heads attends without copying its cache
(services/policy/backends/attention.py). This module knows nothing of gRPC, chat templates, request
validation or checksums.
"""

from __future__ import annotations

import dataclasses
import inspect
import secrets
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from transformers import DynamicCache

from services.common.errors import InvalidArgument
from services.common.modelio import load_causal_lm, load_tokenizer, resolve_uri, safetensors_views
from services.policy.backends.attention import use_grouped_attention
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
from services.policy.sampling import compute_sample, row_uniforms


def build_hf(config: PolicyConfig) -> HfBackend:
    """Registry entry: the `hf` backend for `config.model` on `config.device`."""
    return HfBackend(config.model, device=config.device, dtype=config.dtype)


def eos_token_ids(model, tokenizer) -> list[int]:
    """End-of-sequence ids: generation_config.eos_token_id (int or list) plus the tokenizer's eos."""
    ids = model.generation_config.eos_token_id if model.generation_config is not None else None
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return sorted(set(ids))


def cache_keyword(model) -> str:
    """Name of the forward argument carrying the KV cache (`cache` in new transformers)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [R, L], attention mask [R, L]) with every row right-aligned (left padding)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :] = torch.as_tensor(row, dtype=torch.long)
        mask[i, width - len(row) :] = 1
    return ids.to(device), mask.to(device)


def stage_tensors(live: Mapping[str, torch.Tensor], loaded: Mapping[str, torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(live tensor, its replacement) pairs: `loaded` converted to each live tensor's device and dtype.

    `live` is the model's state_dict(keep_vars=True), where tied names share one object, so a file
    that stores a tied tensor once still covers both names. A name the model lacks, a shape that
    differs, or a live tensor left uncovered is InvalidArgument naming `weights.uri`.
    """
    pairs, covered = [], set()
    for name, tensor in loaded.items():
        if name not in live:
            raise InvalidArgument("weights.uri", f"tensor {name} is not part of the served model")
        target = live[name]
        if tuple(tensor.shape) != tuple(target.shape):
            raise InvalidArgument("weights.uri", f"tensor {name} has shape {tuple(tensor.shape)}, the served model {tuple(target.shape)}")
        pairs.append((target, tensor.to(device=target.device, dtype=target.dtype)))
        covered.add(id(target))
    missing = [name for name, target in live.items() if id(target) not in covered]
    if missing:
        raise InvalidArgument("weights.uri", f"{len(missing)} tensors of the served model are missing, e.g. {missing[:3]}")
    return pairs


class HfBackend(PolicyBackend):
    """Transformers model + tokenizer; one request at a time (the core serialises calls)."""

    name = "hf"

    def __init__(self, model: str | Path, device: str = "cpu", dtype: str = "float32"):
        directory = resolve_uri(model, "model")
        self.device = torch.device(device)
        self.dtype = dtype
        self.tokenizer = load_tokenizer(directory)
        self.model = load_causal_lm(directory, device, dtype)
        self.grouped_attention = self.device.type == "cpu" and use_grouped_attention(self.model)
        self.spec = read_spec(directory, str(self.device))
        self.eos_ids = eos_token_ids(self.model, self.tokenizer)
        self.pad_id = self.tokenizer.pad_token_id
        self._cache_kw = cache_keyword(self.model)
        self._in_use: dict[str, np.ndarray] = {}  # weight-file buffers the live tensors are views of
        self._spare: dict[str, np.ndarray] = {}  # those of the weights before: free, read into next

    reads_weight_bytes = True

    def stage_weights(self, directory: Path, weights: Mapping[str, np.ndarray]):
        """New tensors for every live parameter and buffer, viewed in the verified bytes (copied only
        to change device or dtype); the live model is untouched until `swap_weights`."""
        loaded: dict[str, torch.Tensor] = {}
        for rel in sorted(weights):
            loaded.update(safetensors_views(weights[rel], rel))
        pairs = stage_tensors(self.model.state_dict(keep_vars=True), loaded)
        views = {id(t) for t in loaded.values()}
        in_use = dict(weights) if any(id(new) in views for _, new in pairs) else {}
        return directory, pairs, in_use

    def spare_buffers(self) -> Mapping[str, np.ndarray]:
        return self._spare

    def swap_weights(self, staged) -> None:
        """Point every live parameter and buffer at its staged tensor: no copy, and a tied tensor
        (the LM head sharing the embedding) is one object, so it stays tied. The buffers the old
        tensors viewed become the spare the next load reads into (double buffering: the live weights
        are never overwritten, and no load allocates fresh memory once two have run)."""
        directory, pairs, in_use = staged
        for live, tensor in pairs:
            live.data = tensor
        self._spare, self._in_use = self._in_use, in_use
        self.spec = dataclasses.replace(self.spec, model=str(directory))

    def _forward(self, ids, mask, positions, cache) -> torch.Tensor:
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
            **{self._cache_kw: cache},
        )
        return out.logits[:, -1]

    @torch.inference_mode()
    def generate(self, prompts: list[list[int]], n: int, params: SamplingConfig) -> list[Sample]:
        total, steps = len(prompts) * n, params.max_tokens
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        uniforms = row_uniforms(prompts, n, seed, steps) if params.temperature > 0 else None
        eos = torch.tensor(self.eos_ids, dtype=torch.long, device=self.device)
        tokens = torch.full((total, steps), self.pad_id, dtype=torch.long, device=self.device)
        logprobs = torch.zeros((total, steps), dtype=torch.float32, device=self.device)
        lengths = torch.zeros(total, dtype=torch.long, device=self.device)
        stopped = torch.zeros(total, dtype=torch.bool, device=self.device)
        active = torch.arange(total, device=self.device)

        logits, mask, positions, cache = self._prefill(prompts, n)
        for t in range(steps):
            u = uniforms[active.cpu(), t] if uniforms is not None else None
            new, lp = compute_sample(logits, params.temperature, params.top_k, params.top_p, uniforms=u)
            tokens[active, t] = new
            logprobs[active, t] = lp
            lengths[active] = t + 1
            done = torch.isin(new, eos)
            if params.stop:
                done |= self._stop_hits(tokens, active, t + 1, params.stop)
            stopped[active[done]] = True
            if t + 1 == steps or bool(done.all()):
                break
            if bool(done.any()):
                keep = (~done).nonzero()[:, 0]
                cache.batch_select_indices(keep)
                active, new, mask, positions = active[keep], new[keep], mask[keep], positions[keep]
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=-1)
            positions = positions[:, -1:] + 1
            logits = self._forward(new[:, None], mask, positions, cache)
        return self._samples(tokens.cpu().numpy(), logprobs.cpu().numpy(), lengths.tolist(), stopped.tolist())

    def _prefill(self, prompts: list[list[int]], n: int):
        """One forward over the prompts (a row each), then each row's cache, last logits, mask and
        positions repeated for its n samples: (logits [R*n, V], mask, positions, cache). A row's numbers
        do not depend on the other rows of the batch (up to batched arithmetic's float differences; to
        the bit on the CPUs measured), so the n samples start from the numbers n prefills of the prompt
        would give, at 1/n of the prompt's compute."""
        ids, mask = left_pad(prompts, self.pad_id, self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        logits = self._forward(ids, mask, positions, cache)
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits, mask, positions = (t.repeat_interleave(n, dim=0) for t in (logits, mask, positions))
        return logits, mask, positions, cache

    def _stop_hits(self, tokens: torch.Tensor, active: torch.Tensor, length: int, stop: tuple[str, ...]) -> torch.Tensor:
        """Which active rows just completed a stop string (decoding only a tail window of tokens)."""
        window = 4 * max(len(s) for s in stop) + 2
        tails = tokens[active, max(0, length - window) : length].tolist()
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=False)
        hits = [any(s in text for s in stop) for text in texts]
        return torch.tensor(hits, dtype=torch.bool, device=self.device)

    def _samples(self, tokens: np.ndarray, logprobs: np.ndarray, lengths: list[int], stopped: list[bool]) -> list[Sample]:
        seqs = [tokens[i, :n].astype(np.int32) for i, n in enumerate(lengths)]
        return [
            Sample(
                seq, logprobs[i, : lengths[i]].astype(np.float32), decode_sample(self.tokenizer, seq, self.eos_ids),
                FINISH_STOP if stopped[i] else FINISH_LENGTH,
            )
            for i, seq in enumerate(seqs)
        ]
