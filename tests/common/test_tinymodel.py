"""The tiny model builder: files, shapes, tokenizer, determinism, the MoE preset and generation stops."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessor, LogitsProcessorList

from services.common.chat_template import CHAT_TEMPLATE, IM_END, PAD_TOKEN, SPECIAL_TOKENS
from services.common.errors import InvalidArgument
from services.common.tinymodel import PRESETS, init_model, train_tokenizer

# A corpus with enough distinct words to fill a few hundred merges.
_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "to", "sa", "vi", "de", "po", "fu", "ze"]
WIDE_CORPUS = [
    " ".join(_SYLLABLES[(i * 7 + j) % 12] + _SYLLABLES[(i + j * 5) % 12] + _SYLLABLES[(i * j) % 12] for j in range(12))
    + f" {i * 37} + {i} = {i * 38}."
    for i in range(400)
]


def _load(directory: Path):
    tok = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True)
    return tok, model.eval()


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return _load(tiny_model_dir)


def test_directory_holds_hf_files_with_template_in_tokenizer_config(tiny_model_dir):
    for name in ("config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json"):
        assert (tiny_model_dir / name).is_file(), name
    tok_cfg = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert tok_cfg["chat_template"] == CHAT_TEMPLATE
    assert tok_cfg["eos_token"] == IM_END and tok_cfg["pad_token"] == PAD_TOKEN
    assert tok_cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert json.loads((tiny_model_dir / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]


def test_loads_back_with_auto_classes(tiny):
    tok, model = tiny
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert tok.chat_template == CHAT_TEMPLATE
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads) == (4, 4, 2)
    assert cfg.tie_word_embeddings and cfg.max_position_embeddings == 2048
    assert model.get_input_embeddings().weight.data_ptr() == model.get_output_embeddings().weight.data_ptr()


def test_parameter_count_in_expected_range(tiny):
    _, model = tiny
    assert 2_000_000 <= sum(p.numel() for p in model.parameters()) <= 5_000_000


def test_forward_pass_gives_batch_time_vocab_logits(tiny):
    tok, model = tiny
    ids = torch.tensor([tok.encode("What is 12 + 7?")[:5], tok.encode("Hello there, friend 42")[:5]])
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    assert logits.shape == (2, 5, model.config.vocab_size)
    assert torch.isfinite(logits).all()


def test_vocab_size_matches_tokenizer_and_embeddings(tiny):
    tok, model = tiny
    vocab = len(tok)
    assert vocab == model.config.vocab_size == model.get_input_embeddings().weight.shape[0]
    assert 256 + len(SPECIAL_TOKENS) < vocab <= PRESETS["tiny"].vocab_size


def test_requested_vocab_size_is_reached_on_a_wide_corpus():
    tok = train_tokenizer(WIDE_CORPUS, vocab_size=400)
    assert len(tok) == 400


def test_every_special_token_is_one_distinct_id(tiny):
    tok, _ = tiny
    ids = [tok.encode(t, add_special_tokens=False) for t in SPECIAL_TOKENS]
    assert all(len(i) == 1 for i in ids), ids
    assert len({i[0] for i in ids}) == len(SPECIAL_TOKENS)
    assert tok.pad_token_id == ids[0][0] == 0
    assert tok.eos_token_id == tok.convert_tokens_to_ids(IM_END)
    text = "<|im_start|>user\nhi<|im_end|>\n<think>\n</think><tool_call></tool_call>"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_digits_tokenize_one_by_one(tiny):
    tok, _ = tiny
    pieces = [tok.decode([i]) for i in tok.encode("x=90210", add_special_tokens=False)]
    assert pieces[-5:] == ["9", "0", "2", "1", "0"]


def test_text_round_trips_through_the_byte_level_tokenizer(tiny):
    tok, _ = tiny
    text = "Ünïcödé — 数学 🙂\n\n  indented\tcode(x) {return x*2;}"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def test_same_seed_gives_same_bytes_and_other_seed_other_weights(tmp_path, tiny_model_dir):
    again = init_model(tmp_path / "again", preset="tiny", seed=0)
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "config.json"):
        assert (again / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name
    other = init_model(tmp_path / "other", preset="tiny", seed=1)
    assert (other / "model.safetensors").read_bytes() != (again / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (again / "tokenizer.json").read_bytes(), (
        "the weight seed must not change the default tokenizer: teachers and students share it"
    )


def test_tiny_moe_is_a_routed_mixture_of_experts(tmp_path):
    directory = init_model(tmp_path / "moe", preset="tiny-moe", seed=0, corpus=WIDE_CORPUS, vocab_size=400)
    tok, model = _load(directory)
    cfg = model.config
    assert type(model).__name__ == "Qwen3MoeForCausalLM"
    assert (cfg.num_experts, cfg.num_experts_per_tok, len(tok)) == (4, 2, 400)
    assert any("experts" in name for name, _ in model.named_parameters())
    ids = torch.tensor([tok.encode("ka lo mi 12 + 3")])
    with torch.no_grad():
        out = model(input_ids=ids, output_router_logits=True)
    assert out.logits.shape == (1, ids.shape[1], 400)
    assert len(out.router_logits) == cfg.num_hidden_layers
    assert out.router_logits[0].shape[-1] == 4


def test_unknown_preset_and_tiny_vocab_name_the_field(tmp_path):
    with pytest.raises(InvalidArgument) as err:
        init_model(tmp_path / "x", preset="huge")
    assert err.value.field == "preset"
    with pytest.raises(InvalidArgument) as err:
        train_tokenizer(WIDE_CORPUS, vocab_size=100)
    assert err.value.field == "vocab_size"
    with pytest.raises(InvalidArgument) as err:
        train_tokenizer(["", ""], vocab_size=400)
    assert err.value.field == "corpus"


class _ForceAfter(LogitsProcessor):
    """Test helper: from the `after`-th new token on, only `token_id` can be chosen."""

    def __init__(self, prompt_len: int, after: int, token_id: int):
        self.prompt_len, self.after, self.token_id = prompt_len, after, token_id

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] - self.prompt_len >= self.after:
            forced = torch.full_like(scores, float("-inf"))
            forced[:, self.token_id] = 0.0
            return forced
        return scores.index_fill(1, torch.tensor([self.token_id, 0]), float("-inf"))


def test_generate_stops_at_im_end(tiny):
    tok, model = tiny
    im_end = tok.convert_tokens_to_ids(IM_END)
    assert im_end in model.generation_config.eos_token_id
    prompt = tok.apply_chat_template([{"role": "user", "content": "Say hi."}], add_generation_prompt=True,
                                     tokenize=False)
    ids = torch.tensor([tok.encode(prompt, add_special_tokens=False)])
    force = LogitsProcessorList([_ForceAfter(ids.shape[1], after=3, token_id=im_end)])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=20, do_sample=False,
                             logits_processor=force)
    new = out[0, ids.shape[1]:].tolist()
    assert len(new) == 4 and new[-1] == im_end and im_end not in new[:-1]


# --- `cascade init-model` (services/cli/model.py), a thin layer over init_model --------------------


def _cli(args: list[str]):
    import typer
    from typer.testing import CliRunner

    from services.cli.model import init_model as command

    app = typer.Typer()
    app.command("init-model")(command)
    app.command("other")(lambda: None)  # two commands, so typer keeps the sub-command name
    return CliRunner().invoke(app, ["init-model", *args])


def test_cli_builds_prints_a_summary_and_refuses_a_non_empty_dir(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"text": t}) for t in WIDE_CORPUS[:200]) + "\n")
    out = tmp_path / "model"
    args = ["--preset", "tiny", "--out", str(out), "--corpus", str(corpus), "--vocab-size", "300", "--seed", "3"]
    result = _cli(args)
    assert result.exit_code == 0, result.output
    assert "Qwen3ForCausalLM" in result.output and "vocab_size" in result.output
    card = json.loads((out / "cascade_model.json").read_text())
    assert (card["vocab_size"], card["layers"], card["seed"]) == (300, 4, 3)
    assert f"{card['parameters']:,}" in result.output
    assert len(AutoTokenizer.from_pretrained(str(out), local_files_only=True)) == 300

    refused = _cli(args)
    assert isinstance(refused.exception, FileExistsError) and "--force" in str(refused.exception)
    assert _cli([*args, "--force"]).exit_code == 0


def test_cli_bad_corpus_and_preset_name_the_field(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "fine"}\n{"text": oops}\n')
    result = _cli(["--out", str(tmp_path / "m"), "--corpus", str(corpus)])
    assert isinstance(result.exception, InvalidArgument) and result.exception.field == "corpus line 2"
    result = _cli(["--out", str(tmp_path / "m"), "--preset", "giant"])
    assert isinstance(result.exception, InvalidArgument) and result.exception.field == "--preset"
    assert not (tmp_path / "m").exists()
