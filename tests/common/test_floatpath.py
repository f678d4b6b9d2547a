"""The float path: the variables it sets, its refusals, and that torch reads them when a pinned
process first computes (so `cascade demo` can pin itself after importing torch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.common.errors import InvalidArgument
from services.common.floatpath import (
    FLOAT_PATHS,
    OTHER_DRAWS,
    cpu_vendor,
    describe,
    float_path_env,
    pin_float_path,
    vendor_note,
)

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys, torch
from services.common import floatpath
floatpath.FLOAT_PATHS["probe"] = {{"ATEN_CPU_CAPABILITY": "{cap}"}}
floatpath.pin_float_path(sys.argv[1])
torch.randn(64).softmax(0)  # the first computation reads the variables
print(torch.backends.cpu.get_cpu_capability())
"""


def capability(path: str, cap: str = "default") -> str:
    env = {k: v for k, v in os.environ.items() if k not in FLOAT_PATHS["avx2"]}
    out = subprocess.run([sys.executable, "-c", CHILD.format(cap=cap), path], env=env, capture_output=True,
                         text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_avx2_sets_the_three_libraries_caps_and_native_sets_nothing():
    assert float_path_env("avx2", {}) == {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                                          "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert float_path_env("native", {"ATEN_CPU_CAPABILITY": "default"}) == {}
    env = {"PATH": "/bin"}
    assert pin_float_path("avx2", env) == FLOAT_PATHS["avx2"] and env == {"PATH": "/bin", **FLOAT_PATHS["avx2"]}
    assert describe("avx2") == "avx2 (ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2)"


def test_an_unknown_path_or_a_conflicting_variable_is_refused_by_name():
    with pytest.raises(InvalidArgument, match=r"--float-path: unknown float path 'avx512'; choose one of native, avx2"):
        float_path_env("avx512", {}, field="--float-path")
    env = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}
    with pytest.raises(InvalidArgument, match=r"float_path: 'avx2' sets ONEDNN_MAX_CPU_ISA=AVX2, but the environment "
                                              r"has ONEDNN_MAX_CPU_ISA=AVX512_CORE; unset ONEDNN_MAX_CPU_ISA"):
        pin_float_path("avx2", env)
    assert env == {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, "nothing is set when the pin is refused"
    assert pin_float_path("avx2", {"ATEN_CPU_CAPABILITY": "AVX2"})  # the same value, in another case


def test_a_process_pinned_after_importing_torch_computes_on_the_pinned_kernels():
    assert capability("probe") == "DEFAULT"  # torch imported before the pin: it still takes the cap
    native = capability("native")
    assert native in ("DEFAULT", "AVX2", "AVX512", "ZVECTOR", "VSX", "SVE256")
    assert capability("avx2") == ("AVX2" if native in ("AVX2", "AVX512") else native)


def test_the_vendor_is_read_from_cpuinfo_and_empty_when_absent():
    info = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"
    assert cpu_vendor(info) == "GenuineIntel"
    assert cpu_vendor("processor\t: 0\nCPU implementer\t: 0x41\n") == ""
    assert isinstance(cpu_vendor(), str)


def test_only_another_vendor_on_the_avx2_path_is_told_its_figures_are_its_own_draw():
    for draw in OTHER_DRAWS.values():  # every table a note points at is committed
        assert (ROOT / draw.split()[-1]).is_file(), draw
    note = vendor_note("avx2", "GenuineIntel")
    assert note is not None and "GenuineIntel" in note and "own draw" in note and "AuthenticAMD" in note
    assert "bench/results/demo_seeds_intel_xeon_avx2.md" in note  # where an Intel Xeon's draw is committed
    assert ";" not in vendor_note("avx2", "HygonGenuine")  # a vendor never measured: no draw to point at
    assert vendor_note("avx2", "AuthenticAMD") is None
    assert vendor_note("native", "GenuineIntel") is None  # native claims no committed figures
    assert vendor_note("avx2", "") is None  # unknown vendor: nothing to say
