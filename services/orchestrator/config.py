"""Settings of the orchestrator (env prefix CASCADE_ORCH_): broker, result backend, ledger, service addresses.

With nothing set, everything is embedded under `home`: a SQLite Celery broker (kombu's SQLAlchemy
transport), a SQLite result backend and a SQLite step ledger. Setting URLs moves each piece to
Redis / RabbitMQ / PostgreSQL without touching code. This module knows nothing about Celery objects
or the ledger's tables; it only resolves strings.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import SettingsConfigDict

from services.common.settings import ServerSettings

BROKER_SCHEMES = ("sqla+sqlite://", "sqla+postgresql", "redis://", "rediss://", "amqp://", "amqps://", "pyamqp://")
_ONE = r"[A-Za-z0-9_.\-\[\]:]+:[0-9]{1,5}"
ADDRESS = rf"^{_ONE}(,{_ONE})*$"
"""host:port, or several comma-separated (replicas: calls round-robin and fail over between them)."""


class OrchestratorSettings(ServerSettings):
    """Where the orchestrator's queues, results and ledger live, and where the services listen."""

    model_config = SettingsConfigDict(env_prefix="CASCADE_ORCH_", env_file=".env", extra="ignore",
                                      validate_by_name=True, validate_by_alias=True)

    home: Path = Field(default=Path(".cascade"), validation_alias=AliasChoices("CASCADE_ORCH_HOME", "CASCADE_HOME"))
    """Folder of the embedded broker, results and ledger files (CASCADE_ORCH_HOME or CASCADE_HOME)."""
    broker_url: str | None = None
    """Celery broker: unset = `sqla+sqlite:///<home>/broker.sqlite`; or redis://host:6379/0, amqp://user:pw@host//."""
    result_backend: str | None = None
    """Celery result backend: unset = `db+sqlite:///<home>/results.sqlite`; or redis://..., db+postgresql://..."""
    ledger_url: str | None = None
    """SQLAlchemy URL of the step ledger: unset = `sqlite:///<home>/ledger.sqlite`; or postgresql+psycopg://..."""
    visibility_timeout_s: float = Field(default=30.0, gt=0)
    """Seconds before an unacknowledged task of a worker that is gone is handed to another (Redis): a
    running task's visibility is renewed every third of it, so this is what a SIGKILLed worker costs."""
    broker_transport_options: dict[str, Any] = Field(default_factory=dict)
    """Extra kombu transport options (JSON) merged over the defaults, e.g. {"global_keyprefix": "team-a:"}
    (the SQL broker hands them to SQLAlchemy's create_engine)."""
    queue_prefix: str = Field(default="", pattern=r"^[a-z0-9_.-]*$")
    """Prefix of every queue name, so several cascades can share one broker (e.g. `team-a.`)."""
    policy_address: str = Field(default="127.0.0.1:50051", pattern=ADDRESS)
    """host:port of the policy service."""
    teacher_address: str = Field(default="127.0.0.1:50052", pattern=ADDRESS)
    """host:port of the teacher service used for domains without their own entry in teacher_addresses."""
    reward_address: str = Field(default="127.0.0.1:50053", pattern=ADDRESS)
    """host:port of the reward service."""
    trainer_address: str = Field(default="127.0.0.1:50054", pattern=ADDRESS)
    """host:port of the trainer service."""
    rm_trainer_address: str = Field(default="127.0.0.1:50055", pattern=ADDRESS)
    """host:port of the trainer that trains reward models (`rm` stages: a sequence-classification head)."""
    env_address: str = Field(default="127.0.0.1:50056", pattern=rf"^{_ONE}$")
    """host:port of the env service (stages with `env:`); one address: an episode lives on one replica."""
    teacher_addresses: dict[str, str] = Field(default_factory=dict)
    """Per-domain teacher nodes (JSON, e.g. {"code": "10.0.0.7:50052"}); others use teacher_address."""
    services_tls_ca: Path | None = None
    """PEM CA bundle that signed the services' certificates; set it to call every service over TLS."""
    services_tls_cert: Path | None = None
    """PEM client certificate presented to the services (mutual TLS); needs services_tls_key."""
    services_tls_key: Path | None = None
    """PEM private key of services_tls_cert."""
    services_token: str | None = None
    """Bearer token sent to the services (their CASCADE_<SERVICE>_AUTH_TOKEN); unset = auth_token."""
    rpc_timeout_s: float = Field(default=600.0, gt=0)
    """Deadline of one service call (generation of a whole batch, one train step)."""
    overlap: bool = True
    """Run what does not depend on each other at once: a batch's verifier scores and its teacher or
    reference log-probs, an evaluation's scoring and the next generation, the next step's batch drawn
    and tokenised while the current one trains. Off: every call in turn (same results, the baseline
    of bench/overlap_bench.py)."""

    @field_validator("teacher_addresses")
    @classmethod
    def _addresses(cls, v: dict[str, str]) -> dict[str, str]:
        bad = {d: a for d, a in v.items() if not re.match(ADDRESS, a)}
        if bad:
            raise ValueError(f"expected host:port per domain, got {bad}")
        return v

    def broker(self) -> str:
        """The broker URL in use (the embedded SQLite one when none is set)."""
        url = self.broker_url or f"sqla+sqlite:///{self._home()}/broker.sqlite"
        if not url.startswith(BROKER_SCHEMES):
            raise ValueError(f"CASCADE_ORCH_BROKER_URL: unsupported broker {url!r}; "
                             f"use one of {', '.join(BROKER_SCHEMES)}")
        return url

    def backend(self) -> str:
        """The result backend URL in use (embedded SQLite when none is set)."""
        return self.result_backend or f"db+sqlite:///{self._home()}/results.sqlite"

    def ledger(self) -> str:
        """The ledger's SQLAlchemy URL (embedded SQLite when none is set)."""
        return self.ledger_url or f"sqlite:///{self._home()}/ledger.sqlite"

    def teacher_for(self, domain: str) -> str:
        """host:port of the teacher serving `domain`."""
        return self.teacher_addresses.get(domain, self.teacher_address)

    def _home(self) -> Path:
        return self.home.expanduser().resolve()
