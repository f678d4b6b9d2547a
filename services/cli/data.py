"""`cascade data synth`: write the synthetic train / validation / SFT sets of every domain (and, with
`--env`, of environments: their episode tasks and, for workbench and python, SFT conversations played
on the env core);
`cascade data import`: turn a downloaded copy of NVIDIA's released RL data into a data folder.

This module reads the command line, shows a progress bar and prints a table of counts; the data
itself comes from `services.common.synth.write_dataset` and `services.common.data_import`, which
know nothing of the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from services.common.errors import InvalidArgument
from services.common.synth import DEFAULT_SIZES, parse_domains, write_dataset

app = typer.Typer(help="Task data: synthetic domains, released data.", no_args_is_help=True, add_completion=False)
console = Console()


@app.callback()
def data() -> None:
    """Task data: synthetic domains, released data."""


def parse_envs(text: str, domains: list[str]) -> list[str]:
    """ "workbench" -> ["workbench"]; "" -> []. An environment that is also a domain being written
    (`swe`) is refused: both would write `<name>/train.jsonl`."""
    from services.common.synth.multiturn import ENVIRONMENT_NAMES

    names = list(dict.fromkeys(e.strip() for e in text.split(",") if e.strip()))
    unknown = [e for e in names if e not in ENVIRONMENT_NAMES]
    if unknown:
        raise InvalidArgument("env", f"unknown environment(s) {unknown}; choose from {list(ENVIRONMENT_NAMES)}")
    clash = [e for e in names if e in domains]
    if clash:
        raise InvalidArgument("env", f"{clash} would overwrite the domain(s) of the same name; leave them out "
                              "of --domains or write them to another folder")
    return names


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
    env: Annotated[str, typer.Option(
        "--env", help="Comma-separated environments (workbench, swe, python) whose episode tasks are written too, "
        "as <env>/{train,validation}.jsonl; workbench and python also get solved conversations (--env-sft of "
        "them), their tool results from the env core (<env>/sft.jsonl). Not with a domain of the same name.")] = "",
    env_sft: Annotated[int | None, typer.Option(
        "--env-sft", min=0, help="SFT conversations per environment of --env (default: --sft).")] = None,
) -> None:
    """Write synthetic tasks for each domain (math, code, if, mcqa, structured, tool, rlhf, long_context, swe)."""
    names = parse_domains(domains)
    envs = parse_envs(env, names)
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
    if envs:
        from services.common.synth.multiturn import write_env_dataset

        with console.status(f"writing the tasks of {', '.join(envs)}"):
            write_env_dataset(out, seed=seed, n_train=train, n_val=val, envs=envs)
            for name in envs:
                counts[name] = {"train": train, "validation": val}
            from services.env.demonstrations import DEMONSTRATIONS, write_sft

            for name in (e for e in envs if e in DEMONSTRATIONS):
                n = sft if env_sft is None else env_sft
                write_sft(out, name, seed=seed, n=n)
                counts[name]["sft"] = n
    table = Table(title=f"synthetic data in {out} (seed {seed})")
    for column in ("domain", "train", "validation", "sft", "preferences"):
        table.add_column(column, justify="left" if column == "domain" else "right")
    for domain, row in counts.items():
        table.add_row(
            domain, *(str(row[k]) if k in row else "-" for k in ("train", "validation", "sft", "preferences"))
        )
    console.print(table)


@app.command("import")
def import_(
    src: Annotated[Path, typer.Argument(help="Folder of the downloaded .jsonl / .jsonl.gz files (any depth).")],
    out: Annotated[Path, typer.Option("--out", help="New folder to write <domain>/{train,validation}.jsonl into.")],
    seed: Annotated[int, typer.Option("--seed", help="Seed of the held-out validation split.")] = 0,
    val_fraction: Annotated[
        float, typer.Option("--val-fraction", min=0.0, max=1.0, help="Share of each domain's rows held out.")
    ] = 0.02,
    val_max: Annotated[int, typer.Option("--val-max", min=0, help="At most this many validation rows per domain.")] = 512,
) -> None:
    """Stream NeMo Gym rows into a cascade data folder, each row unchanged, its domain from its shape."""
    from services.common.data_import import import_folder

    err = Console(stderr=True)
    shown = 0

    def report(line: str) -> None:
        nonlocal shown
        shown += 1
        if shown <= 50:
            err.print(f"[yellow]skipped[/] {line}", highlight=False, soft_wrap=True, markup=True)

    with console.status(f"importing {src}"):
        result = import_folder(src, out, seed=seed, val_fraction=val_fraction, val_max=val_max, on_problem=report)
    if shown > 50:
        err.print(f"... and {shown - 50} more lines left out")
    table = Table(title=f"{out} (seed {seed})")
    for column in ("domain", "train", "validation"):
        table.add_column(column, justify="left" if column == "domain" else "right")
    for domain, row in sorted(result.counts.items()):
        table.add_row(domain, str(row["train"]), str(row["validation"]))
    console.print(table)
    console.print(f"malformed lines left out: {result.malformed}; repeated ids left out: {result.duplicates}")
