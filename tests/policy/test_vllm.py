"""The `vllm` backend on a real vLLM engine (its CPU build here, its CUDA build on a GPU).

One engine serves the whole module (start-up is the slow part). Every log-prob is checked against
a transformers forward of the same tokens, processed as pi_inf is (services/policy/sampling.py);
the weight swap is checked against a forward of the new weights, tied LM head included.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from services.common.checksum import sha256_dir
from services.common.errors import ChecksumMismatch, FailedPrecondition, InvalidArgument
from services.common.modelio import load_causal_lm
from services.policy.backends import BACKENDS
from services.policy.backends.base import SamplingConfig
from services.policy.config import PolicyConfig
from services.policy.core import Chat, PolicyCore
from services.policy.sampling import compute_filtered_logits
from tests.needs import vllm_or_skip
from tests.policy.test_core import perturbed_copy

vllm_or_skip()
pytestmark = pytest.mark.slow

TOL = 1e-4
ENGINE = {"backend": "vllm", "dtype": "float32", "max_model_len": 256, "enforce_eager": True,
          "kv_cache_memory_bytes": 128 * 2**20, "max_request_samples": 256, "max_new_tokens": 64}


def vllm_config(model: Path, **changes) -> PolicyConfig:
    return PolicyConfig(model=str(model), **{**ENGINE, **changes})


@pytest.fixture(scope="module")
def core(tiny_model_dir):
    core = PolicyCore.build(vllm_config(tiny_model_dir))
    yield core
    core.close()  # vLLM's engine-core process: left running, multiprocessing's atexit join holds pytest


@pytest.fixture(scope="module")
def new_weights(tiny_model_dir, tmp_path_factory):
    return perturbed_copy(tiny_model_dir, tmp_path_factory.mktemp("vllm-w") / "v1", seed=1)


def reference_logprobs(model_dir: Path, prompt: list[int], tokens: np.ndarray, params: SamplingConfig) -> np.ndarray:
    """log pi_inf of `tokens` after `prompt` from a transformers forward (teacher-forced), fp32."""
    model = load_causal_lm(model_dir)
    ids = torch.tensor([prompt + tokens.tolist()])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    if params.temperature == 0:
        logp = torch.log_softmax(logits.float(), -1)
    else:
        logp = torch.log_softmax(compute_filtered_logits(logits, params.temperature, params.top_k, params.top_p), -1)
    return logp.gather(-1, torch.as_tensor(tokens, dtype=torch.long)[:, None])[:, 0].numpy()


def max_diff(core, model_dir: Path, result, params: SamplingConfig) -> float:
    worst = 0.0
    n = len(result.samples) // len(result.prompt_token_ids)
    for k, sample in enumerate(result.samples):
        ref = reference_logprobs(model_dir, result.prompt_token_ids[k // n], sample.token_ids, params)
        worst = max(worst, float(np.abs(ref - sample.logprobs).max()))
    return worst


PROMPTS = [[5, 6, 7, 8, 9, 10], [40, 41, 42], [100, 200, 300, 400]]


def test_registered_and_needs_no_gpu():
    assert "vllm" in BACKENDS


@pytest.mark.parametrize("params", [
    SamplingConfig(max_tokens=12, temperature=1.0, seed=3),
    SamplingConfig(max_tokens=12, temperature=0.7, top_k=50, top_p=0.9, seed=4),
    SamplingConfig(max_tokens=8, temperature=0.0),
], ids=["t1", "t0.7-k50-p0.9", "greedy"])
def test_sampled_logprobs_are_pi_inf_of_a_transformers_forward(core, tiny_model_dir, params):
    result = core.generate(PROMPTS, 2, params)
    assert len(result.samples) == 6 and core.backend.spec.device in ("cpu", "cuda")
    assert all(len(s.token_ids) == len(s.logprobs) > 0 for s in result.samples)
    assert max_diff(core, tiny_model_dir, result, params) <= TOL


@pytest.mark.parametrize("temperature, top_k, top_p", [(0.7, 0, 1.0), (0.7, 20, 0.9)])
def test_mopd_first_step_ratio_is_one_on_vllm_samples(core, tiny_model_dir, tmp_path, temperature, top_k, top_p):
    """Issue 20's check on the vllm path: vLLM samples at T = 0.7 (processed log-probs), the trainer
    trains MOPD on them with the same sampling sent, and on the first step (same weights, lr 0)
    every token's r_t = pi_train / pi_inf is 1 to 1e-5."""
    from services.common.pb import trainer_pb2
    from services.trainer.config import TrainerConfig
    from services.trainer.core import TrainerCore
    from services.trainer.distributed import Coordinator
    from tests.trainer.test_sampling_match import mopd_batch

    sampling = SamplingConfig(max_tokens=12, temperature=temperature, top_k=top_k, top_p=top_p, seed=1)
    batch = mopd_batch(core.generate(PROMPTS, 2, sampling))
    trainer = Coordinator(TrainerCore(TrainerConfig(model=str(tiny_model_dir), store=tmp_path / "store",
                                                    device="cpu", precision="fp32")))
    sent = trainer_pb2.LossParams(temperature=temperature, top_k=top_k, top_p=top_p)
    got = trainer.train_step("vllm-match", "mopd", batch, sent, "", 0.0).metrics
    assert got["mismatch_max"] < 1e-5, got
    assert got["window_dropped_fraction"] == 0.0 and got["truncated_fraction"] == 0.0


