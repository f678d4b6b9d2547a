"""The float path: which CPU kernels compute a run's floats.

PyTorch on a CPU picks its kernels by the widest vector instructions the CPU has: ATen's own
kernels (ATEN_CPU_CAPABILITY), oneMKL's (MKL_ENABLE_INSTRUCTIONS) and oneDNN's (ONEDNN_MAX_CPU_ISA).
Kernels of another width sum in another order, so one seed and one recipe give floats that differ
in their last bits from one CPU to the next. A tiny model sampling at temperature 1 turns such a
bit, sooner or later, into another token, and from there into another cascade: the demo's figures
on an AVX-512 Intel Xeon, an AVX-512 AMD EPYC and an AVX2-only AMD EPYC are three different draws
(bench/results/demo_seeds*.md).

`avx2` caps all three libraries at AVX2. Every AMD EPYC measured then computes the same floats to
the last printed digit: AVX2-only Zen 1, Zen 2 and Zen 3, and the AVX-512 Zen 4 and Zen 5 capped
(bench/results/demo_seeds_amd_*.md). The cap costs little on a small model (Zen 4: 630 s a demo
capped, 592-654 s not). `native` leaves each library its own choice: the fastest kernels, and
figures that are this CPU's own draw. On a CPU without AVX2 the cap changes nothing.

The variables are read once, when a library first computes: a process must be pinned before it
touches torch, and the services a pinned process starts inherit its environment.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from services.common.errors import InvalidArgument

FLOAT_PATHS: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
"""Float path -> the environment variables that put a process on it."""


def float_path_env(path: str, environ: MutableMapping[str, str] | None = None,
                   field: str = "float_path") -> dict[str, str]:
    """The variables of `path`, refused when `path` is unknown or `environ` already sets one of
    them to another value (the run would not be on the path it names)."""
    environ = os.environ if environ is None else environ
    if path not in FLOAT_PATHS:
        raise InvalidArgument(field, f"unknown float path {path!r}; choose one of {', '.join(FLOAT_PATHS)}")
    wanted = FLOAT_PATHS[path]
    for key, value in wanted.items():
        if environ.get(key, value).lower() != value.lower():
            raise InvalidArgument(field, f"{path!r} sets {key}={value}, but the environment has {key}="
                                         f"{environ[key]}; unset {key} or choose the float path 'native'")
    return dict(wanted)


def pin_float_path(path: str, environ: MutableMapping[str, str] | None = None,
                   field: str = "float_path") -> dict[str, str]:
    """Put `environ` (this process's by default) on `path`; return the variables set."""
    environ = os.environ if environ is None else environ
    wanted = float_path_env(path, environ, field)
    environ.update(wanted)
    return wanted


def describe(path: str) -> str:
    """One line for logs and reports: the path and what it sets."""
    wanted = FLOAT_PATHS.get(path, {})
    return f"{path} ({' '.join(f'{k}={v}' for k, v in wanted.items())})" if wanted else f"{path} (each library's own kernels)"
