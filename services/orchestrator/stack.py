"""The local stack: every service, a Celery worker, on free loopback ports, supervised.

`local_stack(home, model)` returns the process specs and the environment that points clients at
them; `cascade up` and `cascade demo` start them with `services.common.supervisor.Supervisor`.
The same services run distributed by setting the addresses (CASCADE_ORCH_*_ADDRESS) instead.
One stack trains one run: the trainer holds that run's model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from services.common.supervisor import ProcessSpec, free_port, python_module
from services.orchestrator.celery_app import queue_names


@dataclass
class Stack:
    specs: list[ProcessSpec]
    env: dict[str, str]
    """CASCADE_ORCH_* variables that point the orchestrator (CLI, workers) at this stack."""


BACKENDS = ("hf", "vllm")
TORCH_SERVICES = ("policy", "teacher", "trainer", "rm_trainer")
"""Services whose heavy calls run torch in their own process: they lease threads from the core pool."""
VLLM_KV_CACHE_BYTES = 256 * 2**20
"""KV cache of each local vLLM engine unless CASCADE_*_KV_CACHE_MEMORY_BYTES says otherwise: on one
machine (vLLM's CPU build sizes it from host memory otherwise) the tiny model needs little."""


def backend_env(service: str, backend: str) -> dict[str, str]:
    """CASCADE_<SERVICE>_* settings of a local policy or teacher on `backend`; a vLLM engine gets a
    small KV cache and eager mode (quick start) unless the environment already sets them."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    prefix = f"CASCADE_{service.upper()}_"
    env = {f"{prefix}BACKEND": backend}
    if backend == "vllm":
        for key, value in (("KV_CACHE_MEMORY_BYTES", str(VLLM_KV_CACHE_BYTES)), ("ENFORCE_EAGER", "true")):
            env[prefix + key] = os.environ.get(prefix + key, value)
    return env


SHARE_CORES = "CASCADE_STACK_SHARE_CORES"
"""`false`: the stack's torch services do not share a core pool (on by default, see `cores_env`)."""


def cores_env(prefix: str, home: Path) -> dict[str, str]:
    """`<prefix>CORES_DIR`: the stack's one core pool, <home>/cores (services/common/cores.py), so each
    heavy call (a train step, an `hf` Generate or ScoreTokens) runs on every core of the machine and two
    at once take turns. On by default, with the pool's default `fixed` lease: a call's thread count is
    the same whatever else runs, so two runs of one cascade still give the same weights bit for bit
    (tests/reliability/test_faults.py compares them). CASCADE_STACK_SHARE_CORES=false turns it off
    (each call then runs on the one thread of OMP_NUM_THREADS=1); a pool the environment names itself
    wins."""
    if f"{prefix}CORES_DIR" in os.environ:
        return {f"{prefix}CORES_DIR": os.environ[f"{prefix}CORES_DIR"]}
    share = os.environ.get(SHARE_CORES, "").strip().lower()
    if share in ("", "1", "true", "yes", "on"):
        return {f"{prefix}CORES_DIR": str(home / "cores")}
    if share in ("0", "false", "no", "off"):
        return {}
    raise ValueError(f"{SHARE_CORES} must be true or false, got {os.environ[SHARE_CORES]!r}")


def local_stack(home: Path, model: Path, worker_concurrency: int = 1, log_format: str = "json",
                backend: str = "hf", env: bool = False) -> Stack:
    """The stack's processes. `backend` (hf | vllm) is the policy's and the teachers' generation /
    scoring backend; `env=True` (a cascade with a stage that names an `env`, see `needs_env`) adds
    the env service."""
    home, model = Path(home).resolve(), Path(model).resolve()
    engines = {name: backend_env(name, backend) for name in ("policy", "teacher")}
    ready_s = 900 if backend == "vllm" else 300  # vLLM engines take minutes to start on 2 CPU cores, and slow the rest
    ports = {name: free_port() for name in ("policy", "teacher", "reward", "trainer", "rm_trainer", "env")}
    # one torch thread outside the leased calls (loading, tokenising, the worker); a heavy call leases the pool's cores
    base = {"CASCADE_HOME": str(home), "CASCADE_LOG_FORMAT": log_format, "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1"}

    def grpc(name: str, module: str, prefix: str, extra: dict[str, str], ready: float = ready_s) -> ProcessSpec:
        cores = cores_env(prefix, home) if name in TORCH_SERVICES else {}
        env = {**base, f"{prefix}PORT": str(ports[name]), **cores, **extra}
        return ProcessSpec(name, python_module(module), env, grpc_address=f"127.0.0.1:{ports[name]}",
                           ready_timeout=ready)

    orch = {
        "CASCADE_ORCH_HOME": str(home),
        "CASCADE_ORCH_POLICY_ADDRESS": f"127.0.0.1:{ports['policy']}",
        "CASCADE_ORCH_TEACHER_ADDRESS": f"127.0.0.1:{ports['teacher']}",
        "CASCADE_ORCH_REWARD_ADDRESS": f"127.0.0.1:{ports['reward']}",
        "CASCADE_ORCH_TRAINER_ADDRESS": f"127.0.0.1:{ports['trainer']}",
        "CASCADE_ORCH_RM_TRAINER_ADDRESS": f"127.0.0.1:{ports['rm_trainer']}",
        "CASCADE_ORCH_ENV_ADDRESS": f"127.0.0.1:{ports['env']}",
    }
    # the worker inherits the environment, CASCADE_ORCH_QUEUE_PREFIX included: it consumes those queues
    prefix = os.environ.get("CASCADE_ORCH_QUEUE_PREFIX", "")
    # a restarted trainer continues from the step it last applied (checkpoint after every step)
    durable = {"CASCADE_TRAINER_AUTOSAVE": "true", "CASCADE_TRAINER_RESUME": "auto"}
    specs = [
        grpc("policy", "services.policy", "CASCADE_POLICY_", {"CASCADE_POLICY_MODEL": str(model), **engines["policy"]}),
        grpc("teacher", "services.teacher", "CASCADE_TEACHER_", {"CASCADE_TEACHER_VOCAB_SIZE": _vocab(model),
                                                                 "CASCADE_TEACHER_STATE_FILE": str(home / "teacher.json"),
                                                                 **engines["teacher"]}),
        grpc("reward", "services.reward", "CASCADE_REWARD_", {}),
        grpc("trainer", "services.trainer", "CASCADE_TRAINER_", {
            "CASCADE_TRAINER_MODEL": str(model), "CASCADE_TRAINER_STORE": str(home / "trainer"), **durable}),
        grpc("rm_trainer", "services.trainer", "CASCADE_TRAINER_", {
            "CASCADE_TRAINER_MODEL": str(model), "CASCADE_TRAINER_MODEL_KIND": "sequence_classifier",
            "CASCADE_TRAINER_STORE": str(home / "rm-trainer"), **durable}),
        ProcessSpec("worker", python_module(
            "celery", "-A", "services.orchestrator.tasks", "worker", "--pool", "threads",
            "--concurrency", str(worker_concurrency), "-Q", ",".join(queue_names(prefix)), "--loglevel", "INFO",
            "--without-gossip", "--without-mingle", "--without-heartbeat", "-n", "cascade-local@%h"),
            {**base, **orch}),
    ]
    if env:
        # unisolated tools are refused unless the host allows namespaces; the stack's tasks (workbench) need none
        specs.insert(-1, grpc("env", "services.env", "CASCADE_ENV_", {"CASCADE_ENV_SANDBOX_WORKERS": "1"}))
    return Stack(specs, orch)


def needs_env(cascade) -> bool:
    """Whether a cascade has a stage whose rollouts are episodes of an environment (`env:`)."""
    return any(getattr(stage, "env", None) for stage in cascade.stages)


def _vocab(model: Path) -> str:
    import json

    return str(json.loads((model / "config.json").read_text())["vocab_size"])
