"""`cascade serve SERVICE`: run one gRPC service in the foreground (config from CASCADE_* env)."""

from __future__ import annotations

import importlib

import typer

SERVICES = ("policy", "teacher", "reward", "env", "trainer", "api")


def serve(
    service: str = typer.Argument(..., help=f"One of: {', '.join(SERVICES)}."),
) -> None:
    """Run SERVICE until SIGTERM; settings come from CASCADE_<SERVICE>_* environment variables."""
    if service not in SERVICES:
        raise ValueError(f"service must be one of {', '.join(SERVICES)}, got {service!r}")
    module = importlib.import_module(f"services.{service}.__main__")
    module.main()
