"""The Cascade side of the comparison: a fresh local stack per run, a cascade submitted, the ledger read.

`CascadeStack(home, model, workers=W, teachers=R)` starts what `cascade up` starts
(services.orchestrator.stack.local_stack: policy, teacher, reward, trainer, Celery worker on the
embedded SQLite broker) minus the reward-model trainer no stage here uses, with W worker processes
(each consuming every queue) and R teacher processes listed comma-separated in
CASCADE_ORCH_TEACHER_ADDRESS. A fresh stack per run keeps runs independent: the trainer and policy
start from the same weights every time. `run(config)` submits one cascade, waits for it and returns
per-step records read back from the ledger: the interval between consecutive steps' completion
(what a user waits per step, Celery hops and the runner's `advance` included), the ledger's
per-phase timings, generated tokens and the mean training reward. This module knows nothing about TRL.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from sqlalchemy import select

from services.common.supervisor import ProcessSpec, Supervisor, free_port
from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.ledger import Ledger, Step
from services.orchestrator.stack import local_stack
from services.orchestrator.tasks import submit

TERMINAL = ("succeeded", "failed", "cancelled")


class CascadeStack:
    """A local stack with `workers` Celery workers and `teachers` teacher replicas, the policy and
    teachers on `backend` (hf | vllm) (context manager)."""

    def __init__(self, home: Path, model: Path, workers: int = 1, teachers: int = 1, backend: str = "hf"):
        self.home = Path(home).resolve()
        built = local_stack(self.home, model, log_format="json", backend=backend)
        specs = {s.name: s for s in built.specs if s.name != "rm_trainer"}
        teacher = specs.pop("teacher")
        teacher_specs = [teacher] + [_replica(teacher, i) for i in range(2, teachers + 1)]
        self.env = {**built.env, "CASCADE_ORCH_TEACHER_ADDRESS": ",".join(s.grpc_address for s in teacher_specs)}
        worker = specs.pop("worker")
        self.workers = [ProcessSpec(f"worker-{i}", [a.replace("cascade-local@", f"cascade-bench-{i}@") for a in worker.argv],
                                    {**worker.env, **self.env}, restart=False) for i in range(1, workers + 1)]
        self.services = list(specs.values()) + teacher_specs
        self.sup = Supervisor(self.home / "logs")

    def __enter__(self) -> CascadeStack:
        with ThreadPoolExecutor(len(self.services)) as pool:
            for f in [pool.submit(self.sup.start, s) for s in self.services]:
                f.result()
        for w in self.workers:
            self.sup.start(w, wait=False)
        return self

    def __exit__(self, *exc) -> None:
        self.sup.stop(grace=5)

    def settings(self) -> OrchestratorSettings:
        return OrchestratorSettings(**{k[len("CASCADE_ORCH_"):].lower(): v for k, v in self.env.items()})

    def run(self, config: dict, timeout: float = 900.0) -> dict:
        """Run one cascade to its end; {"steps": [...], "evals": {(stage, step): score}, "final": uri}."""
        settings = self.settings()
        ledger = Ledger(settings.ledger())
        config = CascadeConfig.model_validate(config).model_dump(mode="json")
        run_id = ledger.create_run(config["name"], config)
        submit(run_id, settings)
        deadline = time.monotonic() + timeout
        while ledger.run(run_id).status not in TERMINAL:
            if time.monotonic() > deadline:
                raise TimeoutError(f"run {run_id} did not finish: {ledger.resume_point(run_id)}; "
                                   f"worker: {self.sup.tail('worker-1')}")
            time.sleep(0.25)
        run = ledger.run(run_id)
        if run.status != "succeeded":
            raise RuntimeError(f"cascade run {run_id} {run.status}: {run.error}; worker: {self.sup.tail('worker-1')}")
        out = {"steps": step_records(ledger, run_id),
               "evals": {f"{e.stage_index}:{e.step_index}": e.score for e in ledger.evals(run_id)},
               "final": max(ledger.weight_versions(run_id))[1]}
        ledger.close()
        return out


def _replica(spec: ProcessSpec, index: int) -> ProcessSpec:
    """Another teacher process on its own port (same model, same settings)."""
    port = free_port()
    env = {**spec.env, "CASCADE_TEACHER_PORT": str(port)}
    return replace(spec, name=f"teacher-{index}", env=env, grpc_address=f"127.0.0.1:{port}")


def step_records(ledger: Ledger, run_id: int) -> list[dict]:
    """Per step, in order: seconds since the previous step was done (since its own start for the
    first), the ledger's phase timings, generated tokens and the mean training reward."""
    with ledger.engine.connect() as conn:
        rows = conn.execute(select(Step.step_index, Step.created_at, Step.updated_at, Step.timings, Step.metrics,
                                   Step.phase).where(Step.run_id == run_id).order_by(Step.stage_index, Step.step_index)).all()
    out, previous = [], None
    for index, created, done, timings, metrics, phase in rows:
        assert phase == "done", f"step {index} ended at phase {phase}"
        start = created if previous is None else previous
        out.append({"step": index, "seconds": (done - start).total_seconds(), "phases": dict(timings),
                    "tokens": int(metrics.get("generated_tokens", 0)), "reward_mean": metrics.get("reward_mean")})
        previous = done
    return out
