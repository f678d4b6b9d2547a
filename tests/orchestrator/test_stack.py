"""The local stack's process list: the env service joins it when a cascade has a stage with `env:`."""

from __future__ import annotations

from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.stack import local_stack, needs_env


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
