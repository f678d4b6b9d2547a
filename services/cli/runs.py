"""`cascade up`, `cascade run`, `cascade status`: the local stack, submitting a cascade, watching it.

`up` starts every service and a Celery worker on loopback and writes `<home>/stack.env` with their
addresses; `run` and `status` read that file (unless CASCADE_ORCH_* is already set), so in
another terminal `cascade run configs/demo.yaml` finds the stack. Progress is drawn from the
ledger, which is the truth of where a run stands.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

console = Console()
TERMINAL = ("succeeded", "failed", "cancelled")


def load_stack_env(home: Path) -> None:
    """Export `<home>/stack.env` (KEY=VALUE lines) without overriding variables already set."""
    path = Path(home) / "stack.env"
    if path.exists():
        for line in path.read_text().splitlines():
            key, sep, value = line.partition("=")
            if sep and key and key not in os.environ:
                os.environ[key] = value


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def start_stack(home: Path, model: Path, log_format: str = "json", backend: str = "hf"):
    """Start the local stack; return (supervisor, stack). The caller stops the supervisor.

    SIGTERM is turned into KeyboardInterrupt so the caller's `finally` stops every service
    (they run in their own sessions and would otherwise outlive a terminated CLI).
    """
    signal.signal(signal.SIGTERM, _interrupt)
    from services.common.supervisor import Supervisor
    from services.orchestrator.stack import local_stack

    if not (Path(model) / "config.json").exists():
        raise FileNotFoundError(f"{model} is not a model folder; create one with `cascade init-model --out {model}`")
    stack = local_stack(home, model, log_format=log_format, backend=backend)
    sup = Supervisor(Path(home) / "logs")
    sup.start_all(stack.specs)
    (Path(home) / "stack.env").write_text("".join(f"{k}={v}\n" for k, v in stack.env.items()))
    os.environ.update(stack.env)
    return sup, stack


def up(
    model: Path = typer.Option(Path(".cascade/models/tiny"), help="HF model folder the stack serves and trains."),
    home: Path = typer.Option(Path(".cascade"), help="Folder of the broker, ledger, checkpoints and logs."),
) -> None:
    """Start every service and a worker locally; Ctrl-C stops them all."""
    with console.status("starting policy, teacher, reward, trainers and a worker ..."):
        sup, stack = start_stack(home, model)
    console.print(f"[green]stack up[/] — logs in {home / 'logs'}; addresses in {home / 'stack.env'}")
    for key, value in stack.env.items():
        console.print(f"  {key}={value}")
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        sup.stop()


def submit(config_path: Path, home: Path) -> int:
    """Validate the cascade (every bad field listed), record the run, start it; return its id."""
    from services.orchestrator.cascade_config import load_cascade

    load_stack_env(home)
    cascade = load_cascade(config_path)
    require_stack()
    from services.orchestrator import tasks
    from services.orchestrator.config import OrchestratorSettings
    from services.orchestrator.context import _ledger

    settings = OrchestratorSettings()  # read now: the environment may have changed since `tasks` was imported
    ledger = _ledger(settings.ledger())
    run_id = ledger.create_run(cascade.name, cascade.model_dump(mode="json"))
    tasks.submit(run_id, settings)
    return run_id


def require_stack(timeout: float = 5.0) -> None:
    """Fail in one line when the services a run needs do not answer their health checks."""
    from services.common.grpc_client import ReplicaClient
    from services.common.pb import policy_pb2_grpc
    from services.orchestrator.config import OrchestratorSettings

    address = OrchestratorSettings().policy_address
    with ReplicaClient(address, policy_pb2_grpc.PolicyServiceStub) as client:
        try:
            client.wait_ready(timeout)
        except TimeoutError:
            raise RuntimeError(f"no policy service answers at {address}: start the stack with `cascade up` "
                               "(or set CASCADE_ORCH_*_ADDRESS)") from None


def run(
    config: Path = typer.Argument(..., help="Cascade YAML or JSON file."),
    home: Path = typer.Option(Path(".cascade"), help="The stack's home (see `cascade up`)."),
    wait: bool = typer.Option(True, help="Show progress until the run ends."),
) -> None:
    """Submit a cascade to the running stack."""
    run_id = submit(config, home)
    console.print(f"submitted run {run_id}")
    if wait:
        status = watch(run_id)
        if status != "succeeded":
            raise RuntimeError(f"run {run_id} {status}")


def _ledger():
    from services.orchestrator.config import OrchestratorSettings
    from services.orchestrator.context import _ledger as cached

    return cached(OrchestratorSettings().ledger())


def progress_table(run_id: int) -> Table:
    """Stages with steps done / total, phase of the current step, and the latest eval per domain."""
    ledger = _ledger()
    run = ledger.run(run_id)
    steps = ledger.steps(run_id)
    evals = ledger.evals(run_id)
    table = Table(title=f"run {run_id} · {run.name} · {run.status}", expand=False)
    for col in ("stage", "type", "steps", "phase", "validation reward (latest)"):
        table.add_column(col)
    for i, stage in enumerate(run.config["stages"]):
        done = sum(1 for s in steps if s.stage_index == i and s.phase == "done")
        current = [s for s in steps if s.stage_index == i and s.phase != "done"]
        latest: dict[str, float] = {}
        for e in evals:
            if e.stage_index == i:
                latest[e.domain] = e.score
        bar = "█" * int(10 * done / stage["steps"]) + "·" * (10 - int(10 * done / stage["steps"]))
        table.add_row(stage["name"], stage["type"], f"{bar} {done}/{stage['steps']}",
                      current[-1].phase if current else "", " ".join(f"{d}={v:.2f}" for d, v in latest.items()))
    if run.error:
        table.caption = f"[red]{run.error}[/]"
    return table


def watch(run_id: int, poll: float = 1.0) -> str:
    """Live progress until the run ends; return its final status."""
    ledger = _ledger()
    with Live(progress_table(run_id), console=console, refresh_per_second=2) as live:
        while True:
            status = ledger.run(run_id).status
            live.update(progress_table(run_id))
            if status in TERMINAL:
                return status
            time.sleep(poll)


def status(
    run_id: int | None = typer.Argument(None, help="A run id; omit to list runs."),
    home: Path = typer.Option(Path(".cascade"), help="The stack's home."),
) -> None:
    """List runs, or show one run's stages, steps and latest validation rewards."""
    load_stack_env(home)
    ledger = _ledger()
    if run_id is not None:
        console.print(progress_table(run_id))
        return
    table = Table(title="runs")
    for col in ("id", "name", "status", "stages begun", "updated"):
        table.add_column(col)
    for r in ledger.runs():
        table.add_row(str(r.id), r.name, r.status, f"{len(r.stages)}/{len(r.config['stages'])}", f"{r.updated_at:%H:%M:%S}")
    console.print(table)


