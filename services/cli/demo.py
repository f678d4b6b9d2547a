"""`cascade demo`: the whole cascade on a laptop — tiny model, synthetic data, every service local.

Builds the tiny model (unless it exists), starts the control API and its run page on loopback, then
the local stack on the embedded default (SQLite broker and ledger), runs `configs/demo.yaml` and
prints, before the first step, the page's address and where the report will be written. Progress
is bars on a terminal and plain lines elsewhere (a line a minute at least), and every line also goes
to `<home>/logs/demo.log`. At the end: the stage x domain table, each claim with its figures, and
the report's paths. Everything it writes lives under `--home`.

Its floats, and its services', are computed on the `avx2` float path unless `--float-path native`
(services/common/floatpath.py): the committed figures' path, the same on every AMD EPYC measured; on
another vendor's CPU (an Intel Xeon measured) it is that CPU's own draw, and the demo says so.

The run page is secured by a token generated for this demo and shown only in the printed link
(`/?token=...` sets a cookie once); the API listens on 127.0.0.1 only.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from services.cli.progress import DEFAULT_EVERY_S, Narrator
from services.common.floatpath import cpu_vendor, describe, pin_float_path, vendor_note

console = Console()
API_HOST = "127.0.0.1"


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def page_spec(home: Path, port: int, token: str):
    """The control API as a supervised process on loopback, reading the demo's ledger."""
    from services.common.supervisor import ProcessSpec, python_module

    env = {"CASCADE_HOME": str(home), "CASCADE_ORCH_HOME": str(home), "CASCADE_API_HOST": API_HOST,
           "CASCADE_API_PORT": str(port), "CASCADE_API_TOKEN": token, "CASCADE_LOG_FORMAT": "json"}
    return ProcessSpec("api", python_module("services.api"), env, http_port=port, ready_timeout=120)


def page_url(port: int, token: str) -> str:
    return f"http://{API_HOST}:{port}/?token={token}"


def demo(
    config: Path = typer.Option(Path("configs/demo.yaml"), help="Cascade to run."),
    home: Path = typer.Option(Path(".cascade"), help="Folder for the model, data, ledger, checkpoints and logs."),
    keep_serving: bool = typer.Option(False, "--keep-serving",
                                      help="Keep the run page up after the demo ends (until Ctrl-C)."),
    progress_every: float = typer.Option(DEFAULT_EVERY_S, "--progress-every", min=0.5,
                                         envvar="CASCADE_DEMO_PROGRESS_EVERY",
                                         help="Longest silence, in seconds, of the plain progress lines "
                                              "(output that is not a terminal, and the log)."),
    api_port: int = typer.Option(0, "--api-port", min=0, max=65535,
                                 help="Port of the run page on 127.0.0.1; 0 picks a free one."),
    backend: str = typer.Option("hf", "--backend", help="Policy and teacher backend: hf (transformers) or vllm "
                                "(vLLM's engine; on CPU its CPU build, installed by `make install`)."),
    float_path: str = typer.Option("avx2", "--float-path", envvar="CASCADE_DEMO_FLOAT_PATH",
                                   help="CPU kernels of every float: avx2 (the committed figures' path, the same "
                                        "floats on every AMD EPYC measured) or native (this CPU's fastest kernels, "
                                        "its own draw of the figures)."),
) -> None:
    """Run the demo cascade end to end on this machine, with its run page live."""
    from services.cli.reporting import report_dir, write_summary
    from services.cli.runs import _ledger, start_stack, submit, watch
    from services.common.supervisor import Supervisor, free_port
    from services.orchestrator.cascade_config import load_cascade

    signal.signal(signal.SIGTERM, _interrupt)  # so every `finally` below stops what it started
    pin_float_path(float_path, field="--float-path")  # before torch computes here; the services inherit it
    home = home.resolve()
    os.environ.setdefault("CASCADE_HOME", str(home))
    os.environ["CASCADE_ORCH_HOME"] = str(home)
    cascade = load_cascade(config)
    narrator = Narrator(home / "logs" / "demo.log", console, progress_every)
    narrator.say(f"demo of {config}: {len(cascade.stages)} stages; this log: {narrator.log_path}", to_terminal=True)
    narrator.say(f"float path: {describe(float_path)}", to_terminal=True)
    if note := vendor_note(float_path, cpu_vendor()):
        narrator.say(f"note: {note}", to_terminal=True)
    model = Path(cascade.model)
    started = time.monotonic()
    if not (model / "config.json").exists():
        from services.common.tinymodel import init_model

        with narrator.waiting(f"building the tiny model in {model}"):
            init_model(model, preset="tiny", seed=cascade.seed)
    token, port = secrets.token_urlsafe(18), api_port or free_port(API_HOST)
    page = Supervisor(home / "logs")
    try:
        with narrator.waiting("starting the control API"):
            page.start(page_spec(home, port, token))
        url = page_url(port, token)
        narrator.say(f"run page (live): {url}  (127.0.0.1 only; the token in the link was made for this demo)",
                     to_terminal=True)
        with narrator.waiting("starting policy, teacher, reward, trainers and a Celery worker"):
            from services.orchestrator.stack import needs_env

            sup, _stack = start_stack(home, model, backend=backend, env=needs_env(cascade))
        try:
            with narrator.waiting("submitting the run"):
                run_id = submit(config, home)
            narrator.say(f"run {run_id}: the report will be written to {report_dir(home, run_id) / 'report.html'}; "
                         f"service logs in {home / 'logs'}", to_terminal=True)
            status = watch(run_id, narrator)
        finally:
            with narrator.waiting("stopping the services"):
                sup.stop()
        narrator.show("")
        narrator.show("[bold]validation reward per stage (start → end)[/]")
        narrator.show(reward_table(run_id))
        with narrator.waiting("writing the report"):
            summary = write_summary(_ledger(), run_id, home)
        for line in summary.lines():
            narrator.say(line, to_terminal=True)
        narrator.say(f"run {run_id} {status} in {time.monotonic() - started:.0f}s; run page: {url}", to_terminal=True)
        if keep_serving:
            narrator.say("--keep-serving: the run page stays up; Ctrl-C (or SIGTERM) stops it", to_terminal=True)
            _serve_until_interrupted()
    finally:
        page.stop()
    if status != "succeeded":
        raise RuntimeError(f"run {run_id} {status}")


def _serve_until_interrupted() -> None:
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass


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
