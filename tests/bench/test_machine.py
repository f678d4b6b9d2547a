"""bench/machine.py: the CPU a bench result names, with what tells two same-named CPUs apart."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import machine  # noqa: E402


def test_the_cpu_is_named_with_its_family_and_model(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"
                    "model name\t: Intel(R) Xeon(R) Processor\nflags\t\t: fpu avx2 avx512f amx_tile\n\n"
                    "processor\t: 1\nmodel name\t: Intel(R) Xeon(R) Processor\n")
    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: real(info if str(self) == "/proc/cpuinfo" else self))
    assert machine.cpu_name() == "Intel(R) Xeon(R) Processor (family 6 model 143, AVX2/AVX-512/AMX)"