def resume(
    run_id: int = typer.Argument(..., help="The run to continue."),
    home: Path = typer.Option(Path(".cascade"), help="The stack's home."),
    wait: bool = typer.Option(True, help="Show progress until the run ends."),
) -> None:
    """Continue a run from its last recorded phase (after a crash, a failure or a restart)."""
    from services.orchestrator import tasks
    from services.orchestrator.config import OrchestratorSettings

    load_stack_env(home)
    ledger = _ledger()
    run = ledger.run(run_id)
    if run.status == "succeeded":
        raise ValueError(f"run {run_id} already succeeded; nothing to resume")
    ledger.set_run_status(run_id, "running", error="")
    tasks.submit(run_id, OrchestratorSettings())
    console.print(f"run {run_id} resumed from {ledger.resume_point(run_id)}")
    if wait and watch(run_id) != "succeeded":
        raise RuntimeError(f"run {run_id} {ledger.run(run_id).status}: {ledger.run(run_id).error}")


def report(
    run_id: int = typer.Argument(..., help="The run to report on."),
    home: Path = typer.Option(Path(".cascade"), help="The stack's home."),
) -> None:
    """Write the run's report (HTML + PNG plots) and print what its numbers say."""
    load_stack_env(home)
    path = write_report_for(run_id, home)
    console.print(f"report: {path}")


def write_report_for(run_id: int, home: Path) -> Path:
    from services.orchestrator.report import claims, teacher_records, write_report

    ledger = _ledger()
    path = write_report(ledger, run_id, Path(home).resolve() / "runs" / str(run_id) / "report")
    run = ledger.run(run_id)
    stages = run.config["stages"]
    teachers, fresh = teacher_records(ledger, run_id, stages)
    for claim, holds, evidence in claims(stages, ledger.evals(run_id), teachers, fresh):
        mark = "[green]holds[/]" if holds else "[red]does not hold[/]"
        console.print(f"{mark}: {claim}\n    {evidence}")
    return path


def cancel(
    run_id: int = typer.Argument(..., help="The run to stop."),
    home: Path = typer.Option(Path(".cascade"), help="The stack's home."),
) -> None:
    """Stop a run cleanly after the phase in flight."""
    load_stack_env(home)
    _ledger().request_cancel(run_id)
    console.print(f"run {run_id}: cancel requested")
