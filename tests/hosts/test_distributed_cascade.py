"""The distributed shape across hosts (network namespaces, tests/hosts/netns.py), one set of hosts for
the module: Redis on a data host; the trainer on a second; the policy (and the reward service) on a
third; two teacher hosts serving every MOPD domain (one address list: calls fail over between them);
Celery workers on two hosts, splitting the queues. Every service listens on its own host's address
with mutual TLS (a throwaway CA made here) and the bearer token; the workers present the client
certificate and the token. The ledger is a SQLite file on the filesystem the namespaces share.

A short cascade (GRPO 2 steps, then MOPD 2 steps with `teachers: auto`) runs across them, and teacher
host `teacher-a` is cut off when MOPD begins: its calls fail over to `teacher-b` within the call's
deadline and no step fails. The ledger and the trainer's journal judge: every step done once, the
trainer's global step equal to the steps applied, no step id applied twice.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path

import pytest

from tests.hosts import netns
from tests.reliability.certs import make_pki
from tests.reliability.faults import cascade_config

pytestmark = [pytest.mark.hosts, pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PORTS = {"policy": 50051, "teacher": 50052, "reward": 50053, "trainer": 50054}


class Cluster:
    def __init__(self, net: netns.Network, tmp: Path, model: Path):
        self.net, self.tmp, self.model = net, tmp, model
        self.h = {n: net.add_host(n) for n in ("data", "trainer", "policy", "teacher-a", "teacher-b", "w1", "w2")}
        self.token = secrets.token_hex(16)
        sans = ",".join(f"IP:{h.address}" for h in self.h.values())
        self.pki = make_pki(tmp / "pki", server_san=sans)
        self.home = tmp / "home"
        self.home.mkdir()
        self.base = {"PYTHONPATH": str(ROOT), "CASCADE_HOME": str(self.home), "CASCADE_LOG_FORMAT": "text",
                     "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
        self.procs: dict[str, object] = {}

    def addr(self, host: str, service: str) -> str:
        return f"{self.h[host].address}:{PORTS[service]}"

    def serve(self, host: str, service: str, module: str, extra: dict[str, str]) -> None:
        p = f"CASCADE_{service.upper()}_"
        env = {**self.base, f"{p}HOST": self.h[host].address, f"{p}PORT": str(PORTS[service]),
               f"{p}AUTH_TOKEN": self.token, f"{p}TLS_CERT": str(self.pki.server_cert),
               f"{p}TLS_KEY": str(self.pki.server_key), f"{p}TLS_CLIENT_CA": str(self.pki.ca), **extra}
        self.procs[f"{service}@{host}"] = self.h[host].popen([sys.executable, "-m", module], env=env,
                                                              log=self.tmp / f"{service}@{host}.log", cwd=ROOT)

    def orch_env(self) -> dict[str, str]:
        teachers = f"{self.addr('teacher-a', 'teacher')},{self.addr('teacher-b', 'teacher')}"
        return {**self.base, "CASCADE_ORCH_HOME": str(self.home),
                "CASCADE_ORCH_BROKER_URL": f"redis://{self.h['data'].address}:6379/0",
                "CASCADE_ORCH_RESULT_BACKEND": f"redis://{self.h['data'].address}:6379/1",
                "CASCADE_ORCH_LEDGER_URL": f"sqlite:///{self.home}/ledger.sqlite",
                "CASCADE_ORCH_POLICY_ADDRESS": self.addr("policy", "policy"),
                "CASCADE_ORCH_REWARD_ADDRESS": self.addr("policy", "reward"),
                "CASCADE_ORCH_TRAINER_ADDRESS": self.addr("trainer", "trainer"),
                "CASCADE_ORCH_TEACHER_ADDRESS": teachers,
                "CASCADE_ORCH_SERVICES_TLS_CA": str(self.pki.ca),
                "CASCADE_ORCH_SERVICES_TLS_CERT": str(self.pki.client_cert),
                "CASCADE_ORCH_SERVICES_TLS_KEY": str(self.pki.client_key),
                "CASCADE_ORCH_SERVICES_TOKEN": self.token, "CASCADE_ORCH_RPC_TIMEOUT_S": "60"}

    def worker(self, host: str, queues: str) -> None:
        argv = [sys.executable, "-m", "celery", "-A", "services.orchestrator.tasks", "worker", "--pool", "threads",
                "--concurrency", "2", "-Q", queues, "--loglevel", "INFO", "--without-gossip", "--without-mingle",
                "--without-heartbeat", "-n", f"{host}@%h"]
        self.procs[f"worker@{host}"] = self.h[host].popen(argv, env=self.orch_env(), log=self.tmp / f"worker@{host}.log",
                                                          cwd=ROOT)

    def healthy(self, frm: str, address: str) -> bool:
        argv = [sys.executable, "-m", "services.common.healthcheck", address, "--tls-ca", str(self.pki.ca),
                "--tls-cert", str(self.pki.client_cert), "--tls-key", str(self.pki.client_key)]
        return self.h[frm].run(argv, timeout=30, env={"PYTHONPATH": str(ROOT)}).returncode == 0

    def wait_healthy(self, address: str, timeout: float = 400) -> None:
        deadline = time.monotonic() + timeout
        while not self.healthy("w1", address):
            dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
            assert not dead, f"exited: {dead}: {self.tails()}"
            assert time.monotonic() < deadline, f"{address} not SERVING: {self.tails()}"
            time.sleep(1.0)

    def tails(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-1500:]}" for p in sorted(self.tmp.glob("*@*.log")))


@pytest.fixture(scope="module")
def cluster(can_make_hosts, tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cluster")
    net = netns.Network("cxh2", subnet=80)
    try:
        c = Cluster(net, tmp, tiny_model_dir)
        data = c.h["data"]
        c.procs["redis@data"] = data.popen(["redis-server", "--bind", data.address, "--port", "6379", "--save", "",
                                            "--appendonly", "no", "--protected-mode", "no", "--dir", str(tmp)],
                                           log=tmp / "redis@data.log")
        vocab = json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"]
        c.serve("trainer", "trainer", "services.trainer", {"CASCADE_TRAINER_MODEL": str(tiny_model_dir),
                                                            "CASCADE_TRAINER_STORE": str(tmp / "store"),
                                                            "GLOO_SOCKET_IFNAME": "lo"})  # its one-rank group: local
        c.serve("policy", "policy", "services.policy", {"CASCADE_POLICY_MODEL": str(tiny_model_dir)})
        c.serve("policy", "reward", "services.reward", {})
        for t in ("teacher-a", "teacher-b"):
            c.serve(t, "teacher", "services.teacher", {"CASCADE_TEACHER_VOCAB_SIZE": str(vocab),
                                                       "CASCADE_TEACHER_STATE_FILE": str(tmp / f"{t}.json")})
        for host, service in (("trainer", "trainer"), ("policy", "policy"), ("policy", "reward"),
                              ("teacher-a", "teacher"), ("teacher-b", "teacher")):
            c.wait_healthy(c.addr(host, service))
        c.worker("w1", "rollout,reward,control")
        c.worker("w2", "teacher,train")
        yield c
    finally:
        net.close()


def test_a_cascade_runs_across_hosts_and_a_teacher_host_cut_mid_mopd_fails_no_step(cluster):
    c = cluster
    config = cascade_config(c.model, grpo_steps=2, mopd_steps=2)
    (c.tmp / "cascade.json").write_text(json.dumps(config))
    status = c.tmp / "status.json"
    driver = c.h["w1"].popen([sys.executable, "-m", "tests.hosts.drive_run", str(c.tmp / "cascade.json"),
                              str(status), "400"], env=c.orch_env(), log=c.tmp / "driver.log", cwd=ROOT)
    cut_at = None
    deadline = time.monotonic() + 420
    while driver.poll() is None and time.monotonic() < deadline:
        state = json.loads(status.read_text()) if status.exists() else {}
        if cut_at is None and any(s["stage"] == 1 for s in state.get("steps", [])):
            c.net.cut(c.h["teacher-a"])
            cut_at = state["seconds"]
        time.sleep(0.2)
    assert driver.poll() is not None, f"the run did not end in time: {c.tails()}"
    final = json.loads((c.tmp / "driver.log").read_text().strip().splitlines()[-1])
    print(f"\nrun {final['status']} in {final['seconds']:.0f} s; teacher-a cut at {cut_at} s; steps: {final['steps']}")
    assert final["status"] == "succeeded", f"{final['error']}\n{c.tails()}"
    assert cut_at is not None, "MOPD never began"
    steps = [(s["stage"], s["step"]) for s in final["steps"]]
    assert sorted(steps) == [(0, 0), (0, 1), (1, 0), (1, 1)] and len(set(steps)) == len(steps)
    assert all(s["phase"] == "done" for s in final["steps"])
    assert all(s["attempts"] == 1 for s in final["steps"]), "no step failed or ran again"
    journal = [json.loads(line) for line in (c.tmp / "store" / "journal.jsonl").read_text().splitlines() if line]
    ids = [r["step_id"] for r in journal]
    assert len(ids) == len(set(ids)) == 4, f"the trainer's journal: {ids}"  # nothing applied twice, nothing lost
    assert journal[-1]["global_step"] == 4
    c.net.restore(c.h["teacher-a"])