def test_n_samples_per_prompt_and_seeds(core):
    params = SamplingConfig(max_tokens=16, temperature=1.0, seed=11)
    first = core.generate(PROMPTS, 4, params)
    again = core.generate(PROMPTS[:1], 4, params)
    assert len(first.samples) == 12
    # same seed: the first prompt's 4 samples do not depend on the rest of the request
    for a, b in zip(first.samples[:4], again.samples):
        assert a.token_ids.tolist() == b.token_ids.tolist()
    assert len({tuple(s.token_ids.tolist()) for s in first.samples[:4]}) > 1, "the n samples of a prompt differ"
    other = core.generate(PROMPTS[:1], 4, SamplingConfig(max_tokens=16, temperature=1.0, seed=12))
    assert [s.token_ids.tolist() for s in other.samples] != [s.token_ids.tolist() for s in again.samples]


def test_stop_strings_end_the_sample_at_the_token_that_completes_them(core):
    free = core.generate(PROMPTS[:1], 8, SamplingConfig(max_tokens=24, temperature=1.0, seed=5))
    stop = next(s.text[i : i + 2] for s in free.samples for i in range(2, len(s.text) - 2)
                if s.text[i : i + 2].isascii() and s.text[i : i + 2].isalpha())
    result = core.generate(PROMPTS[:1], 8, SamplingConfig(max_tokens=24, temperature=1.0, seed=5, stop=(stop,)))
    stopped = [s for s in result.samples if s.finish_reason == "stop" and stop in s.text]
    assert stopped, (stop, [s.text for s in result.samples])
    tok = core.backend.tokenizer
    for s in stopped:
        assert stop not in tok.decode(s.token_ids[:-1].tolist(), skip_special_tokens=False)


@pytest.mark.parametrize("thinking, opening", [(True, "<think>"), (False, "</think>")])
def test_chat_prompts_follow_the_thinking_flag(core, tiny_model_dir, thinking, opening):
    params = SamplingConfig(max_tokens=6, temperature=1.0, seed=1)
    result = core.generate([Chat([{"role": "user", "content": "What is 2 + 2?"}])], 2, params, thinking=thinking)
    prompt = core.backend.tokenizer.decode(result.prompt_token_ids[0], skip_special_tokens=False)
    assert prompt.rstrip().endswith(opening)
    assert max_diff(core, tiny_model_dir, result, params) <= TOL


def test_a_request_beyond_max_model_len_names_the_field_and_the_engine_keeps_serving(core):
    with pytest.raises(InvalidArgument) as err:
        core.generate([[5] * 250], 1, SamplingConfig(max_tokens=10))
    assert err.value.field == "sampling.max_tokens" and "256" in str(err.value)
    with pytest.raises(InvalidArgument) as err:
        core.generate([[5] * 256], 1, SamplingConfig(max_tokens=1))
    assert err.value.field == "prompts[0]"
    assert len(core.generate([[5] * 200], 1, SamplingConfig(max_tokens=4)).samples) == 1


