"""A trainer starts on a machine where an earlier one was killed while DeepSpeed held its extension
build lock (services.trainer.engine.skip_shm_comm_build): the shared-memory op is not built, so the
lock left behind is never waited on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOIN = "from services.trainer.engine import init_distributed; print(init_distributed('gloo'))"


def test_a_stale_extension_lock_does_not_hold_up_the_process_group(tmp_path):
    stale = tmp_path / "extensions" / "deepspeed_shm_comm"
    stale.mkdir(parents=True)
    (stale / "lock").touch()  # what a SIGKILL during the op's build or load leaves
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "extensions"), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", JOIN], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "(0, 1)"
    assert sorted(p.name for p in stale.iterdir()) == ["lock"], "nothing was built"
