"""Weight export: hashed once while written (the digest equals sha256_dir of what lands on disk),
and the same files and tensors that save_pretrained + the tokenizer's save_pretrained write."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from services.common.checksum import sha256_dir, weight_files
from services.common.modelio import load_causal_lm, load_tokenizer
from services.trainer.export import WEIGHTS, export_tensors, render_side_files, write_version


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    return load_tokenizer(tiny_model_dir)


def build(tiny_model_dir, kind: str):
    from transformers import AutoModelForSequenceClassification

    if kind == "causal_lm":
        return load_causal_lm(tiny_model_dir)
    return AutoModelForSequenceClassification.from_pretrained(str(tiny_model_dir), num_labels=1, local_files_only=True)


def export(module, tokenizer, out):
    out.mkdir()
    return write_version(out, render_side_files(module, tokenizer), export_tensors(module))


def names(directory) -> list[str]:
    return [p.relative_to(directory).as_posix() for p in weight_files(directory)]


def test_digest_hashed_while_writing_equals_sha256_dir_of_the_files(tiny_model_dir, tokenizer, tmp_path):
    digest = export(load_causal_lm(tiny_model_dir), tokenizer, tmp_path / "v")
    assert digest == sha256_dir(tmp_path / "v")


@pytest.mark.parametrize("kind", ["causal_lm", "sequence_classifier"])
def test_version_holds_what_save_pretrained_writes(tiny_model_dir, tokenizer, tmp_path, kind):
    module = build(tiny_model_dir, kind)
    with torch.no_grad():
        next(module.parameters()).add_(0.25)  # not the weights on disk
    export(module, tokenizer, tmp_path / "ours")
    module.save_pretrained(tmp_path / "ref")
    tokenizer.save_pretrained(tmp_path / "ref")
    assert names(tmp_path / "ours") == names(tmp_path / "ref")
    for name in names(tmp_path / "ref"):
        if name != WEIGHTS:
            assert (tmp_path / "ours" / name).read_bytes() == (tmp_path / "ref" / name).read_bytes(), name
    ours, ref = load_file(tmp_path / "ours" / WEIGHTS), load_file(tmp_path / "ref" / WEIGHTS)
    assert ours.keys() == ref.keys()
    assert all(ours[k].dtype == ref[k].dtype and torch.equal(ours[k], ref[k]) for k in ref)
    with safe_open(tmp_path / "ours" / WEIGHTS, framework="pt") as f:
        assert f.metadata() == {"format": "pt"}


def test_from_pretrained_loads_the_version_with_the_head_tied(tiny_model_dir, tokenizer, tmp_path):
    module = load_causal_lm(tiny_model_dir)
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(1.5)
    export(module, tokenizer, tmp_path / "v")
    assert "lm_head.weight" not in load_file(tmp_path / "v" / WEIGHTS)  # tied: stored once
    again = load_causal_lm(tmp_path / "v")
    assert again.lm_head.weight.data_ptr() == again.model.embed_tokens.weight.data_ptr()
    expected = dict(module.named_parameters())
    assert all(torch.equal(p, expected[k]) for k, p in again.named_parameters())


def test_mixed_dtypes_stay_aligned_and_round_trip(tmp_path):
    tensors = {
        "flag": torch.tensor(True), "bytes": torch.arange(3, dtype=torch.int8), "half": torch.randn(3).to(torch.bfloat16),
        "float": torch.randn(2, 5), "long": torch.arange(4), "empty": torch.zeros(0, 4), "transposed": torch.randn(4, 3).t(),
    }
    digest = write_version(tmp_path, {"config.json": b"{}", "sub/extra.txt": b"x"}, tensors)
    assert digest == sha256_dir(tmp_path)
    loaded = load_file(tmp_path / WEIGHTS)
    assert loaded.keys() == tensors.keys()
    assert all(loaded[k].dtype == t.dtype and torch.equal(loaded[k], t) for k, t in tensors.items())
    blob = (tmp_path / WEIGHTS).read_bytes()
    (length,) = struct.unpack("<Q", blob[:8])
    assert (8 + length) % 8 == 0
    header = json.loads(blob[8 : 8 + length])
    for name, t in tensors.items():
        assert header[name]["data_offsets"][0] % t.element_size() == 0, name


def test_an_unsupported_dtype_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="'z'"):
        write_version(tmp_path, {}, {"z": torch.zeros(2, dtype=torch.complex64)})
    with pytest.raises(ValueError, match=WEIGHTS):
        write_version(tmp_path, {WEIGHTS: b""}, {})
