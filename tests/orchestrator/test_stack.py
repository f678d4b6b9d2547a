"""The local stack's composition: which backend the policy and the teachers run on, and the env
service joining it when a cascade has a stage with `env:`."""

from __future__ import annotations

import pytest

from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.stack import VLLM_KV_CACHE_BYTES, backend_env, local_stack, needs_env


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


def cascade(**extra) -> CascadeConfig:
    stage = {"name": "g", "type": "grpo", "domains": ["workbench"], "steps": 1, "batch_size": 1,
             "rollouts_per_prompt": 2, "optimizer": {"lr": 1e-6}, **extra}
    return CascadeConfig.model_validate({"name": "c", "model": "m", "data": "synthetic", "stages": [stage]})


def test_the_env_service_starts_only_when_a_stage_needs_it(tiny_model_dir, tmp_path):
    assert needs_env(cascade(env="workbench")) and not needs_env(cascade())
    plain, with_env = local_stack(tmp_path, tiny_model_dir), local_stack(tmp_path, tiny_model_dir, env=True)
    assert "env" not in [s.name for s in plain.specs]
    env = next(s for s in with_env.specs if s.name == "env")
    assert with_env.env["CASCADE_ORCH_ENV_ADDRESS"] == env.grpc_address
    assert env.env["CASCADE_ENV_PORT"] == env.grpc_address.rsplit(":", 1)[1]
    worker = next(s for s in with_env.specs if s.name == "worker")
    assert worker.env["CASCADE_ORCH_ENV_ADDRESS"] == env.grpc_address, "the worker is pointed at it"


def test_the_torch_services_share_one_core_pool_under_the_home_by_default(tmp_path, tiny_model_dir, monkeypatch):
    for name in ("POLICY", "TEACHER", "TRAINER"):
        monkeypatch.delenv(f"CASCADE_{name}_CORES_DIR", raising=False)
    monkeypatch.delenv("CASCADE_STACK_SHARE_CORES", raising=False)
    specs = {s.name: s for s in local_stack(tmp_path, tiny_model_dir).specs}
    pool = str(tmp_path.resolve() / "cores")
    assert specs["policy"].env["CASCADE_POLICY_CORES_DIR"] == specs["teacher"].env["CASCADE_TEACHER_CORES_DIR"] == pool
    assert specs["trainer"].env["CASCADE_TRAINER_CORES_DIR"] == specs["rm_trainer"].env["CASCADE_TRAINER_CORES_DIR"] == pool
    assert not any(k.endswith("_CORES_DIR") for k in specs["reward"].env), "the reward service runs no torch"
    assert not any(k.endswith("_LEASE") for s in specs.values() for k in s.env), "the pool's own default: fixed"
    monkeypatch.setenv("CASCADE_STACK_SHARE_CORES", "maybe")
    with pytest.raises(ValueError, match="CASCADE_STACK_SHARE_CORES"):
        local_stack(tmp_path, tiny_model_dir)
    monkeypatch.setenv("CASCADE_STACK_SHARE_CORES", "false")
    specs = {s.name: s for s in local_stack(tmp_path, tiny_model_dir).specs}
    assert not any(k.endswith("_CORES_DIR") for s in specs.values() for k in s.env), "turned off"
    monkeypatch.setenv("CASCADE_STACK_SHARE_CORES", "true")
    specs = {s.name: s for s in local_stack(tmp_path, tiny_model_dir).specs}
    assert specs["policy"].env["CASCADE_POLICY_CORES_DIR"] == pool
    monkeypatch.setenv("CASCADE_TRAINER_CORES_DIR", str(tmp_path / "elsewhere"))
    specs = {s.name: s for s in local_stack(tmp_path, tiny_model_dir).specs}
    assert specs["trainer"].env["CASCADE_TRAINER_CORES_DIR"] == str(tmp_path / "elsewhere")  # the environment wins


def test_the_worker_consumes_the_queues_of_the_prefix_it_inherits(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("CASCADE_ORCH_QUEUE_PREFIX", "team-a.")
    worker = next(s for s in local_stack(tmp_path, tiny_model_dir).specs if s.name == "worker")
    queues = worker.argv[worker.argv.index("-Q") + 1].split(",")
    assert queues and all(q.startswith("team-a.") for q in queues), queues
    monkeypatch.delenv("CASCADE_ORCH_QUEUE_PREFIX")
    worker = next(s for s in local_stack(tmp_path, tiny_model_dir).specs if s.name == "worker")
    assert "control" in worker.argv[worker.argv.index("-Q") + 1].split(",")
