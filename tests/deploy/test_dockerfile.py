"""deploy/Dockerfile: hadolint finds nothing, and each target has the base and user it should."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"


def stages() -> dict[str, str]:
    """Stage name -> its text (from its FROM line to the next)."""
    text = DOCKERFILE.read_text()
    parts = re.split(r"^(?=FROM )", text, flags=re.MULTILINE)
    return {re.match(r"FROM \S+ AS (\S+)", p).group(1): p for p in parts if p.startswith("FROM ")}


def test_hadolint_passes():
    hadolint = Path(sys.executable).parent / "hadolint"
    proc = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_would_catch_a_regression(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text(DOCKERFILE.read_text().replace("apt-get install -y --no-install-recommends", "apt-get install -y", 1))
    hadolint = Path(sys.executable).parent / "hadolint"
    proc = subprocess.run([str(hadolint), "--no-color", str(bad)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode != 0 and "DL3015" in proc.stdout


def test_targets_bases_users_and_commands():
    s = stages()
    cpu = {"policy", "teacher", "trainer", "reward", "env", "orchestrator", "api"}
    cuda = {"policy-cuda", "teacher-cuda", "trainer-cuda"}
    assert cpu | cuda <= set(s)
    assert s["cpu-base"].startswith("FROM ${PYTHON_IMAGE} AS cpu-base") and "python:3.11-slim" in DOCKERFILE.read_text()
    assert 'torch==${TORCH_VERSION}+cpu' in s["cpu-base"]
    assert "nvidia/cuda:" in DOCKERFILE.read_text() and s["cuda-base"].startswith("FROM ${CUDA_IMAGE} AS cuda-base")
    for name in cpu | cuda:
        base = "cuda-base" if name in cuda else "cpu-base"
        assert s[name].startswith(f"FROM {base} AS {name}"), name
        assert re.search(r'^CMD \["(python|celery)"', s[name], re.MULTILINE), name
        if name in ("reward", "env"):
            assert "USER" not in s[name], "the sandbox needs root"
        else:
            assert "USER 10001:10001" in s[name], f"{name} must not run as root"
