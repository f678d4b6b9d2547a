"""TeacherCore: validation naming fields, domains, shared vocabulary, versions, sharing on/off."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from services.common.checksum import sha256_dir
from services.common.errors import ChecksumMismatch, FailedPrecondition, InvalidArgument
from services.teacher.config import TeacherConfig
from services.teacher.core import TeacherCore
from tests.policy.test_core import edited_copy, perturbed_copy

P = [np.array([5, 6, 7], np.int32), np.array([8, 9], np.int32)]
C = [np.array([10, 11], np.int32), np.array([12], np.int32), np.array([13, 14, 15], np.int32)]
IDX = [0, 0, 1]


@pytest.fixture(scope="module")
def core(tiny_model_dir):
    core = TeacherCore(TeacherConfig(max_batch_tokens=64, max_request_tokens=5000))
    core.load_teacher("math", str(tiny_model_dir))
    return core


def arr(*rows):
    return [np.asarray(r, np.int32) for r in rows]


@pytest.mark.parametrize(
    "domain, prompts, completions, index, top_k, temperature, field",
    [
        ("code", P, C, IDX, 0, 1.0, "domain"),
        ("math", P, [], [], 0, 1.0, "completion_ids"),
        ("math", P, C, [0, 0], 0, 1.0, "prompt_index"),
        ("math", P, C, [0, 0, 2], 0, 1.0, "prompt_index[2]"),
        ("math", arr([], [1]), C, [1, 0, 1], 0, 1.0, "prompt_ids[0]"),
        ("math", P, arr([1], [2, 99999], [3]), IDX, 0, 1.0, "completion_ids[1]"),
        ("math", arr([1], [2, -1]), C, IDX, 0, 1.0, "prompt_ids[1]"),
        ("math", P, arr([1], [1] * 2047, [3]), IDX, 0, 1.0, "completion_ids[1]"),
        ("math", P, arr(*[[1] * 1000] * 6), [0] * 6, 0, 1.0, "completion_ids"),
        ("math", P, C, IDX, 65, 1.0, "top_k"),
        ("math", P, C, IDX, -1, 1.0, "top_k"),
        ("math", P, C, IDX, 0, float("nan"), "temperature"),
        ("math", P, C, IDX, 0, 0.0, "temperature"),
        ("math", P, C, IDX, 0, -2.0, "temperature"),
    ],
)
def test_bad_requests_name_the_field(core, domain, prompts, completions, index, top_k, temperature, field):
    with pytest.raises(InvalidArgument) as err:
        core.score(domain, prompts, completions, index, top_k, temperature)
    assert err.value.field == field


def test_scores_match_a_forward_and_count_tokens(core):
    result = core.score("math", P, C, IDX, top_k=3)
    model = core.teacher("math").model.model
    for c, comp in enumerate(C):
        ids = torch.tensor(np.concatenate([P[IDX[c]], comp]).astype(np.int64))[None]
        with torch.no_grad():
            ref = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)[len(P[IDX[c]]) - 1 : -1]
        np.testing.assert_allclose(result.scores[c].logprobs, ref.gather(-1, ids[0, len(P[IDX[c]]) :, None])[:, 0].numpy(), atol=1e-4)
        assert result.scores[c].topk_ids.shape == (3 * len(comp),)
    assert result.weight_version == 0


def test_sharing_on_and_off_agree(tiny_model_dir):
    shared, whole = (TeacherCore(TeacherConfig(share_prompt=s)) for s in (True, False))
    for core in (shared, whole):
        core.load_teacher("if", str(tiny_model_dir))
    a = shared.score("if", P, C, IDX)
    b = whole.score("if", P, C, IDX)
    for x, y in zip(a.scores, b.scores):
        np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-4)


def test_several_domains_versions_and_listing(tiny_model_dir, tmp_path):
    core = TeacherCore(TeacherConfig())
    core.load_teacher("math", str(tiny_model_dir))
    other = perturbed_copy(tiny_model_dir, tmp_path / "if", seed=2)
    core.load_teacher("if", str(other), sha256_dir(other))
    assert [t.domain for t in core.list_teachers()] == ["if", "math"]
    a, b = core.score("math", P, C, IDX), core.score("if", P, C, IDX)
    assert not np.allclose(a.scores[0].logprobs, b.scores[0].logprobs)
    teacher, _ = core.load_teacher("math", str(other))
    assert teacher.version == 1 and core.score("math", P, C, IDX).weight_version == 1
    assert core.info(teacher)["model"] == str(other) and core.info(teacher)["backend"] == "hf"


def test_teacher_with_another_vocabulary_is_refused(tiny_model_dir, tmp_path):
    core = TeacherCore(TeacherConfig())
    core.load_teacher("math", str(tiny_model_dir))
    vocab = core.vocab_size
    other = edited_copy(tiny_model_dir, tmp_path / "big", vocab_size=vocab + 64)
    with pytest.raises(FailedPrecondition, match="share a tokenizer"):
        core.load_teacher("code", str(other))
    assert [t.domain for t in core.list_teachers()] == ["math"]
    fixed = TeacherCore(TeacherConfig(vocab_size=vocab + 1))
    with pytest.raises(FailedPrecondition, match=f"vocab_size {vocab}"):
        fixed.load_teacher("math", str(tiny_model_dir))


def test_load_errors(tiny_model_dir):
    core = TeacherCore(TeacherConfig())
    with pytest.raises(ChecksumMismatch):
        core.load_teacher("math", str(tiny_model_dir), "0" * 64)
    with pytest.raises(InvalidArgument) as err:
        core.load_teacher("math", "/no/such/teacher")
    assert err.value.field == "uri"
    with pytest.raises(InvalidArgument) as err:
        core.load_teacher("", str(tiny_model_dir))
    assert err.value.field == "domain"
    with pytest.raises(InvalidArgument) as err:
        TeacherCore(TeacherConfig(backend="onnx")).load_teacher("math", str(tiny_model_dir))
    assert err.value.field == "backend"


def test_vllm_teacher_without_vllm_is_one_clear_error(tiny_model_dir, monkeypatch):
    """Where vLLM is not installed (it is, here: the lookup is hidden) the message says how to get it."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    with pytest.raises(FailedPrecondition) as err:
        TeacherCore(TeacherConfig(backend="vllm")).load_teacher("math", str(tiny_model_dir))
    assert "make install" in str(err.value) and "\n" not in str(err.value)


def test_scoring_runs_on_the_cores_of_the_pool_up_to_max_threads(tiny_model_dir, tmp_path):
    from services.common.cores import host_cores
    from tests.common.test_cores import watch

    core = TeacherCore(TeacherConfig(cores_dir=tmp_path, max_threads=1))
    core.load_teacher("math", str(tiny_model_dir))
    seen = watch(core.teacher("math").model, "score", tmp_path, host_cores())
    core.score("math", P, C, IDX)
    assert seen == [(1, host_cores() - 1)]  # the cap: one core taken, the rest left to the other services
