"""PolicyCore: request validation naming fields, chat rendering, atomic checksummed weight swaps."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from services.common.checksum import sha256_dir
from services.common.errors import ChecksumMismatch, InvalidArgument
from services.policy.backends import build_backend
from services.policy.backends.base import SamplingConfig
from services.policy.config import PolicyConfig
from services.policy.core import Chat, PolicyCore

OK = SamplingConfig(max_tokens=4, seed=0)


def perturbed_copy(src: Path, dst: Path, seed: int) -> Path:
    """A copy of an HF directory with every weight moved by small seeded noise."""
    from transformers import AutoModelForCausalLM

    shutil.copytree(src, dst)
    model = AutoModelForCausalLM.from_pretrained(str(src), local_files_only=True)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.5)
    model.save_pretrained(dst, safe_serialization=True)
    return dst


def edited_copy(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.fixture(scope="module")
def core(tiny_model_dir):
    return PolicyCore.build(PolicyConfig(model=str(tiny_model_dir), max_request_samples=64, max_new_tokens=64))


@pytest.fixture(scope="module")
def new_weights(tiny_model_dir, tmp_path_factory):
    return perturbed_copy(tiny_model_dir, tmp_path_factory.mktemp("w") / "v1", seed=1)


@pytest.mark.parametrize(
    "prompts, n, params, field",
    [
        ([], 1, OK, "prompts"),
        ([[1, 2]], 0, OK, "n"),
        ([[1, 2]] * 10, 7, OK, "n"),
        ([[]], 1, OK, "prompts[0].token_ids"),
        ([[1, 2], [1, 10**6]], 1, OK, "prompts[1].token_ids"),
        ([[1, -3]], 1, OK, "prompts[0].token_ids"),
        ([Chat([])], 1, OK, "prompts[0].conversation.messages"),
        ([Chat([{"role": "robot", "content": "hi"}])], 1, OK, "prompts[0].conversation.messages[0].role"),
        ([[1]], 1, SamplingConfig(max_tokens=4, temperature=float("nan")), "sampling.temperature"),
        ([[1]], 1, SamplingConfig(max_tokens=4, temperature=-1.0), "sampling.temperature"),
        ([[1]], 1, SamplingConfig(max_tokens=4, top_p=0.0), "sampling.top_p"),
        ([[1]], 1, SamplingConfig(max_tokens=4, top_p=float("nan")), "sampling.top_p"),
        ([[1]], 1, SamplingConfig(max_tokens=4, top_k=-2), "sampling.top_k"),
        ([[1]], 1, SamplingConfig(max_tokens=0), "sampling.max_tokens"),
        ([[1]], 1, SamplingConfig(max_tokens=65), "sampling.max_tokens"),
        ([[1]], 1, SamplingConfig(max_tokens=4, stop=("ok", "")), "sampling.stop[1]"),
        ([[1] * 2000], 1, SamplingConfig(max_tokens=60), "sampling.max_tokens"),
        ([[1] * 2048], 1, SamplingConfig(max_tokens=1), "prompts[0]"),
    ],
)
def test_bad_requests_name_the_field(core, prompts, n, params, field):
    with pytest.raises(InvalidArgument) as err:
        core.generate(prompts, n, params)
    assert err.value.field == field


def test_chat_prompt_is_rendered_with_the_template_and_thinking_flag(core):
    chat = Chat([{"role": "user", "content": "Add 2 and 3."}])
    tok = core.backend.tokenizer
    on = core.generate([chat], 1, OK, thinking=True).prompt_token_ids[0]
    off = core.generate([chat], 1, OK, thinking=False).prompt_token_ids[0]
    assert tok.decode(on).endswith("<|im_start|>assistant\n<think>\n")
    assert tok.decode(off).endswith("<think>\n\n</think>\n\n")
    expected = tok.apply_chat_template(chat.messages, add_generation_prompt=True, enable_thinking=True, tokenize=False)
    assert on == tok.encode(expected, add_special_tokens=False)


def test_generate_returns_prompt_major_samples_and_the_version(core):
    result = core.generate([[5, 6, 7], np.array([8, 9], dtype=np.int32)], 3, OK)
    assert result.prompt_token_ids == [[5, 6, 7], [8, 9]]
    assert len(result.samples) == 6 and result.weight_version == core.weight_version
    assert all(1 <= len(s.token_ids) <= 4 for s in result.samples)


def test_load_weights_swaps_and_changes_the_samples(tiny_model_dir, new_weights):
    core = PolicyCore.build(PolicyConfig(model=str(tiny_model_dir)))
    params = SamplingConfig(max_tokens=6, temperature=0.0)
    before = core.generate([[5, 6, 7]], 1, params).samples[0]
    seconds = core.load_weights(7, str(new_weights), sha256_dir(new_weights))
    after = core.generate([[5, 6, 7]], 1, params)
    assert seconds > 0 and after.weight_version == 7 and core.info()["weight_version"] == 7
    assert core.info()["model"] == str(new_weights)
    assert after.samples[0].logprobs.tolist() != before.logprobs.tolist()


def test_checksum_mismatch_keeps_the_old_weights(tiny_model_dir, new_weights):
    core = PolicyCore.build(PolicyConfig(model=str(tiny_model_dir)))
    model = core.backend.model
    with pytest.raises(ChecksumMismatch):
        core.load_weights(1, str(new_weights), "0" * 64)
    assert core.backend.model is model and core.weight_version == 0


def live_params(core) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in core.backend.model.named_parameters()}


def test_loaded_weights_equal_the_published_ones_and_stay_tied(tiny_model_dir, new_weights):
    from services.common.modelio import load_causal_lm

    core = PolicyCore.build(PolicyConfig(model=str(tiny_model_dir)))
    core.load_weights(2, str(new_weights), sha256_dir(new_weights))
    expected, got = load_causal_lm(new_weights), dict(core.backend.model.named_parameters())
    assert all(torch.equal(got[k], p) for k, p in expected.named_parameters())
    model = core.backend.model
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    fresh = PolicyCore.build(PolicyConfig(model=str(new_weights)))
    params = SamplingConfig(max_tokens=6, temperature=0.0)
    a, b = core.generate([[5, 6, 7]], 1, params).samples[0], fresh.generate([[5, 6, 7]], 1, params).samples[0]
    assert a.token_ids.tolist() == b.token_ids.tolist()
    # equal weights; the last bits may differ: kernels sum in an order that depends on memory alignment
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_a_corrupted_weight_file_is_refused_and_the_old_weights_stay(tiny_model_dir, new_weights, tmp_path):
    bad = Path(shutil.copytree(new_weights, tmp_path / "bad"))
    sha = sha256_dir(bad)
    blob = bytearray((bad / "model.safetensors").read_bytes())
    blob[-5] ^= 0x01
    (bad / "model.safetensors").write_bytes(bytes(blob))
    core = PolicyCore.build(PolicyConfig(model=str(tiny_model_dir)))
    before = live_params(core)
    with pytest.raises(ChecksumMismatch):
        core.load_weights(1, str(bad), sha)
    after = live_params(core)
    assert core.weight_version == 0 and all(torch.equal(before[k], after[k]) for k in before)


def test_loads_alternate_between_two_buffers_and_never_touch_the_live_weights(tiny_model_dir, new_weights, tmp_path):
    from services.common.modelio import load_causal_lm

    bad = Path(shutil.copytree(new_weights, tmp_path / "bad"))
    bad_sha = sha256_dir(bad)
    (bad / "model.safetensors").write_bytes(bytes(len((bad / "model.safetensors").read_bytes())))  # same size, zeros
    core = PolicyCore.build(PolicyConfig(model=str(tiny_model_dir)))
    plan = [(1, new_weights), (2, tiny_model_dir), (3, new_weights), (4, tiny_model_dir)]
    for version, directory in plan:
        spare = core.backend.spare_buffers().get("model.safetensors")
        core.load_weights(version, str(directory), sha256_dir(directory))
        embed = core.backend.model.model.embed_tokens.weight
        if version > 2:  # from the third load on, the weights are read into the buffer the weights before last used
            assert spare is not None and spare.ctypes.data <= embed.data_ptr() < spare.ctypes.data + spare.nbytes
        with pytest.raises(ChecksumMismatch):
            core.load_weights(9, str(bad), bad_sha)  # overwrites the spare buffer, never the live one
        expected = dict(load_causal_lm(directory).named_parameters())
        assert core.weight_version == version
        assert all(torch.equal(p, expected[k]) for k, p in core.backend.model.named_parameters())


@pytest.mark.parametrize("edit, word", [("drop", "missing"), ("rename", "not part"), ("reshape", "shape")])
def test_tensors_that_do_not_fit_the_model_are_refused(core, tiny_model_dir, tmp_path, edit, word):
    from safetensors.torch import load_file, save_file

    other = Path(shutil.copytree(tiny_model_dir, tmp_path / "other"))
    tensors = load_file(other / "model.safetensors")
    norm = tensors.pop("model.norm.weight")
    if edit == "rename":
        tensors["model.norm.scale"] = norm
    elif edit == "reshape":
        tensors["model.norm.weight"] = torch.ones(norm.numel() + 1)
    save_file(tensors, other / "model.safetensors", metadata={"format": "pt"})
    before = live_params(core)
    with pytest.raises(InvalidArgument) as err:
        core.load_weights(1, str(other), sha256_dir(other))
    assert err.value.field == "weights.uri" and word in err.value.message
    after = live_params(core)
    assert core.weight_version == 0 and all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize(
    "changes, word",
    [({"architectures": ["LlamaForCausalLM"]}, "architecture"), ({"vocab_size": 4096}, "vocab_size"), ({"num_hidden_layers": 2}, "num_hidden_layers")],
)
def test_mismatched_checkpoint_is_refused(core, tiny_model_dir, tmp_path, changes, word):
    other = edited_copy(tiny_model_dir, tmp_path / "other", **changes)
    with pytest.raises(InvalidArgument) as err:
        core.load_weights(1, str(other), sha256_dir(other))
    assert err.value.field == "weights.uri" and word in err.value.message
    assert core.weight_version == 0


@pytest.mark.parametrize("uri, sha, field", [("", "ab", "weights.uri"), ("/no/such/dir", "ab", "weights.uri"), ("http://x/y", "ab", "weights.uri")])
def test_bad_weight_refs_name_the_field(core, uri, sha, field):
    with pytest.raises(InvalidArgument) as err:
        core.load_weights(1, uri, sha)
    assert err.value.field == field


def test_empty_checksum_is_refused(core, new_weights):
    with pytest.raises(InvalidArgument) as err:
        core.load_weights(1, str(new_weights), "")
    assert err.value.field == "weights.sha256"


def test_swap_waits_for_the_running_batch(tiny_model_dir, new_weights):
    core = PolicyCore.build(PolicyConfig(model=str(tiny_model_dir)))
    sha = sha256_dir(new_weights)
    core._generate_lock.acquire()  # a batch is being generated
    done = threading.Event()
    loader = threading.Thread(target=lambda: (core.load_weights(3, str(new_weights), sha), done.set()))
    loader.start()
    time.sleep(3.0)  # ample time to verify and stage the new weights
    assert not done.is_set() and core.weight_version == 0
    core._generate_lock.release()
    loader.join(30)
    assert done.is_set() and core.weight_version == 3


def test_unknown_backend_and_missing_model_are_clear(tiny_model_dir):
    with pytest.raises(InvalidArgument) as err:
        build_backend(PolicyConfig(model=str(tiny_model_dir), backend="tgi"))
    assert err.value.field == "backend"
    with pytest.raises(InvalidArgument) as err:
        PolicyCore.build(PolicyConfig(model=""))
    assert err.value.field == "model"


def test_generate_runs_on_the_cores_of_the_pool(tiny_model_dir, tmp_path):
    from services.common.cores import host_cores
    from tests.common.test_cores import watch

    core = PolicyCore.build(PolicyConfig(model=str(tiny_model_dir), cores_dir=tmp_path))
    seen = watch(core.backend, "generate", tmp_path, host_cores())
    before = torch.get_num_threads()
    core.generate([[5, 6, 7]], 2, OK)
    assert seen == [(host_cores(), 0)] and torch.get_num_threads() == before  # every core leased, then given back
