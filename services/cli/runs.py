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


def start_stack(home: Path, model: Path, log_format: str = "json", backend: str = "hf", env: bool = False):
    """Start the local stack; return (supervisor, stack). The caller stops the supervisor.

    SIGTERM is turned into KeyboardInterrupt so the caller's `finally` stops every service
    (they run in their own sessions and would otherwise outlive a terminated CLI).
    """
    signal.signal(signal.SIGTERM, _interrupt)
    from services.common.supervisor import Supervisor
    from services.orchestrator.stack import local_stack

    if not (Path(model) / "config.json").exists():
        raise FileNotFoundError(f"{model} is not a model folder; create one with `cascade init-model --out {model}`")
    stack = local_stack(home, model, log_format=log_format, backend=backend, env=env)
    sup = Supervisor(Path(home) / "logs")
    try:  # a signal while the services start must not leave the ones already up running
        sup.start_all(stack.specs)
        (Path(home) / "stack.env").write_text("".join(f"{k}={v}\n" for k, v in stack.env.items()))
    except BaseException:
        sup.stop(grace=5)
        raise
    os.environ.update(stack.env)
    return sup, stack


def up(
    model: Path = typer.Option(Path(".cascade/models/tiny"), help="HF model folder the stack serves and trains."),
    home: Path = typer.Option(Path(".cascade"), help="Folder of the broker, ledger, checkpoints and logs."),
) -> None:
    """Start every service and a worker locally; Ctrl-C stops them all."""
    with console.status("starting policy, teacher, reward, trainers and a worker ..."):
        sup, stack = start_stack(home, model)
    try:  # SIGTERM may arrive as soon as stack.env exists, before the banner is printed
        console.print(f"[green]stack up[/] — logs in {home / 'logs'}; addresses in {home / 'stack.env'}")
        for key, value in stack.env.items():
            console.print(f"  {key}={value}")
        console.print("pids: " + ", ".join(f"{name} {pid}" for name, pid in sup.pids().items()))
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
    from services.orchestrator.control import RunControl, run_control

    RunControl.refuse_missing_data(cascade, str(config_path))  # before the stack is asked for
    require_stack()

    return run_control().submit(cascade, source=str(config_path))


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
    from services.orchestrator.ledger import ledger_at

    return ledger_at(OrchestratorSettings().ledger())


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


def watch(run_id: int, narrator=None) -> str:
    """Progress until the run ends (bars on a terminal, plain lines elsewhere); return its final status."""
    from services.cli.progress import Narrator
    from services.cli.progress import watch as follow

    return follow(run_id, _ledger(), narrator or Narrator(None, console), progress_table)


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


def resume_text(point) -> str:
    """A ledger ResumePoint as a person reads it: `stage 2, step 3 (after generated), weight version 7`."""
    if point.finished:
        return f"the end of the cascade (weight version {point.weight_version})"
    where = f"stage {point.stage_index}, step {point.step_index}"
    done = f"after {point.phase}" if point.phase else "not begun"
    version = "no published weights yet" if point.weight_version is None else f"weight version {point.weight_version}"
    return f"{where} ({done}), {version}"


def resume(
    run_id: int = typer.Argument(..., help="The run to continue."),
    home: Path = typer.Option(Path(".cascade"), help="The stack's home."),
    wait: bool = typer.Option(True, help="Show progress until the run ends."),
) -> None:
    """Continue a run from its last recorded phase (after a crash, a failure or a restart)."""
    from services.orchestrator.control import run_control

    load_stack_env(home)
    ledger = _ledger()
    run_control().resume(run_id)
    console.print(f"run {run_id} resumed from {resume_text(ledger.resume_point(run_id))}")
    if wait and watch(run_id) != "succeeded":
        raise RuntimeError(f"run {run_id} {ledger.run(run_id).status}: {ledger.run(run_id).error}")


def report(
    run_id: int = typer.Argument(..., help="The run to report on."),
    home: Path = typer.Option(Path(".cascade"), help="The stack's home."),
    open_: bool = typer.Option(False, "--open", help="Open the HTML report in a browser (where there is one)."),
) -> None:
    """Write the run's report (HTML + PNG plots) and print what its numbers say."""
    from services.cli.reporting import open_in_browser, write_summary

    load_stack_env(home)
    summary = write_summary(_ledger(), run_id, home)
    for line in summary.lines():
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if open_ and not open_in_browser(summary.url):
        console.print(f"no browser to open here; open {summary.url} on a machine that has one", soft_wrap=True)


def cancel(
    run_id: int = typer.Argument(..., help="The run to stop."),
    home: Path = typer.Option(Path(".cascade"), help="The stack's home."),
) -> None:
    """Stop a run cleanly after the phase in flight."""
    from services.orchestrator.control import run_control

    load_stack_env(home)
    run_control().cancel(run_id)
    console.print(f"run {run_id}: cancel requested")
