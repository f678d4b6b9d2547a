"""An in-process stack for the step kinds' phases: the real cores behind their real servicers, no gRPC.

Each service's servicer is called in this process the way ReplicaClient calls it over a channel
(`call(method, request)`; `call_each` the same, one replica), with the tiny model on CPU, a real
SQLite ledger and real step artefacts. Nothing of ours is replaced: the steps talk to the very
objects the servers wrap. One stack serves the whole package (module start-ups are slow).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from services.orchestrator.cascade_config import CascadeConfig
from services.orchestrator.config import OrchestratorSettings
from services.orchestrator.context import RunContext
from services.orchestrator.ledger import Ledger


class _CallContext:
    """What a servicer asks of grpc's ServicerContext: the time left of the call."""

    def __init__(self, timeout: float | None):
        self.timeout = timeout

    def time_remaining(self) -> float | None:
        return self.timeout


class InProcess:
    """A servicer called in process with ReplicaClient's call signature."""

    def __init__(self, servicer):
        self.servicer = servicer

    def call(self, method: str, request, timeout: float | None = None):
        return asyncio.run(getattr(self.servicer, method)(request, _CallContext(timeout)))

    call_each = call


@dataclass
class InProcessClients:
    policy: InProcess
    reward: InProcess
    trainer: InProcess
    rm_trainer: InProcess
    teachers: InProcess
    env: InProcess

    def teacher(self, domain: str) -> InProcess:
        return self.teachers


def _trainer(model, store, kind: str) -> InProcess:
    from services.trainer.config import TrainerConfig
    from services.trainer.core import TrainerCore
    from services.trainer.distributed import Coordinator
    from services.trainer.engine import start_rank
    from services.trainer.server import TrainerServicer

    cfg = TrainerConfig(model=str(model), store=store, model_kind=kind, device="cpu")
    start_rank(cfg)
    servicer = TrainerServicer()
    servicer.attach(Coordinator(TrainerCore(cfg)))
    return InProcess(servicer)


@pytest.fixture(scope="package")
def clients(tiny_model_dir, tmp_path_factory):
    from services.env.config import EnvConfig
    from services.env.core import EnvCore
    from services.env.server import EnvServicer
    from services.policy.config import PolicyConfig
    from services.policy.core import PolicyCore
    from services.policy.server import PolicyServicer
    from services.reward.config import RewardConfig
    from services.reward.core import RewardCore
    from services.reward.server import RewardServicer
    from services.teacher.config import TeacherConfig
    from services.teacher.core import TeacherCore
    from services.teacher.server import TeacherServicer

    home = tmp_path_factory.mktemp("steps-stack")
    env = EnvCore(EnvConfig(sandbox_workers=1, sandbox_base_uid=63800, tool_timeout_s=3.0))
    reward = RewardCore(RewardConfig(verify_workers=1, sandbox_workers=1, allow_unisolated=True))
    out = InProcessClients(
        policy=InProcess(PolicyServicer(PolicyCore.build(PolicyConfig(model=str(tiny_model_dir))))),
        reward=InProcess(RewardServicer(reward)),
        trainer=_trainer(tiny_model_dir, home / "trainer", "causal_lm"),
        rm_trainer=_trainer(tiny_model_dir, home / "rm-trainer", "sequence_classifier"),
        teachers=InProcess(TeacherServicer(TeacherCore(TeacherConfig()))),
        env=InProcess(EnvServicer(env)),
    )
    yield out
    env.close_all()
    close = getattr(reward, "close", None)
    if close:
        close()


@pytest.fixture(scope="package")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("steps-home")


@pytest.fixture(scope="package")
def ledger(home):
    """One ledger for the package: run ids (and so step ids, which the trainer keeps) never repeat."""
    led = Ledger(f"sqlite:///{home}/ledger.db")
    yield led
    led.close()


@pytest.fixture
def run(clients, tiny_model_dir, home, ledger):
    """run(stages) -> a RunContext of a new run of `stages` (tiny model, synthetic data, seed 0)."""

    def make(stages: list[dict]) -> RunContext:
        config = CascadeConfig.model_validate({"name": "steps", "seed": 0, "model": str(tiny_model_dir),
                                               "data": "synthetic", "stages": stages})
        run_id = ledger.create_run("steps", config.model_dump(mode="json"))
        ctx = RunContext(run_id, config, OrchestratorSettings(home=home), ledger, clients)
        # every run starts from the initial model, whatever an earlier test left the policy serving
        from services.orchestrator.weights import load_policy_weights

        load_policy_weights(ctx, 0)
        return ctx

    return make
