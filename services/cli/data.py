"""`cascade data synth`: write the synthetic train / validation / SFT sets of every domain.

This module reads the command line, shows a progress bar and prints a table of counts; the data
itself comes from `services.common.synth.write_dataset`, which knows nothing of the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.common.synth import DEFAULT_SIZES, parse_domains, write_dataset

app = typer.Typer(help="Task data: synthetic domains.", no_args_is_help=True, add_completion=False)
console = Console()


@app.callback()
def data() -> None:
    """Task data: synthetic domains."""


@app.command("synth")
def synth(
    out: Annotated[
        Path, typer.Option("--out", help="Directory to write <domain>/{train,validation,sft}.jsonl into.")
    ],
    seed: Annotated[int, typer.Option("--seed", help="Seed; the same seed writes byte-identical files.")] = 0,
    domains: Annotated[str, typer.Option("--domains", help="Comma-separated domains, or 'all'.")] = "all",
    train: Annotated[
        int, typer.Option("--train", min=0, help="RL training prompts per domain.")
    ] = DEFAULT_SIZES["n_train"],
    val: Annotated[int, typer.Option("--val", min=0, help="Validation prompts per domain.")] = DEFAULT_SIZES[
        "n_val"
    ],
    sft: Annotated[int, typer.Option("--sft", min=0, help="SFT conversations per domain.")] = DEFAULT_SIZES[
        "n_sft"
    ],
    pref: Annotated[int, typer.Option("--pref", min=0, help="RLHF preference pairs.")] = DEFAULT_SIZES[
        "n_pref"
    ],
) -> None:
    """Write synthetic tasks for each domain (math, code, if, mcqa, structured, tool, rlhf, long_context, swe)."""
    names = parse_domains(domains)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        bar = progress.add_task("synthesising", total=len(names))

        def advance(domain: str) -> None:
            progress.update(bar, advance=1, description=f"synthesised {domain}")

        counts = write_dataset(
            out, seed=seed, n_train=train, n_val=val, n_sft=sft, n_pref=pref, domains=names, on_domain=advance
        )
    table = Table(title=f"synthetic data in {out} (seed {seed})")
    for column in ("domain", "train", "validation", "sft", "preferences"):
        table.add_column(column, justify="left" if column == "domain" else "right")
    for domain, row in counts.items():
        table.add_row(
            domain, *(str(row[k]) if k in row else "-" for k in ("train", "validation", "sft", "preferences"))
        )
    console.print(table)
