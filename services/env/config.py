"""Settings of the env service (environment prefix CASCADE_ENV_, e.g. CASCADE_ENV_PORT)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from services.common.settings import ServerSettings


class EnvConfig(ServerSettings):
    """Episode limits, tool budgets, the workbench tables and the sandbox of the swe / python tools."""

    model_config = SettingsConfigDict(env_prefix="CASCADE_ENV_", env_file=".env", extra="ignore")

    default_deadline_s: float = Field(default=600.0, gt=0)
    """Wall-clock life of an episode whose OpenEpisode gives no deadline, seconds."""
    max_deadline_s: float = Field(default=3600.0, gt=0)
    """Longest deadline an OpenEpisode may ask for; more is INVALID_ARGUMENT."""
    default_turns: int = Field(default=8, ge=1)
    """Assistant turns of an episode whose OpenEpisode gives no max_turns."""
    max_turns: int = Field(default=64, ge=1)
    """Most turns an OpenEpisode may ask for; more is INVALID_ARGUMENT."""
    max_env_seconds: float = Field(default=300.0, gt=0)
    """Tool seconds one episode may use, all turns together; past it: verdict LIMIT_ENV_SECONDS."""
    tool_timeout_s: float = Field(default=10.0, gt=0, le=600)
    """Wall-clock deadline of one tool call (a sandboxed run is killed at it); the tool answers with an error."""
    swe_test_timeout_s: float = Field(default=60.0, gt=0, le=600)
    """Wall-clock deadline of one run of a swe task's tests (the run_tests tool and the final judge)."""
    tool_output_chars: int = Field(default=4000, ge=64)
    """Characters of one tool result the model sees; the rest is cut with a note saying how much."""
    max_calls_per_turn: int = Field(default=16, ge=1)
    """Tool calls run per assistant turn; the calls past it come back as errors."""
    max_open_episodes: int = Field(default=1024, ge=1)
    """Episodes open at once; OpenEpisode beyond it is RESOURCE_EXHAUSTED."""
    reap_interval_s: float = Field(default=1.0, gt=0, le=60)
    """How often expired episodes are looked for and cleaned up, seconds."""
    workbench_tables: Path | None = None
    """Folder of WorkBench's tables (emails.csv, calendar_events.csv, analytics_data.csv, project_tasks.csv,
    customer_relationship_manager_data.csv, email_addresses.csv; flat or in processed/ and raw/) for
    NeMo Gym workbench rows. Unset: such rows are refused; our synthetic tasks need no folder."""
    sandbox_workers: int = Field(default=2, ge=1, le=64)
    """Sandboxed tool runs (python cells, swe tests) at once."""
    sandbox_memory_mb: int = Field(default=512, ge=64)
    """Address-space limit of each sandboxed process, MiB."""
    sandbox_nproc: int = Field(default=32, ge=2, le=4096)
    """Processes one sandboxed run may have at once (root mode)."""
    sandbox_fsize_mb: int = Field(default=16, ge=1)
    """Largest file (stdout included) a sandboxed process may write, MiB."""
    sandbox_nofile: int = Field(default=64, ge=16)
    """Open files per sandboxed process."""
    sandbox_base_uid: int | None = Field(default=None, ge=1000, le=2**31 - 1024)
    """First uid of the sandbox slots (keep the range unused); unset: a block picked from the process id."""
    sandbox_root: Path | None = None
    """Where run directories are made; default /var/lib/cascade/sandbox as root (never under /tmp)."""
    sandbox_python: str | None = None
    """Interpreter of sandboxed code; default: ours if the sandbox uid may run it, else the system's."""
    allow_unisolated: bool = False
    """Run tools without a network namespace / per-run uid when they are unavailable. Unsafe; off."""

    @model_validator(mode="after")
    def _defaults_within_maxima(self) -> EnvConfig:
        if self.default_deadline_s > self.max_deadline_s:
            raise ValueError(f"default_deadline_s ({self.default_deadline_s}) exceeds max_deadline_s ({self.max_deadline_s})")
        if self.default_turns > self.max_turns:
            raise ValueError(f"default_turns ({self.default_turns}) exceeds max_turns ({self.max_turns})")
        if self.workbench_tables is not None and not self.workbench_tables.is_dir():
            raise ValueError(f"workbench_tables: {self.workbench_tables} is not a folder")
        return self
