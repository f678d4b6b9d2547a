"""The distributed shape across hosts (network namespaces, tests/hosts/netns.py), one set of hosts for
the module: Redis on a data host; the trainer on a second; the policy (and the reward service) on a
third; two teacher hosts serving every MOPD domain (one address list: calls fail over between them);
Celery workers on two hosts, splitting the queues. Every service listens on its own host's address
with mutual TLS (a throwaway CA made here) and the bearer token; the workers present the client
certificate and the token. The ledger is a private PostgreSQL server on the data host, bound to its
address (tests/hosts/ledger_host.py).

No shared checkpoint folder: the policy and teacher processes run with the trainer's store hidden
(an empty tmpfs over it, netns.Host.popen(hide=...)), each with its own cache folder; a published
version reaches them over the network (CASCADE_<SERVICE>_WEIGHTS_FROM = the trainer's address, mutual
TLS and the token, services.common.weightfetch), checksum verified before it is loaded.

A short cascade (GRPO 2 steps, then MOPD 2 steps with `teachers: auto`) runs across them, and teacher
host `teacher-a` is cut off when MOPD begins: its calls fail over to `teacher-b` within the call's
deadline and no step fails. The ledger and the trainer's journal judge: every step done once, the
trainer's global step equal to the steps applied, no step id applied twice.

A second cascade on the same hosts (GRPO 5, MOPD 3 with a trainer version as the teacher, fetched by
both teacher hosts) has the policy host cut mid-generation, the trainer host mid-TrainStep, the data
host (Redis + PostgreSQL) mid-generation and mid-MOPD-scoring, CUT_S seconds each, teacher-a cut
for MOPD step 0 then restored, and the last MOPD step on teacher links with 200 ms latency each way and
5 % packet loss: every step done once in the ledger and the journal, teacher-a serving again.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from pathlib import Path

import pytest

from tests.hosts import netns
from tests.hosts.ledger_host import LedgerHost
from tests.reliability.certs import make_pki
from tests.reliability.faults import cascade_config

pytestmark = [pytest.mark.hosts, pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PORTS = {"policy": 50051, "teacher": 50052, "reward": 50053, "trainer": 50054}
BEHIND_RELAY = 50062
"""Where a teacher listens on its host; its relay (tests/hosts/relay.py: latency on demand) takes PORTS["teacher"]."""


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
        self.ledger_url = ""

    def addr(self, host: str, service: str) -> str:
        return f"{self.h[host].address}:{PORTS[service]}"

    def serve(self, host: str, service: str, module: str, extra: dict[str, str], hide: list[Path] | None = None,
              port: int | None = None) -> None:
        p = f"CASCADE_{service.upper()}_"
        env = {**self.base, f"{p}HOST": self.h[host].address, f"{p}PORT": str(port or PORTS[service]),
               f"{p}AUTH_TOKEN": self.token, f"{p}TLS_CERT": str(self.pki.server_cert),
               f"{p}TLS_KEY": str(self.pki.server_key), f"{p}TLS_CLIENT_CA": str(self.pki.ca), **extra}
        self.procs[f"{service}@{host}"] = self.h[host].popen([sys.executable, "-m", module], env=env,
                                                              log=self.tmp / f"{service}@{host}.log", cwd=ROOT,
                                                              hide=hide)

    def relay(self, host: str, service: str, port: int) -> None:
        """Callers of `service` on `host` reach it through a relay whose delay `slow` sets."""
        address = self.h[host].address
        self.procs[f"relay@{host}"] = self.h[host].popen(
            [sys.executable, "-m", "tests.hosts.relay", f"{address}:{PORTS[service]}", f"{address}:{port}",
             str(self.tmp / f"delay-ms@{host}")], log=self.tmp / f"relay@{host}.log", cwd=ROOT)

    def slow(self, host: str, delay_ms: float, loss_pct: float) -> None:
        """`delay_ms` more each way (the host's relay) and `loss_pct` % of its packets dropped (nftables)."""
        (self.tmp / f"delay-ms@{host}").write_text(str(delay_ms))
        self.net.lose(self.h[host], loss_pct)

    def weights_from_trainer(self, service: str, host: str) -> dict[str, str]:
        """A published version from the trainer host over the network, into this host's own cache folder."""
        p = f"CASCADE_{service.upper()}_WEIGHTS_FROM"
        return {p: self.addr("trainer", "trainer"), f"{p}_TOKEN": self.token, f"{p}_TLS_CA": str(self.pki.ca),
                f"{p}_TLS_CERT": str(self.pki.client_cert), f"{p}_TLS_KEY": str(self.pki.client_key),
                f"CASCADE_{service.upper()}_WEIGHTS_CACHE": str(self.tmp / f"cache@{host}")}

    def orch_env(self) -> dict[str, str]:
        teachers = f"{self.addr('teacher-a', 'teacher')},{self.addr('teacher-b', 'teacher')}"
        return {**self.base, "CASCADE_ORCH_HOME": str(self.home),
                "CASCADE_ORCH_BROKER_URL": f"redis://{self.h['data'].address}:6379/0",
                "CASCADE_ORCH_RESULT_BACKEND": f"redis://{self.h['data'].address}:6379/1",
                "CASCADE_ORCH_LEDGER_URL": self.ledger_url,
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
    ledger = None
    try:
        c = Cluster(net, tmp, tiny_model_dir)
        data = c.h["data"]
        c.procs["redis@data"] = data.popen(["redis-server", "--bind", data.address, "--port", "6379", "--save", "",
                                            "--appendonly", "no", "--protected-mode", "no", "--dir", str(tmp)],
                                           log=tmp / "redis@data.log")
        ledger = LedgerHost(net, data, tmp / "postgres@data.log")
        c.ledger_url = ledger.url
        vocab = json.loads((tiny_model_dir / "config.json").read_text())["vocab_size"]
        c.serve("trainer", "trainer", "services.trainer", {"CASCADE_TRAINER_MODEL": str(tiny_model_dir),
                                                            "CASCADE_TRAINER_STORE": str(tmp / "store"),
                                                            "GLOO_SOCKET_IFNAME": "lo"})  # its one-rank group: local
        store = [tmp / "store"]  # the trainer's alone: the policy and teachers fetch what they load
        c.serve("policy", "policy", "services.policy", {"CASCADE_POLICY_MODEL": str(tiny_model_dir),
                                                        **c.weights_from_trainer("policy", "policy")}, hide=store)
        c.serve("policy", "reward", "services.reward", {})
        for t in ("teacher-a", "teacher-b"):
            c.serve(t, "teacher", "services.teacher", {"CASCADE_TEACHER_VOCAB_SIZE": str(vocab),
                                                       "CASCADE_TEACHER_STATE_FILE": str(tmp / f"{t}.json"),
                                                       **c.weights_from_trainer("teacher", t)}, hide=store,
                    port=BEHIND_RELAY)
            c.relay(t, "teacher", BEHIND_RELAY)
        for host, service in (("trainer", "trainer"), ("policy", "policy"), ("policy", "reward"),
                              ("teacher-a", "teacher"), ("teacher-b", "teacher")):
            c.wait_healthy(c.addr(host, service))
        c.worker("w1", "rollout,reward,control")
        c.worker("w2", "teacher,train")
        yield c
    finally:
        net.close()
        if ledger is not None:
            ledger.close()


def applied_steps(lines: list[str]) -> list[dict]:
    """The step records of trainer journal lines (its header line, naming the journal, left out)."""
    return [r for r in (json.loads(line) for line in lines if line.strip()) if "step_id" in r]


def test_a_cascade_runs_across_hosts_and_a_teacher_host_cut_mid_mopd_fails_no_step(cluster):
    try:
        check_a_cascade_runs_across_hosts_and_a_teacher_host_cut_mid_mopd_fails_no_step(cluster)
    finally:  # the next test starts with every host up, whatever failed here
        cluster.net.restore(cluster.h["teacher-a"])


def check_a_cascade_runs_across_hosts_and_a_teacher_host_cut_mid_mopd_fails_no_step(c: Cluster) -> None:
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
    journal = applied_steps((c.tmp / "store" / "journal.jsonl").read_text().splitlines())
    ids = [r["step_id"] for r in journal]
    assert len(ids) == len(set(ids)) == 4, f"the trainer's journal: {ids}"  # nothing applied twice, nothing lost
    assert journal[-1]["global_step"] == 4
    # the policy and the teachers loaded published versions they could not see, fetched and verified
    published = {p.name: (p.with_name(f"{p.name}.sha256")).read_text().strip()
                 for p in (c.tmp / "store" / "weights").glob("v*") if p.is_dir()}
    fetched = {p.name: (p / ".sha256").read_text() for p in (c.tmp / "cache@policy").glob("*/v*")}
    assert fetched and all(published[v] == sha for v, sha in fetched.items()), (published, fetched)
    assert "fetched weight version" in (c.tmp / "policy@policy.log").read_text()
    for t in ("teacher-a", "teacher-b"):
        for domain, entry in json.loads((c.tmp / f"{t}.json").read_text()).items():
            v = Path(entry["uri"]).name
            if v in published:  # a trainer version (not the initial model): fetched into this host's cache
                copy = next((c.tmp / f"cache@{t}").glob(f"*/{v}"))
                assert (copy / ".sha256").read_text() == published[v], (t, domain)
    print(f"fetched over the network: policy {sorted(fetched)}; teachers "
          f"{ {t: json.loads((c.tmp / f'{t}.json').read_text()) for t in ('teacher-a', 'teacher-b')} }")


CUT_S = 4.0
"""How long each host stays cut off: TCP's retransmissions carry the calls in flight across it."""
FAULTS = [
    # (name, host cut for CUT_S, when: (stage, step, the phase the step is at while that work runs));
    # GRPO steps 0 and 4 and MOPD step 2 run without a cut host (teacher-a is cut for MOPD step 0)
    ("policy host cut mid-generation", "policy", (0, 1, "drawn")),
    ("trainer host cut mid-TrainStep", "trainer", (0, 2, "scored")),
    ("data host (broker + ledger) cut mid-generation", "data", (0, 3, "drawn")),
    ("data host (broker + ledger) cut mid-MOPD-scoring", "data", (1, 1, "scored")),
]
TEACHER_HOSTS = ("teacher-a", "teacher-b")
SLOW_MS, LOSS_PCT = 200.0, 5.0
"""The slow link: each teacher host's relay holds every chunk SLOW_MS each way, nftables drops LOSS_PCT % of
its packets each way (this kernel has no netem; tests/hosts/relay.py, netns.Network.lose)."""
ORDER = ("drawn", "generated", "scored", "trained", "published", "synced", "done")
"""The ledger's phases in order (a fault fires at its phase or, when the poll missed it, the next seen)."""
MAX_TOKENS = 96
"""Completions long enough that generation lasts a few seconds: a cut seen at `drawn` lands mid-Generate."""


def test_hosts_cut_off_mid_run_cost_time_not_data_and_teacher_a_rejoins(cluster):
    """One cascade with every cross-host fault in turn (each host cut CUT_S seconds, then restored):
    the policy host mid-generation, the trainer host mid-TrainStep, the data host (Redis + the ledger)
    mid-publish and mid-generation, teacher-a cut for the first MOPD step, and both teacher hosts'
    links slowed (SLOW_MS each way, LOSS_PCT % loss) for the last. The ledger and the
    trainer's journal judge: every step done, each applied exactly once; teacher-a's calls succeed
    after its link returns. What a cut cost is printed, not judged (on 2 shared cores a step's time
    varies by seconds): the faulted step's phase times in the ledger, summed, minus the median of its
    stage's steps without a cut host (the ledger's own writes during a data-host cut are not in them)."""
    c = cluster
    journal_file = c.tmp / "store" / "journal.jsonl"
    before = len(journal_file.read_text().splitlines())
    config = cascade_config(c.model, grpo_steps=5, mopd_steps=3) | {"name": "faults-hosts"}
    teacher = str(c.tmp / "store" / "weights" / "v2")  # a trainer version the teacher hosts cannot see: fetched
    config["stages"][1]["teachers"] = {"mcqa": teacher}
    for stage in config["stages"]:
        stage["sampling"]["max_tokens"] = MAX_TOKENS
    (c.tmp / "faults.json").write_text(json.dumps(config))
    status = c.tmp / "faults-status.json"
    status.unlink(missing_ok=True)
    driver = c.h["w1"].popen([sys.executable, "-m", "tests.hosts.drive_run", str(c.tmp / "faults.json"),
                              str(status), "500"], env=c.orch_env(), log=c.tmp / "faults-driver.log", cwd=ROOT)
    pending, fired, cut_a, slowed = list(FAULTS), [], None, None
    deadline = time.monotonic() + 520
    while driver.poll() is None and time.monotonic() < deadline:
        state = json.loads(status.read_text()) if status.exists() else {}
        steps = state.get("steps", [])
        if pending:
            name, host, (stage, index, phase) = pending[0]
            hit = next((s for s in steps if (s["stage"], s["step"]) == (stage, index)
                        and ORDER.index(s["phase"]) >= ORDER.index(phase)), None)
            if hit is not None:
                c.net.cut(c.h[host])
                time.sleep(CUT_S)
                c.net.restore(c.h[host])
                fired.append((name, hit["step_id"], stage, hit["step"], hit["phase"]))
                pending.pop(0)
        if cut_a is None and any(s["stage"] == 1 for s in steps):
            c.net.cut(c.h["teacher-a"])
            cut_a = time.monotonic()
        if cut_a is not None and cut_a > 0 and any(s["stage"] == 1 and s["phase"] == "done" for s in steps):
            c.net.restore(c.h["teacher-a"])
            cut_a = -(time.monotonic() - cut_a)  # restored: how long it was cut
        if not slowed and any((s["stage"], s["step"], s["phase"]) == (1, 1, "done") for s in steps):
            for t in TEACHER_HOSTS:  # MOPD step 2 and the stage's end on slow, lossy teacher links
                c.slow(t, SLOW_MS, LOSS_PCT)
            slowed = [(s["stage"], s["step"], s["phase"]) for s in steps if s["stage"] == 1]
        time.sleep(0.1)
    losing = all(c.net.losing(c.h[t]) for t in TEACHER_HOSTS)
    dropped = {t: c.net.dropped(c.h[t]) for t in TEACHER_HOSTS}
    for t in TEACHER_HOSTS:
        c.slow(t, 0, 0)
    c.net.restore(c.h["teacher-a"])
    assert driver.poll() is not None, f"the run did not end in time: {c.tails()}"
    final = json.loads((c.tmp / "faults-driver.log").read_text().strip().splitlines()[-1])
    assert final["status"] == "succeeded", f"{final['error']}\n{c.tails()}"
    assert [f[0] for f in fired] == [f[0] for f in FAULTS], f"faults that never fired: {pending}"
    steps = {s["step_id"]: s for s in final["steps"]}
    assert sorted((s["stage"], s["step"]) for s in steps.values()) == [(0, i) for i in range(5)] + [(1, i) for i in range(3)]
    assert all(s["phase"] == "done" for s in steps.values()), "no step lost"
    journal = applied_steps(journal_file.read_text().splitlines()[before:])
    applied = [r["step_id"] for r in journal]
    assert sorted(applied) == sorted(steps), f"the trainer's journal: {applied} vs the ledger: {sorted(steps)}"
    assert len(applied) == len(set(applied)), "a step applied twice"
    assert slowed, "the teacher links were never slowed"
    assert losing, "the loss rules were in place until the run ended"
    met = [t for t in TEACHER_HOSTS if f"delay {SLOW_MS:.0f} ms" in (c.tmp / f"relay@{t}.log").read_text()]
    assert met, "no teacher call met the slow link (the relays' logs)"  # a few dozen packets: drops are printed
    # teacher-a rejoined: its calls succeed again across its link
    assert cut_a is not None and cut_a < 0, "teacher-a was never cut and restored"
    assert c.healthy("w1", c.addr("teacher-a", "teacher")), "teacher-a did not rejoin"
    published = (c.tmp / "store" / "weights" / "v2.sha256").read_text().strip()
    for t in ("teacher-a", "teacher-b"):  # each teacher host fetched v2 into its own cache, verified
        assert json.loads((c.tmp / f"{t}.json").read_text())["mcqa"]["uri"] == teacher
        assert (next((c.tmp / f"cache@{t}").glob("*/v2")) / ".sha256").read_text() == published, t
    wall = {sid: sum((st["timings"] or {}).values()) for sid, st in steps.items()}
    faulted = {f[1] for f in fired} | {sid for sid, st in steps.items() if (st["stage"], st["step"]) == (1, 0)}
    print(f"\nfaults run {final['status']} in {final['seconds']:.0f} s; teacher-a cut {-cut_a:.1f} s then rejoined")
    slow_sid = next(sid for sid, st in steps.items() if (st["stage"], st["step"]) == (1, 2))
    mopd = sorted(wall[o] for o, st in steps.items() if st["stage"] == 1 and o not in faulted | {slow_sid})
    print(f"FAULT | teacher links {SLOW_MS:.0f} ms each way + {LOSS_PCT:.0f} % loss | stage 1 step 2 (MOPD at "
          f"{slowed}) | lost 0 | twice 0 | step {wall[slow_sid]:.1f} s (others {', '.join(f'{o:.1f}' for o in mopd)}) | "
          f"attempts {steps[slow_sid]['attempts']} | packets dropped {dropped} | slowed relays carried calls: {met}")
    for name, sid, stage, step, phase in fired:
        others = sorted(wall[o] for o, st in steps.items() if st["stage"] == stage and o not in faulted)
        cost = wall[sid] - (others[len(others) // 2] if others else 0.0)
        print(f"FAULT | {name} | stage {stage} step {step} at {phase} | lost 0 | twice 0 | cost {cost:.1f} s "
              f"(step {wall[sid]:.1f} s, others {', '.join(f'{o:.1f}' for o in others)}) | "
              f"attempts {steps[sid]['attempts']}")
