"""Settings read from the environment (`CASCADE_*`) and optional `.env`, as pydantic models.

Every service's `config.py` subclasses `ServerSettings` with its own prefix, e.g.
`CASCADE_POLICY_PORT=50051`. Errors from a bad value name the variable and say how to fix it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict


class CommonSettings(BaseSettings):
    """Settings every process shares (prefix CASCADE_)."""

    model_config = SettingsConfigDict(env_prefix="CASCADE_", env_file=".env", extra="ignore")

    log_level: str = Field(default="INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$")
    """Logging level: DEBUG, INFO, WARNING or ERROR."""
    log_format: str = Field(default="json", pattern="^(json|text)$")
    """`json` (one object per line, for log shippers) or `text` (for a terminal)."""


class ServerSettings(BaseSettings):
    """Network settings of one gRPC service. Subclasses set `env_prefix` (CASCADE_<SERVICE>_)."""

    model_config = SettingsConfigDict(env_prefix="CASCADE_SERVER_", env_file=".env", extra="ignore")

    host: str = "127.0.0.1"
    """Address to bind. Loopback by default; set 0.0.0.0 to serve other nodes (then use TLS/token)."""
    port: int = Field(default=0, ge=0, le=65535)
    """gRPC port; 0 picks a free port (printed at start-up)."""
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Port of the Prometheus /metrics endpoint; unset disables it, 0 picks a free port."""
    max_message_mb: int = Field(default=256, ge=1, le=2047)
    """Largest gRPC message accepted or sent, in MiB (weights move by streaming, not one message)."""
    grace_seconds: float = Field(default=10.0, ge=0)
    """On SIGTERM, how long in-flight calls may finish before the server stops."""
    max_concurrent_rpcs: int | None = Field(default=None, ge=1)
    """Calls admitted at once; more are refused with RESOURCE_EXHAUSTED. Unset = unbounded."""
    auth_token: str | None = None
    """Shared secret; when set, every call must carry `authorization: Bearer <token>` metadata."""
    tls_cert: Path | None = None
    """PEM certificate chain of this server; with tls_key, serve TLS instead of plaintext."""
    tls_key: Path | None = None
    """PEM private key matching tls_cert."""
    tls_client_ca: Path | None = None
    """PEM CA bundle; when set, clients must present a certificate it signed (mutual TLS)."""


def format_validation_error(err: ValidationError, source: str) -> str:
    """One line per bad field: `source: field: message (got value)`."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{source}: {loc}: {e['msg']}{shown}")
    return "\n".join(lines)
