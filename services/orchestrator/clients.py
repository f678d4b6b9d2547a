"""gRPC clients of the four services, built from the orchestrator's settings.

One `ReplicaClient` per service address list (comma-separated addresses are replicas with
fail-over); teachers are looked up per domain. This module knows the addresses and stubs, nothing
about what a step does with them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from services.common.grpc_client import ClientOptions, ReplicaClient
from services.common.pb import (
    env_pb2_grpc,
    policy_pb2_grpc,
    reward_pb2_grpc,
    teacher_pb2_grpc,
    trainer_pb2_grpc,
)
from services.orchestrator.config import OrchestratorSettings


@dataclass
class ServiceClients:
    """Lazily connected clients; `close()` releases every channel."""

    settings: OrchestratorSettings
    _cache: dict[str, ReplicaClient] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    """Phases call services from several threads at once (services.orchestrator.overlap): one client each."""

    def _client(self, key: str, addresses: str, stub) -> ReplicaClient:
        with self._lock:
            if key not in self._cache:
                st = self.settings
                opts = ClientOptions(timeout=st.rpc_timeout_s, token=st.services_token or st.auth_token,
                                     max_message_mb=st.max_message_mb, tls_ca=st.services_tls_ca,
                                     tls_cert=st.services_tls_cert, tls_key=st.services_tls_key)
                self._cache[key] = ReplicaClient(addresses, stub, opts)
            return self._cache[key]

    @property
    def policy(self) -> ReplicaClient:
        return self._client("policy", self.settings.policy_address, policy_pb2_grpc.PolicyServiceStub)

    @property
    def reward(self) -> ReplicaClient:
        return self._client("reward", self.settings.reward_address, reward_pb2_grpc.RewardServiceStub)

    @property
    def trainer(self) -> ReplicaClient:
        return self._client("trainer", self.settings.trainer_address, trainer_pb2_grpc.TrainerServiceStub)

    @property
    def rm_trainer(self) -> ReplicaClient:
        """The trainer of reward models (`rm` stages): a second trainer with a classification head."""
        return self._client("rm_trainer", self.settings.rm_trainer_address, trainer_pb2_grpc.TrainerServiceStub)

    @property
    def env(self) -> ReplicaClient:
        """The env service (multi-turn episodes)."""
        return self._client("env", self.settings.env_address, env_pb2_grpc.EnvServiceStub)

    def teacher(self, domain: str) -> ReplicaClient:
        address = self.settings.teacher_for(domain)
        return self._client(f"teacher:{address}", address, teacher_pb2_grpc.TeacherServiceStub)

    def close(self) -> None:
        with self._lock:
            for client in self._cache.values():
                client.close()
            self._cache.clear()
