"""The local stack's composition: which backend the policy and the teachers run on."""

from __future__ import annotations

import pytest

from services.orchestrator.stack import VLLM_KV_CACHE_BYTES, backend_env, local_stack


def test_hf_is_the_default_and_vllm_gets_a_small_kv_cache(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.delenv("CASCADE_TEACHER_KV_CACHE_MEMORY_BYTES", raising=False)
    specs = {s.name: s for s in local_stack(tmp_path, tiny_model_dir).specs}
    assert specs["policy"].env["CASCADE_POLICY_BACKEND"] == "hf" and "CASCADE_POLICY_KV_CACHE_MEMORY_BYTES" not in specs["policy"].env
    monkeypatch.setenv("CASCADE_POLICY_KV_CACHE_MEMORY_BYTES", "12345")
    specs = {s.name: s for s in local_stack(tmp_path, tiny_model_dir, backend="vllm").specs}
    assert specs["policy"].env["CASCADE_POLICY_BACKEND"] == specs["teacher"].env["CASCADE_TEACHER_BACKEND"] == "vllm"
    assert specs["policy"].env["CASCADE_POLICY_KV_CACHE_MEMORY_BYTES"] == "12345"  # the environment wins
    assert specs["teacher"].env["CASCADE_TEACHER_KV_CACHE_MEMORY_BYTES"] == str(VLLM_KV_CACHE_BYTES)
    assert specs["policy"].ready_timeout > 300


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="backend must be one of hf, vllm"):
        backend_env("policy", "onnx")
