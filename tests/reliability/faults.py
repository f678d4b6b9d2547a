"""Fault injection on a real local stack: a cascade run with processes killed, broker and database restarted.

`FaultStack` starts the services of `services.orchestrator.stack.local_stack` (policy, two teacher
replicas of one address list, reward, a trainer per run) under a `Supervisor`, a private Redis with
an append-only file (so a restart keeps its queues), a private PostgreSQL cluster holding the
ledger (so it can be killed without touching the machine's server), and Celery workers.
`run_cascade` drives one run to the end while `Fault`s fire when the ledger reaches their trigger;
a run that failed while a service was down is resumed the way `cascade resume` does it.
`compare_runs` says what differs between a faulted run and an uninterrupted one. Shared by
tests/reliability and bench/reliability.py; it knows the ledger and the supervisor, not how a step
is computed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from services.common.grpc_client import ReplicaClient
from services.common.pb import trainer_pb2, trainer_pb2_grpc
from services.common.supervisor import ProcessSpec, Supervisor, free_port
from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.ledger import Ledger
from services.orchestrator.stack import local_stack
from tests.reliability.private_servers import PrivatePostgres, PrivateRedis, pg_bindir

TERMINAL = ("succeeded", "failed", "cancelled")
SAMPLING = {"temperature": 1.0, "max_tokens": 10, "thinking": False}


def cascade_config(model: Path, grpo_steps: int = 2, mopd_steps: int = 2) -> dict:
    """GRPO then MOPD (`teachers: auto`) on mcqa, small enough for 2 shared CPU cores."""
    common = {"domains": ["mcqa"], "batch_size": 4, "rollouts_per_prompt": 2, "sampling": SAMPLING,
              "optimizer": {"lr": 1e-3}, "eval": {"prompts_per_domain": 2}}
    stages = [{"name": "grpo", "type": "grpo", "steps": grpo_steps, "dynamic_filtering": False, **common},
              {"name": "mopd", "type": "mopd", "steps": mopd_steps, "teachers": "auto", **common}]
    return CascadeConfig.model_validate({"name": "faults", "seed": 0, "model": str(model), "data": "synthetic",
                                         "stages": stages}).model_dump(mode="json")


@dataclass
class FaultStack:
    home: Path
    model: Path
    sup: Supervisor
    env: dict[str, str]
    specs: dict[str, ProcessSpec]
    redis: PrivateRedis
    postgres: PrivatePostgres | None = None
    """The ledger's database (every run of the stack); None: no PostgreSQL here, the ledger is SQLite."""
    trainers: dict[str, str] = field(default_factory=dict)
    """trainer process name -> its address."""

    def settings(self, broker: str, trainer: str) -> OrchestratorSettings:
        env = {**self.env, "CASCADE_ORCH_BROKER_URL": broker, "CASCADE_ORCH_TRAINER_ADDRESS": self.trainers[trainer]}
        return OrchestratorSettings(**{k[len("CASCADE_ORCH_"):].lower(): v for k, v in env.items()})

    def start_worker(self, name: str, settings: OrchestratorSettings) -> str:
        base = self.specs["worker"]
        env = {**base.env, **self.env, "CASCADE_ORCH_BROKER_URL": settings.broker_url or "",
               "CASCADE_ORCH_TRAINER_ADDRESS": settings.trainer_address}
        argv = [a if not a.startswith("cascade-local@") else f"{name}@%h" for a in base.argv]
        self.sup.start(ProcessSpec(name, argv, env, restart=False), wait=False)
        return name

    def add_trainer(self, name: str) -> str:
        """Another trainer (own store and port): each run trains from the initial model."""
        base = self.specs["trainer"]
        port = free_port()
        env = {**base.env, "CASCADE_TRAINER_PORT": str(port), "CASCADE_TRAINER_STORE": str(self.home / name)}
        self.sup.start(ProcessSpec(name, base.argv, env, grpc_address=f"127.0.0.1:{port}", ready_timeout=300))
        self.trainers[name] = f"127.0.0.1:{port}"
        return name

    def trainer_state(self, name: str) -> trainer_pb2.TrainerState:
        with ReplicaClient(self.trainers[name], trainer_pb2_grpc.TrainerServiceStub) as c:
            return c.call("GetState", trainer_pb2.GetStateRequest(), timeout=30)

    def stop(self) -> None:
        self.sup.stop(grace=5)
        self.redis.kill()
        if self.postgres:
            self.postgres.stop()


