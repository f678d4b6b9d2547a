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

The cap does not cross vendors: oneMKL picks its branch by vendor as well as by width, and an
Intel CPU capped at AVX2 runs Intel's AVX2 branch, not the one AMD CPUs run. On Intel Xeons the
path gave their own draw, one set of figures to the digit on family 6 models 167 and 207
(bench/results/demo_seeds_intel_xeon_avx2.md; the recipe before, demo_seeds_128_prompts_intel_xeon.md).
oneMKL's documentation names one branch that both vendors run, MKL_CBWR=COMPATIBLE (SSE2); on that
Xeon it made SFT steps 1.6x slower and did not give the AMD figures either (so the AMD CPUs' branch
is not it), so the path does not set it. `vendor_note` says so where it applies.

The variables are read once, when a library first computes: a process must be pinned before it
touches torch, and the services a pinned process starts inherit its environment.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

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


DRAWN_ON = "AuthenticAMD"
"""The vendor whose CPUs drew the committed figures on the `avx2` path (bench/results/demo_seeds*.md)."""


OTHER_DRAWS = {
    "GenuineIntel": ("Intel Xeons (family 6 models 167 and 207, the same figures to the digit) drew "
                     "bench/results/demo_seeds_intel_xeon_avx2.md"),
}
"""Other vendors' CPUs measured on the `avx2` path with the same recipe: where their draw lies."""


def cpu_vendor(cpuinfo: str | None = None) -> str:
    """The CPU's `vendor_id` ('GenuineIntel', 'AuthenticAMD', ...) from /proc/cpuinfo's text; '' when unknown."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return ""


def vendor_note(path: str, vendor: str) -> str | None:
    """A line for a run on `path` on a CPU of `vendor` whose floats are not the committed figures'
    draw (another vendor's oneMKL branch), naming that vendor's own measured draw where there is one;
    None where the path gives those figures or none are claimed."""
    if path != "avx2" or not vendor or vendor == DRAWN_ON:
        return None
    note = (f"this CPU ({vendor}) takes its own oneMKL branch on the avx2 path, so its figures are its own draw, "
            f"not those of bench/results/demo_seeds.md ({DRAWN_ON} CPUs)")
    if other := OTHER_DRAWS.get(vendor):
        note += f"; {other}"
    return note
