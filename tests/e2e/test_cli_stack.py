"""The CLI end to end: `cascade demo` refusing a bad cascade, and `cascade up` stopped by SIGTERM
(a whole short demo: tests/e2e/test_demo_live.py).

These run the real console command in a subprocess, with every service a real process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
CASCADE = [sys.executable, "-m", "services.cli.main"]


def small_cascade(model: Path) -> dict:
    sampling = {"temperature": 1.0, "max_tokens": 12, "thinking": False}
    return {"name": "small", "seed": 0, "model": str(model), "data": "synthetic", "stages": [
        {"name": "sft", "type": "sft", "domains": ["mcqa"], "batch_size": 4, "steps": 2, "max_seq_len": 128,
         "optimizer": {"lr": 1e-3}, "eval": {"prompts_per_domain": 4}},
        {"name": "rl", "type": "grpo", "domains": ["mcqa"], "batch_size": 2, "rollouts_per_prompt": 2, "steps": 1,
         "sampling": sampling, "optimizer": {"lr": 1e-4}, "eval": {"prompts_per_domain": 4}},
    ]}


def env_for(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    return {**env, "CASCADE_HOME": str(home), "CASCADE_LOG_FORMAT": "text", "COLUMNS": "200"}


def children_of(session_leader: int) -> list[int]:
    """Every live process whose session id is one the supervisor started (its direct children lead)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(stat[1]) == session_leader and stat[0] != "Z":  # ppid
                out.append(int(entry.name))
    return out


def still_running(pids: list[int]) -> list[int]:
    """Those of `pids` that are alive and not zombies."""
    return [p for p in pids if Path(f"/proc/{p}").exists()
            and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]


def test_a_bad_cascade_is_one_clear_line_before_anything_starts(tmp_path, tiny_model_dir):
    bad = small_cascade(tiny_model_dir)
    bad["stages"][1]["sampling"]["temperature"] = -1
    bad["name"] = "Demo"
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(bad))
    done = subprocess.run([*CASCADE, "demo", "--config", str(config), "--home", str(tmp_path / "h")],
                          env=env_for(tmp_path / "h"), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "stages[1].sampling.temperature" in done.stderr and "Traceback" not in done.stderr
    assert "name: String should match pattern '^[a-z0-9][a-z0-9_.-]*$'" in done.stderr, "printed as written"
    assert not (tmp_path / "h" / "logs").exists(), "nothing started"


def test_up_stops_every_service_on_sigterm(tmp_path, tiny_model_dir):
    home = tmp_path / "home"
    proc = subprocess.Popen([*CASCADE, "up", "--model", str(tiny_model_dir), "--home", str(home)], env=env_for(home),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not (home / "stack.env").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "slow"
        time.sleep(0.5)
    services = children_of(proc.pid)
    assert len(services) >= 6, f"expected policy, teacher, reward, 2 trainers and a worker: {services}"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    time.sleep(0.5)
    alive = still_running(services)
    assert alive == [], f"services outlived `cascade up`: {alive}"


def test_sigterm_while_the_services_start_leaves_none_running(tmp_path, tiny_model_dir):
    home = tmp_path / "home"
    proc = subprocess.Popen([*CASCADE, "up", "--model", str(tiny_model_dir), "--home", str(home)], env=env_for(home),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while len(children_of(proc.pid)) < 6:
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read() if proc.poll() else "slow"
        time.sleep(0.05)
    assert not (home / "stack.env").exists(), "the signal must land while the services are still starting"
    services = children_of(proc.pid)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 1, proc.stdout.read()
    assert "interrupted" in proc.stdout.read()
    time.sleep(0.5)
    alive = still_running(services)
    assert alive == [], f"services outlived an interrupted `cascade up`: {alive}"
    assert not (home / "stack.env").exists(), "no addresses of a stack that is not up"