def start_fault_stack(home: Path, model: Path, trainers: tuple[str, ...] = ("trainer", "trainer-ref")) -> FaultStack:
    """Every service of the local stack but the reward-model trainer, two teacher replicas, Redis, and
    a private PostgreSQL for the ledger when its binaries are installed (else the ledger stays SQLite)."""
    home = Path(home)
    built = local_stack(home, model)
    specs = {s.name: s for s in built.specs}
    teacher = specs["teacher"]
    port_b = free_port()
    specs["teacher-b"] = ProcessSpec("teacher-b", teacher.argv, {
        **teacher.env, "CASCADE_TEACHER_PORT": str(port_b), "CASCADE_TEACHER_STATE_FILE": str(home / "teacher-b.json")},
        grpc_address=f"127.0.0.1:{port_b}", ready_timeout=300)
    env = {**built.env, "CASCADE_ORCH_TEACHER_ADDRESS": f"{teacher.grpc_address},127.0.0.1:{port_b}"}
    sup = Supervisor(home / "logs")
    redis = PrivateRedis(home / "redis")
    redis.start()
    bindir = pg_bindir()
    postgres = PrivatePostgres(home / "postgres", bindir) if bindir else None
    if postgres:
        env["CASCADE_ORCH_LEDGER_URL"] = postgres.url
    stack = FaultStack(home, model, sup, env, specs, redis, postgres)
    services = [specs[n] for n in ("policy", "teacher", "teacher-b", "reward")]
    try:
        with ThreadPoolExecutor(len(services) + len(trainers) + 1) as pool:
            futures = [pool.submit(sup.start, s) for s in services]
            futures += [pool.submit(stack.add_trainer, t) for t in trainers]
            futures += [pool.submit(postgres.start)] if postgres else []
            for f in futures:
                f.result()
    except BaseException:
        stack.stop()
        raise
    return stack


@dataclass
class Fault:
    """Kill `target` (a supervised process, `redis`, `postgres` or `worker`) once `when(steps)` holds."""

    target: str
    when: Callable[[dict[tuple[int, int], str]], bool]
    point: str
    """Where in the cascade it fired, in words (for the report)."""
    fired_at: float | None = None


def at(stage: int, step: int, phase: str | None = None) -> Callable[[dict], bool]:
    """Trigger: step (stage, step) exists and has reached `phase` (None: it has begun)."""
    from services.orchestrator.ledger import PHASES

    def when(steps: dict[tuple[int, int], str]) -> bool:
        got = steps.get((stage, step))
        return got is not None and (phase is None or PHASES.index(got) >= PHASES.index(phase))

    return when


def default_faults(postgres: bool = True) -> list[Fault]:
    """Every fault in the order they fire; `postgres=False` leaves out the ledger database restart."""
    db = [Fault("postgres", at(0, 0, "scored"), "GRPO step 0, as TrainStep begins (ledger database SIGKILLed, "
                "crash recovery)")] if postgres else []
    return [
        Fault("reward", at(0, 0, "generated"), "GRPO step 0, before scoring"),
        *db,
        Fault("policy", at(0, 1), "GRPO step 1, while generating on weights v1"),
        Fault("trainer", at(0, 1, "scored"), "GRPO step 1, during TrainStep"),
        Fault("redis", at(1, 0), "MOPD step 0 begun (broker SIGKILLed and restarted)"),
        Fault("worker", at(1, 0, "generated"), "MOPD step 0, between generate and teacher scoring"),
        Fault("teacher", at(1, 1), "MOPD step 1 begun (replica a of 2)"),
    ]


@dataclass
class RunOutcome:
    run_id: int
    ledger: Ledger
    status: str
    seconds: float
    resumes: int = 0
    faults: list[Fault] = field(default_factory=list)
    statuses_seen: set[str] = field(default_factory=set)
    failures: list[tuple[float, str]] = field(default_factory=list)
    """(seconds since submit, error) of each time the run failed and was resumed."""


