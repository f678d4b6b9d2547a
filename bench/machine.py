"""The machine a bench ran on, as its results name it."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU's name with its family/model and the vector units torch's kernels choose between (AVX-512,
    AMX): two CPUs that print the same name can differ there, and so can a tiny model's float results."""
    try:
        info = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
    except OSError:
        return platform.processor() or platform.machine()
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    units = [u for u, flag in (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AMX", "amx_tile")) if flag in flags]
    detail = f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}" + (f", {'/'.join(units)}" if units else "")
    return f"{fields.get('model name', platform.machine())} ({detail})"
