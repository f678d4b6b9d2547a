"""bench/gpu_smoke_hf.py runs its checks end to end on the CPU (float32, tiny model), so the script a
GPU session runs once has already run against the current policy, teacher and trainer code."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cpu_run_passes_every_check_and_writes_its_figures(tmp_path):
    out = tmp_path / "smoke.json"
    proc = subprocess.run(
        [sys.executable, "bench/gpu_smoke_hf.py", "--device", "cpu", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=480,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads(out.read_text())
    names = [c["name"] for c in report["checks"]]
    assert report["ok"] and names == [
        "model/tiny", "policy/logprobs/float32", "policy/crn/float32", "teacher/float32",
        "generate/tiny/float32", "trainer/tiny/fp32",
    ]
    trainer = report["checks"][-1]["values"]
    assert trainer["pi_train_vs_pi_inf_float32"]["max_abs"] < 2e-3 and trainer["train_step_s_median"] > 0