def test_bad_weights_are_refused_before_anything_changes(core, tiny_model_dir, new_weights, tmp_path):
    params = SamplingConfig(max_tokens=10, temperature=1.0, seed=2)
    served = Path(core.backend.spec.model)
    with pytest.raises(ChecksumMismatch):
        core.load_weights(1, str(new_weights), "0" * 64)
    # same config, a tensor missing: refused from the headers, the engine untouched
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "broken"
    shutil.copytree(new_weights, broken)
    tensors = load_file(str(broken / "model.safetensors"))
    tensors.pop(sorted(k for k in tensors if "mlp" in k)[0])
    save_file(tensors, str(broken / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(InvalidArgument) as err:
        core.load_weights(1, str(broken), sha256_dir(broken))
    assert err.value.field == "weights.uri" and "missing" in str(err.value)
    assert core.weight_version == 0 and Path(core.backend.spec.model) == served
    assert max_diff(core, served, core.generate(PROMPTS, 1, params), params) <= TOL


def test_a_failed_reload_puts_the_served_weights_back_and_says_so(core, tmp_path):
    """A checkpoint whose headers match but whose data cannot be read fails inside the engine."""
    served = Path(core.backend.spec.model)
    bad = tmp_path / "truncated"
    shutil.copytree(served, bad)
    blob = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(blob[: len(blob) // 2])
    with pytest.raises(FailedPrecondition) as err:
        core.backend.swap_weights(bad)
    assert "still serves" in str(err.value) and "\n" not in str(err.value)
    params = SamplingConfig(max_tokens=10, temperature=1.0, seed=2)
    assert max_diff(core, served, core.generate(PROMPTS, 1, params), params) <= TOL


def test_load_weights_swaps_in_place_and_matches_the_new_weights(core, tiny_model_dir, new_weights):
    params = SamplingConfig(max_tokens=16, temperature=1.0, seed=7)
    before = core.generate(PROMPTS, 2, params)
    seconds = core.load_weights(1, str(new_weights), sha256_dir(new_weights))
    assert core.weight_version == 1 and seconds < 30
    after = core.generate(PROMPTS, 2, params)  # same prompts: a stale prefix cache would show here
    assert after.weight_version == 1
    assert max_diff(core, new_weights, after, params) <= TOL
    assert max_diff(core, tiny_model_dir, before, params) <= TOL
    # and back: the tied embedding / LM head follow every swap
    core.load_weights(2, str(tiny_model_dir), sha256_dir(tiny_model_dir))
    assert max_diff(core, tiny_model_dir, core.generate(PROMPTS, 2, params), params) <= TOL
    assert json.loads((new_weights / "config.json").read_text())["tie_word_embeddings"] is True


# --- an engine that cannot start: one line naming the setting (checked before vLLM starts) ---

def test_memory_fraction_the_machine_cannot_give_names_the_setting(tiny_model_dir):
    with pytest.raises(FailedPrecondition) as err:
        PolicyCore.build(vllm_config(tiny_model_dir, kv_cache_memory_bytes=None, gpu_memory_utilization=1.0))
    assert "CASCADE_POLICY_GPU_MEMORY_UTILIZATION=1.0" in str(err.value) and "\n" not in str(err.value)


def test_an_architecture_vllm_lacks_names_the_backend_setting(tiny_model_dir, tmp_path):
    odd = tmp_path / "odd"
    shutil.copytree(tiny_model_dir, odd)
    cfg = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**cfg, "architectures": ["CascadeToyForCausalLM"]}))
    with pytest.raises(FailedPrecondition) as err:
        PolicyCore.build(vllm_config(odd))
    assert "CascadeToyForCausalLM" in str(err.value) and "CASCADE_POLICY_BACKEND" in str(err.value)


def test_max_model_len_beyond_the_model_names_the_field(tiny_model_dir):
    with pytest.raises(InvalidArgument) as err:
        PolicyCore.build(vllm_config(tiny_model_dir, max_model_len=10**5))
    assert err.value.field == "max_model_len"
