"""The `vllm` backend off-GPU: importable without vLLM, and choosing it is one clear error line."""

from __future__ import annotations

import importlib.util

import pytest

from services.common.errors import FailedPrecondition
from services.policy.backends import BACKENDS, build_backend
from services.policy.backends import vllm as vllm_backend
from services.policy.config import PolicyConfig


def test_module_imports_without_vllm_and_is_registered():
    assert "vllm" in BACKENDS and vllm_backend.VllmBackend.name == "vllm"


def test_vllm_without_vllm_or_gpu_is_one_clear_error(tiny_model_dir):
    with pytest.raises(FailedPrecondition) as err:
        build_backend(PolicyConfig(model=str(tiny_model_dir), backend="vllm"))
    message = str(err.value)
    assert "vllm" in message and "\n" not in message
    assert ("pip install" in message) or ("CUDA" in message)


def test_require_vllm_names_what_is_missing():
    with pytest.raises(FailedPrecondition) as err:
        vllm_backend.require_vllm()
    missing_package = importlib.util.find_spec("vllm") is None
    assert ("pip install" in str(err.value)) == missing_package