def run_cascade(stack: FaultStack, config: dict, broker: str, trainer: str, name: str,
                faults: list[Fault] | None = None, timeout: float = 900) -> RunOutcome:
    """Submit a run and drive it to a terminal state, firing `faults` on the way."""
    from services.orchestrator.tasks import submit

    settings = stack.settings(broker, trainer)
    ledger = Ledger(settings.ledger())
    run_id = ledger.create_run(config["name"], config)
    worker = stack.start_worker(f"{name}-w0", settings)
    pending = list(faults or [])
    out = RunOutcome(run_id, ledger, "pending", 0.0, faults=list(pending))
    start = time.monotonic()
    submit(run_id, settings)
    workers = 0
    while True:
        assert time.monotonic() - start < timeout, f"run {name} stuck at {ledger.resume_point(run_id)}: {stack.sup.tail(worker)}"
        status = ledger.run(run_id).status
        out.statuses_seen.add(status)
        if status == "succeeded":
            break
        if status in ("failed", "cancelled"):
            out.resumes += 1
            out.failures.append((time.monotonic() - start, ledger.run(run_id).error or ""))
            assert out.resumes <= 6, f"run {name} keeps failing: {ledger.run(run_id).error}"
            time.sleep(3)  # let the supervisor bring the killed service back
            ledger.set_run_status(run_id, "running", error="")
            submit(run_id, settings)
        steps = {(s.stage_index, s.step_index): s.phase for s in ledger.steps(run_id)}
        if pending and pending[0].when(steps):
            fault = pending.pop(0)
            fault.fired_at = time.monotonic() - start
            if fault.target == "redis":
                stack.redis.restart()
            elif fault.target == "postgres":
                stack.postgres.restart()
            elif fault.target == "worker":
                stack.sup.kill(worker)
                workers += 1
                worker = stack.start_worker(f"{name}-w{workers}", settings)
                submit(run_id, settings)  # what `cascade resume` does: the ledger says where to continue
                out.resumes += 1
            else:
                stack.sup.kill(fault.target)
        time.sleep(0.2)
    stack.sup.kill(worker)
    out.status = ledger.run(run_id).status
    out.seconds = time.monotonic() - start
    assert not pending, f"faults never fired: {[f.target for f in pending]}"
    return out


def step_table(ledger: Ledger, run_id: int) -> list[dict]:
    """Per step: position, phase, weight version and that version's sha256 (content of the weights)."""
    shas = {v: sha for v, _u, sha in ledger.weight_versions(run_id)}
    return [{"step": (s.stage_index, s.step_index), "phase": s.phase, "version": s.weight_version,
             "sha256": shas.get(s.weight_version), "replayed": s.metrics.get("train/replayed", 0.0),
             "loss": s.metrics.get("train/loss")} for s in ledger.steps(run_id)]


def compare_runs(reference: list[dict], faulted: list[dict]) -> dict[str, list]:
    """What differs between two runs' step tables: step order, versions, weight content, losses."""
    return {
        "steps": [] if [r["step"] for r in reference] == [f["step"] for f in faulted] else
        [([r["step"] for r in reference], [f["step"] for f in faulted])],
        "versions": [(r["step"], r["version"], f["version"]) for r, f in zip(reference, faulted) if r["version"] != f["version"]],
        "weights": [r["step"] for r, f in zip(reference, faulted) if r["sha256"] != f["sha256"]],
        "losses": [(r["step"], r["loss"], f["loss"]) for r, f in zip(reference, faulted) if r["loss"] != f["loss"]],
    }


def exactly_once(ledger: Ledger, run_id: int, config: dict, applied_ids: list[str]) -> dict[str, int]:
    """Steps lost (expected but not done) and applied twice (trainer journal or ledger rows)."""
    steps = ledger.steps(run_id)
    expected = {(i, k) for i, st in enumerate(config["stages"]) for k in range(st["steps"])}
    done = {(s.stage_index, s.step_index) for s in steps if s.phase == "done"}
    rows = [(s.stage_index, s.step_index) for s in steps]
    ids = [i for i in applied_ids if i.startswith(f"run-{run_id}/")]
    return {"expected": len(expected), "lost": len(expected - done), "ledger_duplicates": len(rows) - len(set(rows)),
            "applied_twice": len(ids) - len(set(ids)), "applied": len(set(ids))}


def grpc_code(fn) -> grpc.StatusCode:
    try:
        fn()
    except grpc.RpcError as err:
        return err.code()
    return grpc.StatusCode.OK
