"""Settings of the control API (environment variables CASCADE_API_*).

Where runs are stored and where they are submitted is the orchestrator's business
(CASCADE_ORCH_LEDGER_URL, CASCADE_ORCH_BROKER_URL or CASCADE_ORCH_HOME), so the API and the
workers can never disagree about it; this file only holds what is the API's own. Listening beyond
loopback without a token is refused here, so no code path can build such a server.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.settings import ServerSettings
from services.common.tokens import exposed_without_token, is_loopback

__all__ = ["ApiSettings", "is_loopback"]

class ApiSettings(ServerSettings):
    """How the control API listens, who may call it, and what it accepts."""

    model_config = SettingsConfigDict(env_prefix="CASCADE_API_", env_file=".env", extra="ignore",
                                      validate_by_name=True, validate_by_alias=True)

    host: str = "127.0.0.1"
    """Address to bind. Loopback by default; anything else (e.g. 0.0.0.0) requires `token`."""
    port: int = Field(default=8000, ge=0, le=65535)
    """HTTP port; 0 picks a free port (logged at start-up)."""
    token: str | None = Field(default=None, validation_alias=AliasChoices("CASCADE_API_TOKEN", "token"))
    """Bearer token (CASCADE_API_TOKEN). When set, every request but /healthz must send
    `Authorization: Bearer <token>` (the run page: open `/?token=<token>` once; it keeps a cookie).
    Unset = no authentication, which is only allowed on loopback."""
    max_body_kb: int = Field(default=1024, ge=1)
    """Largest cascade accepted by POST /runs, in KiB; larger bodies get 413."""
    metrics_runs: int = Field(default=20, ge=1)
    """/metrics exports progress and rewards of this many most recent runs (bounds label cardinality)."""

    @field_validator("token")
    @classmethod
    def _blank_is_unset(cls, v: str | None) -> str | None:
        if v is not None and v.strip() == "":
            return None
        if v is not None and any(c.isspace() for c in v):
            raise ValueError("CASCADE_API_TOKEN must not contain spaces")
        return v

    @model_validator(mode="after")
    def _token_when_exposed(self) -> ApiSettings:
        refusal = exposed_without_token(self.host, self.token, "CASCADE_API_TOKEN", "CASCADE_API_HOST")
        if refusal:
            raise ValueError(refusal)
        return self
