"""Build a tiny causal LM from scratch: a locally trained byte-level BPE tokenizer and random weights.

`init_model(out_dir, preset, seed)` writes an HF directory (config.json, model.safetensors,
generation_config.json, tokenizer.json, tokenizer_config.json with the chat template) that loads
back with `AutoModelForCausalLM` / `AutoTokenizer` and `local_files_only=True`. Presets live in the
explicit `PRESETS` registry, one builder signature each. Everything is deterministic by seed and
nothing is downloaded. This module knows nothing of serving or training; the template text lives
in `services.common.chat_template`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.chat_template import CHAT_TEMPLATE, IM_END, PAD_TOKEN, SPECIAL_TOKENS
from services.common.errors import InvalidArgument

MAX_POSITIONS = 2048

# The pre-tokenizer: contractions, words (with one leading non-letter), **single digits**, runs of
# punctuation, runs of newlines (so "\n\n" is one piece whatever follows), other whitespace.
SPLIT_PATTERN = (
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The template's own scaffolding, so role names and tool-call tags get merges of their own.
_SCAFFOLD = (
    "system\nuser\nassistant\ntool\n# Tools\n<tools>\n</tools>\n",
    "<function=NAME><parameter=PARAM>value</parameter></function>\n",
)


@dataclass(frozen=True)
class Preset:
    """One named model shape: the tokenizer's target vocab and a builder of the HF config."""

    vocab_size: int
    build_config: Callable[[int, int, int], Any]  # (vocab_size, pad_id, eos_id) -> PretrainedConfig
    description: str


def _tiny_config(vocab_size: int, pad_id: int, eos_id: int):
    """Qwen3 dense, 2-3M parameters (by vocab): 4 layers, hidden 192, 4 query heads over 2 KV heads (GQA)."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=192, intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=48, max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True, rms_norm_eps=1e-6, pad_token_id=pad_id, bos_token_id=None,
        eos_token_id=eos_id, architectures=["Qwen3ForCausalLM"],
    )


def _tiny_moe_config(vocab_size: int, pad_id: int, eos_id: int):
    """Qwen3-MoE, ~1M parameters: 2 layers, hidden 128, 4 experts with top-2 routing in every layer."""
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(
        vocab_size=vocab_size, hidden_size=128, intermediate_size=512, moe_intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True,
        max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=True, rms_norm_eps=1e-6,
        pad_token_id=pad_id, bos_token_id=None, eos_token_id=eos_id, architectures=["Qwen3MoeForCausalLM"],
    )


def _small_config(vocab_size: int, pad_id: int, eos_id: int):
    """Qwen3 dense, ~29M parameters: 8 layers, hidden 512, 8 query heads over 4 KV heads (GQA), MLP 1792
    (sizes weight transfers and loads at a scale the tiny preset is too small for)."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab_size, hidden_size=512, intermediate_size=1792, num_hidden_layers=8,
        num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True, rms_norm_eps=1e-6, pad_token_id=pad_id, bos_token_id=None,
        eos_token_id=eos_id, architectures=["Qwen3ForCausalLM"],
    )


PRESETS: dict[str, Preset] = {
    "tiny": Preset(2048, _tiny_config, "Qwen3 dense, 4 layers, hidden 192, GQA 4/2"),
    "small": Preset(2048, _small_config, "Qwen3 dense, ~29M parameters: 8 layers, hidden 512, GQA 8/4"),
    "tiny-moe": Preset(2048, _tiny_moe_config, "Qwen3-MoE, 2 layers, hidden 128, 4 experts top-2"),
}


def train_tokenizer(texts: Iterable[str], vocab_size: int):
    """A byte-level BPE tokenizer trained on `texts`, with the chat template and special tokens set.

    Digits always split into single digits; every entry of SPECIAL_TOKENS is one id (the first,
    `<|endoftext|>`, is id 0 and the pad token); `<|im_end|>` is the eos token.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    min_vocab = 256 + len(SPECIAL_TOKENS)
    if vocab_size < min_vocab:
        raise InvalidArgument("vocab_size", f"{vocab_size} is below {min_vocab} (256 bytes + special tokens)")
    texts = [t for t in texts if t]
    if not texts:
        raise InvalidArgument("corpus", "is empty; give at least one non-empty text")
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator([*texts, *_SCAFFOLD], trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token=IM_END, pad_token=PAD_TOKEN,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (IM_END, PAD_TOKEN)],
        model_max_length=MAX_POSITIONS, padding_side="left", clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def default_corpus(seed: int) -> list[str]:
    """The tokenizer corpus when none is given: the synthetic texts of every domain."""
    from services.common.synth import corpus_texts

    return corpus_texts(seed)


def init_model(
    out_dir: Path,
    preset: str = "tiny",
    seed: int = 0,
    corpus: Iterable[str] | None = None,
    vocab_size: int | None = None,
    tokenizer_seed: int = 0,
) -> Path:
    """Write tokenizer + randomly initialised model of `preset` into `out_dir`; return `out_dir`.

    Same (preset, seed, corpus, vocab_size) -> byte-identical weights and tokenizer files. The
    default tokenizer corpus is drawn with `tokenizer_seed`, not the weight seed, so models built
    with different seeds share one tokenizer (teachers and students must).
    """
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    if preset not in PRESETS:
        raise InvalidArgument("preset", f"{preset!r} is not one of {', '.join(PRESETS)}")
    spec = PRESETS[preset]
    out_dir = Path(out_dir)
    texts = list(corpus) if corpus is not None else default_corpus(tokenizer_seed)
    tokenizer = train_tokenizer(texts, vocab_size or spec.vocab_size)
    pad_id, eos_id = tokenizer.pad_token_id, tokenizer.convert_tokens_to_ids(IM_END)

    config = spec.build_config(len(tokenizer), pad_id, eos_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=[eos_id, pad_id], pad_token_id=pad_id, bos_token_id=None,
        do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=256,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir, save_jinja_files=False)
    _portable_tokenizer_class(out_dir / "tokenizer_config.json")
    _write_card(out_dir, preset, seed, model)
    return out_dir


def count_parameters(model) -> int:
    """Distinct trainable parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())


def _portable_tokenizer_class(path: Path) -> None:
    """Name the class every transformers release knows (v5 writes its own `TokenizersBackend`)."""
    config = json.loads(path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def _write_card(out_dir: Path, preset: str, seed: int, model) -> None:
    """cascade_model.json: how this directory was made (read by `cascade init-model`'s summary)."""
    card = {"preset": preset, "seed": seed, "parameters": count_parameters(model),
            "architecture": type(model).__name__, "vocab_size": model.config.vocab_size,
            "layers": model.config.num_hidden_layers}
    (out_dir / "cascade_model.json").write_text(json.dumps(card, indent=2) + "\n")
