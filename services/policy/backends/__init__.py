"""Generation backends, keyed by the config's `backend` name; every entry is `build(config) -> PolicyBackend`.

`vllm` is imported lazily (inside its builder's use), so listing it costs nothing without vLLM.
"""

from __future__ import annotations

from collections.abc import Callable

from services.common.errors import InvalidArgument
from services.policy.backends.base import PolicyBackend
from services.policy.config import PolicyConfig


def _hf(config: PolicyConfig) -> PolicyBackend:
    from services.policy.backends.hf import build_hf

    return build_hf(config)


def _vllm(config: PolicyConfig) -> PolicyBackend:
    from services.policy.backends.vllm import build_vllm

    return build_vllm(config)


BACKENDS: dict[str, Callable[[PolicyConfig], PolicyBackend]] = {"hf": _hf, "vllm": _vllm}


def build_backend(config: PolicyConfig) -> PolicyBackend:
    """The backend named by `config.backend`; an unknown name is InvalidArgument naming `backend`."""
    if config.backend not in BACKENDS:
        raise InvalidArgument("backend", f"{config.backend!r} is not one of {sorted(BACKENDS)}")
    return BACKENDS[config.backend](config)
