"""Grouped-query attention without copying the KV cache, for the `hf` backend on CPU.

A model with fewer key/value heads than query heads (GQA: the tiny model has 2 for 4, Qwen3 and Llama
models 8 for 32 and more) shares each key/value head among `g = heads / kv_heads` query heads.
Transformers' `sdpa` attention on CPU expands the cache to every query head before each call
whenever a padding mask is present (`repeat_kv`: a copy of the whole cache, g times, every layer,
every decode step), because CUDA's fast kernels refuse a mask with GQA. PyTorch's CPU kernel takes
the grouped heads itself (`enable_gqa=True`): query head h reads key/value head h // g, the same
numbers the copy would hold, so the samples and their log-probs are the same to the bit
(tests/policy/test_attention.py) and decoding skips the copy (bench/results/gqa_attention.md).

`use_grouped_attention(model)` switches a loaded model to it; anything outside the plain case (a
paged cache, a position bias, no grouping) goes to transformers' own `sdpa` function unchanged.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface
from transformers.generation.continuous_batching.cache import PagedAttentionCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "cascade_grouped_sdpa"
"""The attention implementation's name in transformers' registries (it takes `sdpa`'s masks)."""


def grouped_sdpa_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                           is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """softmax(q_h k_{h//g}^T * scaling + mask) v_{h//g} for every query head h, with query [B, H, Q, D],
    key and value [B, H/g, K, D] (g = module.num_key_value_groups); returns [B, Q, H, D], as `sdpa` does."""
    groups = getattr(module, "num_key_value_groups", 1)
    if groups == 1 or kwargs.get("position_bias") is not None or isinstance(kwargs.get("cache"), PagedAttentionCache):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      is_causal=is_causal, **kwargs)
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    causal = query.shape[2] > 1 and attention_mask is None and causal
    if causal and key.shape[2] > query.shape[2]:  # a prefill into an empty static cache: as `sdpa` crops it
        key, value = key[:, :, : query.shape[2]], value[:, :, : query.shape[2]]
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal, enable_gqa=True)
    return out.transpose(1, 2).contiguous(), None


def use_grouped_attention(model) -> bool:
    """Switch `model` (transformers, on `sdpa` attention) to `grouped_sdpa_attention` when it has
    grouped key/value heads; True when it did. Other attention implementations are left as they are."""
    config = model.config
    heads, kv_heads = getattr(config, "num_attention_heads", None), getattr(config, "num_key_value_heads", None)
    if config._attn_implementation != "sdpa" or not heads or not kv_heads or kv_heads >= heads:
        return False
    AttentionInterface.register(NAME, grouped_sdpa_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
