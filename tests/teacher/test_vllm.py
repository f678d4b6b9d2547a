"""The `vllm` teacher on a real vLLM engine (its CPU build here): prompt log-probs equal the `hf`
teacher's, groups share their prompt's KV blocks, a domain's checkpoint swaps into the running engine."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.errors import FailedPrecondition, InvalidArgument
from services.teacher.config import TeacherConfig
from services.teacher.core import TeacherCore
from tests.needs import vllm_or_skip
from tests.policy.test_core import perturbed_copy

vllm_or_skip()
pytestmark = pytest.mark.slow

TOL = 1e-4
ENGINE = {"backend": "vllm", "dtype": "float32", "max_model_len": 256, "enforce_eager": True, "block_size": 32,
          "kv_cache_memory_bytes": 128 * 2**20}


@pytest.fixture(scope="module")
def cores(tiny_model_dir):
    vllm = TeacherCore(TeacherConfig(**ENGINE))
    vllm.load_teacher("math", str(tiny_model_dir))
    hf = TeacherCore(TeacherConfig())
    hf.load_teacher("math", str(tiny_model_dir))
    yield vllm, hf
    vllm.close()  # vLLM's engine-core process: left running, multiprocessing's atexit join holds pytest
    hf.close()


def group_batch(seed: int, prompts: int = 2, g: int = 8, prompt_len: int = 70, same_start: int = 0):
    """`prompts` prompts of `prompt_len` tokens with `g` completions each (the first `same_start`
    tokens of every completion of a prompt equal)."""
    rng = np.random.default_rng(seed)
    ps = [rng.integers(3, 1500, prompt_len).astype(np.int32) for _ in range(prompts)]
    cs, index = [], []
    for p in range(prompts):
        start = rng.integers(3, 1500, same_start)
        for _ in range(g):
            cs.append(np.concatenate([start, rng.integers(3, 1500, int(rng.integers(1, 30)))]).astype(np.int32))
            index.append(p)
    return ps, cs, index


def assert_same(a, b, top_k: int) -> None:
    for x, y in zip(a.scores, b.scores):
        assert np.abs(x.logprobs - y.logprobs).max() <= TOL
        if top_k:
            assert np.abs(x.topk_logprobs - y.topk_logprobs).max() <= TOL
            assert (x.topk_ids.reshape(-1, top_k)[:, 0] == y.topk_ids.reshape(-1, top_k)[:, 0]).all()


@pytest.mark.parametrize("top_k", [0, 4])
def test_scores_equal_the_hf_teacher_and_groups_share_their_prompt(cores, top_k):
    vllm, hf = cores
    model = vllm.teacher("math").model
    ps, cs, index = group_batch(seed=top_k)
    before = model.cached_tokens
    got = vllm.score("math", ps, cs, index, top_k=top_k)
    assert_same(got, hf.score("math", ps, cs, index, top_k=top_k), top_k)
    # 7 of each prompt's 8 completions reuse its 2 whole 32-token blocks
    assert model.cached_tokens - before >= 2 * 7 * 64


def test_completions_that_start_alike_are_scored_in_full(cores):
    """Siblings whose first tokens agree hit cached blocks inside their completion: rescored."""
    vllm, hf = cores
    ps, cs, index = group_batch(seed=9, prompt_len=40, same_start=40)
    assert_same(vllm.score("math", ps, cs, index), hf.score("math", ps, cs, index), 0)


def test_a_sequence_beyond_max_model_len_names_the_field_and_scoring_goes_on(cores):
    vllm, _ = cores
    ps = [np.arange(3, 203, dtype=np.int32)]
    with pytest.raises(InvalidArgument) as err:
        vllm.score("math", ps, [np.arange(3, 63, dtype=np.int32)], [0])
    assert err.value.field == "completion_ids[0]" and "255" in str(err.value)
    with pytest.raises(InvalidArgument) as err:
        vllm.score("math", ps, [np.arange(3, 5, dtype=np.int32)], [0], temperature=0.5)
    assert err.value.field == "temperature"
    assert len(vllm.score("math", ps, [np.arange(3, 40, dtype=np.int32)], [0]).scores[0].logprobs) == 37


def test_a_domain_swaps_its_checkpoint_into_the_running_engine(cores, tiny_model_dir, tmp_path):
    vllm, hf = cores
    other = perturbed_copy(tiny_model_dir, tmp_path / "other", seed=3)
    engine = vllm.teacher("math").model
    teacher, seconds = vllm.load_teacher("math", str(other))
    assert teacher.model is engine and teacher.version == 1 and engine.spec.model == str(other)
    hf.load_teacher("math", str(other))
    ps, cs, index = group_batch(seed=5)
    assert_same(vllm.score("math", ps, cs, index), hf.score("math", ps, cs, index), 0)


def test_an_engine_that_cannot_start_names_the_setting(tiny_model_dir):
    with pytest.raises(FailedPrecondition) as err:
        TeacherCore(TeacherConfig(backend="vllm", gpu_memory_utilization=1.0)).load_teacher("math", str(tiny_model_dir))
    assert "CASCADE_TEACHER_GPU_MEMORY_UTILIZATION=1.0" in str(err.value) and "\n" not in str(err.value)


def test_cli_scores_with_the_vllm_backend(cores, tiny_model_dir, tmp_path, capsys, monkeypatch):
    """`cascade teacher score --backend vllm` (engine settings from CASCADE_TEACHER_*) equals the hf teacher."""
    import json

    from services.cli.main import main

    _, hf = cores
    hf.load_teacher("math", str(tiny_model_dir))
    for key, value in ENGINE.items():
        if key != "backend":
            monkeypatch.setenv(f"CASCADE_TEACHER_{key.upper()}", str(value).lower() if isinstance(value, bool) else str(value))
    ps, cs, index = group_batch(seed=2, prompts=1, g=4)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"prompt_ids": ps[0].tolist(), "completion_ids": c.tolist()}) + "\n" for c in cs))
    main(["teacher", "score", "--input", str(src), "--model", str(tiny_model_dir), "--backend", "vllm"])
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ref = hf.score("math", ps, cs, index)
    assert len(out) == 4
    for rec, s in zip(out, ref.scores):
        assert np.abs(np.asarray(rec["logprobs"]) - s.logprobs).max() <= TOL + 1e-6  # printed to 6 decimals
