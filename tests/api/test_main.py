"""`python -m services.api` / `cascade serve api` as real processes: refusal without a token, serving with one."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time

import httpx
import pytest

pytestmark = pytest.mark.integration


def env_for(tmp_path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASCADE_")}
    return {**env, "CASCADE_ORCH_HOME": str(tmp_path / "home"), "CASCADE_LOG_FORMAT": "json", "CASCADE_API_PORT": "0",
            **extra}


def wait_ready(proc: subprocess.Popen, timeout: float = 60) -> int:
    """The port from the `api ready` log line (JSON on stderr)."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    seen, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not sel.select(timeout=deadline - time.monotonic()):
            break
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if '"api ready"' in line:
            return json.loads(line)["port"]
    proc.kill()
    raise AssertionError(f"the API did not become ready: {''.join(seen)[-2000:]}")


@pytest.mark.parametrize("argv", [[sys.executable, "-m", "services.api"],
                                  [sys.executable, "-m", "services.cli.main", "serve", "api"]])
def test_refuses_to_listen_beyond_loopback_without_a_token(tmp_path, argv):
    done = subprocess.run(argv, env=env_for(tmp_path, CASCADE_API_HOST="0.0.0.0"), capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert "CASCADE_API_TOKEN is required when the server listens beyond loopback" in done.stderr
    assert "Traceback" not in done.stderr


def test_serves_on_loopback_and_stops_on_sigterm(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "services.api"], env=env_for(tmp_path),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = wait_ready(proc)
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/healthz").json() == {"status": "ok"}
        assert httpx.get(f"{base}/runs").json() == []
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
        # uvicorn shuts down gracefully, then re-raises the signal so a supervisor sees why it stopped
        assert proc.returncode in (0, -signal.SIGTERM)
        assert "Application shutdown complete" in err
    finally:
        proc.kill()


def test_with_a_token_it_listens_on_all_interfaces_and_requires_it(tmp_path):
    token = "integration-token"
    proc = subprocess.Popen([sys.executable, "-m", "services.api"],
                            env=env_for(tmp_path, CASCADE_API_HOST="0.0.0.0", CASCADE_API_TOKEN=token),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        base = f"http://127.0.0.1:{wait_ready(proc)}"
        assert httpx.get(f"{base}/healthz").status_code == 200
        assert httpx.get(f"{base}/runs").status_code == 401
        assert httpx.get(f"{base}/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
